"""TFRecord files in gzip format whose deflate blocks are stored, not compressed.

TFX declares ExampleGen output as gzipped TFRecords and every reader (TFDV, TFMA,
tf.data, Beam) finds the compression from the `.gz` suffix. CIFAR-10 pixels barely
compress (zlib level 6 keeps 94% of the bytes) yet compressing them cost a third of the
ingest step, so the files stay valid gzip that any reader opens, at no compression cost.
"""

from __future__ import annotations

import gzip
import struct
from typing import BinaryIO

import apache_beam as beam
import google_crc32c
from apache_beam.io import tfrecordio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

SUFFIX = ".gz"


class _StoredGzipFile:
    """A write-only gzip stream at compression level 0 that closes the file under it."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._gzip = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=0, mtime=0)

    def write(self, data: bytes) -> int:
        return self._gzip.write(data)

    def close(self) -> None:
        try:
            self._gzip.close()
        finally:
            self._raw.close()


def _masked_crc32c(data: bytes) -> int:
    """Beam's masked CRC-32C (the TFRecord checksum), computed by google-crc32c."""
    return tfrecordio._TFRecordUtil._masked_crc32c(data, crc32c_fn=google_crc32c.value)


def tfrecord(value: bytes) -> bytes:
    """One TFRecord: length, masked CRC-32C of the length, the bytes, their masked CRC-32C.
    Beam frames records the same way, but through crcmod, 12x slower than google-crc32c's
    hardware CRC (0.37 against 0.03 s for 50,000 CIFAR-10 examples)."""
    length = struct.pack("<Q", len(value))
    return b"".join(
        [
            length,
            struct.pack("<I", _masked_crc32c(length)),
            value,
            struct.pack("<I", _masked_crc32c(value)),
        ]
    )


class _StoredGzipTFRecordSink(tfrecordio._TFRecordSink):  # Beam's TFRecord file sink
    def open(self, temp_path: str) -> _StoredGzipFile:
        return _StoredGzipFile(
            FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
        )

    def write_encoded_record(self, file_handle: _StoredGzipFile, value: bytes) -> None:
        file_handle.write(tfrecord(value))


class WriteStoredGzipTFRecords(beam.PTransform):
    """Serialized records to `<file_path_prefix>-SSSSS-of-NNNNN.gz`, through Beam's
    file sink (temporary files, renamed into place when the write finishes)."""

    def __init__(self, file_path_prefix: str):
        super().__init__()
        self._sink = _StoredGzipTFRecordSink(
            file_path_prefix,
            coder=beam.coders.BytesCoder(),
            file_name_suffix=SUFFIX,
            num_shards=0,
            shard_name_template=None,
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def expand(self, records: beam.PCollection) -> beam.pvalue.PDone:
        return records | beam.io.Write(self._sink)
