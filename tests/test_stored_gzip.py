"""ExampleGen's files: gzip that every reader opens, with the pixels stored uncompressed."""

import gzip
import os

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.testing.util import assert_that, equal_to

from components.cifar10_example_gen.stored_gzip import WriteStoredGzipTFRecords, tfrecord


def _records(count: int) -> list[bytes]:
    """Half noise, half zeros: deflate at any level would shrink these by about half."""
    rng = np.random.default_rng(0)
    noise = [rng.integers(0, 256, 1536, dtype=np.uint8).tobytes() for _ in range(count)]
    return [n + bytes(1536) + bytes([i]) for i, n in enumerate(noise)]


def test_written_files_are_stored_gzip_that_tf_data_and_beam_read(tmp_path):
    records = _records(50)
    with beam.Pipeline() as pipeline:
        _ = pipeline | beam.Create(records) | WriteStoredGzipTFRecords(str(tmp_path / "data"))
    (name,) = os.listdir(tmp_path)
    assert name.startswith("data-") and name.endswith(".gz")
    path = tmp_path / name
    raw = gzip.decompress(path.read_bytes())
    # 16 bytes of TFRecord framing per record; stored blocks add a few bytes per 64 KiB
    assert len(raw) == sum(len(r) + 16 for r in records)
    assert len(raw) < path.stat().st_size < len(raw) * 1.01
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(path), compression_type="GZIP")]
    assert sorted(read) == sorted(records)
    with beam.Pipeline() as pipeline:
        again = pipeline | beam.io.ReadFromTFRecord(str(tmp_path / "data-*"))
        assert_that(again, equal_to(records))


class _Collect:
    def __init__(self):
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def test_records_are_framed_byte_for_byte_as_beam_frames_them():
    for record in [b"", b"x", *_records(5), bytes(range(256)) * 300]:
        beam_framed = _Collect()
        _TFRecordUtil.write_record(beam_framed, record)
        assert tfrecord(record) == beam_framed.data
