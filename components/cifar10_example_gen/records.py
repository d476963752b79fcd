"""A shard's bytes turned into checked records: binary and python batch files (pickles read with
numpy types only), and image files decoded to 32x32 RGB. Every problem raises `SourceError`
naming the file and the record."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from collections.abc import Iterator

import numpy as np

from components.cifar10_example_gen.shards import (
    BINARY,
    BINARY_RECORD_BYTES,
    IMAGE_FOLDER,
    IMAGE_SUFFIXES,
    MAX_MEMBER_BYTES,
    Record,
    Shard,
    SourceError,
    _archive_batches,
    _is_archive,
    _open_binary,
    _walk_files,
)
from components.cifar10_example_gen.summaries import summarize
from components.contract import IMAGE_BYTES, IMAGE_SHAPE, LABEL_NAMES, NUM_CLASSES
from components.runtime.progress import progress_logger


def _read_member(shard: Shard) -> tuple[str, bytes]:
    """(display name, bytes) of a batch file, with a size cap. From an archive, the tar is
    streamed up to the member and no further; `read_group` reads all of them in one pass."""
    if _is_archive(shard.source):
        with contextlib.closing(_archive_batches(shard.source, {shard.member})) as batches:
            for name, data in batches:
                return f"{shard.source}:{name}", data
        raise SourceError(f"{shard.source}: no member '{shard.member}' (changed since listed?)")
    path = os.path.join(shard.source, shard.member)
    with _open_binary(path) as handle:
        data = handle.read(MAX_MEMBER_BYTES + 1)
    if len(data) > MAX_MEMBER_BYTES:
        raise SourceError(f"{path}: too large for a batch file")
    return path, data


def _planar_to_hwc(rows: np.ndarray) -> np.ndarray:
    """CIFAR stores each image as 1024 red, then green, then blue bytes."""
    return rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).reshape(-1, IMAGE_BYTES)


def _check_labels(where: str, labels: np.ndarray) -> None:
    bad = np.flatnonzero((labels < 0) | (labels >= NUM_CLASSES))
    if bad.size:
        raise SourceError(
            f"{where}: record {int(bad[0])} has label {int(labels[bad[0]])}, "
            f"outside 0..{NUM_CLASSES - 1}"
        )


def _binary_records(where: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    if not data:
        raise SourceError(f"{where}: the batch file holds no images (0 bytes)")
    if len(data) % BINARY_RECORD_BYTES:
        raise SourceError(
            f"{where}: {len(data)} bytes is not a positive multiple of the "
            f"{BINARY_RECORD_BYTES}-byte record size (1 label byte + {IMAGE_BYTES} pixels)"
        )
    table = np.frombuffer(data, dtype=np.uint8).reshape(-1, BINARY_RECORD_BYTES)
    labels = table[:, 0].astype(np.int64)
    _check_labels(where, labels)
    return labels, table[:, 1:]


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Allows only the globals that a pickled numpy array needs, so a malicious
    batch file cannot make the unpickler import and call arbitrary code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(
                f"refused to load global '{module}.{name}' (only numpy arrays are allowed)"
            )
        return super().find_class(module, name)


def _python_records(where: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = _NumpyOnlyUnpickler(io.BytesIO(data), encoding="bytes").load()
    except Exception as err:  # any failure of untrusted pickle data is a bad file
        raise SourceError(f"{where}: not a valid CIFAR-10 python batch ({err})") from err
    if not isinstance(batch, dict):
        raise SourceError(f"{where}: expected a pickled dict, got {type(batch).__name__}")
    pixels = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if (
        not isinstance(pixels, np.ndarray)
        or pixels.dtype != np.uint8
        or pixels.ndim != 2
        or pixels.shape[1] != IMAGE_BYTES
    ):
        raise SourceError(f"{where}: 'data' must be a uint8 array of shape (N, {IMAGE_BYTES})")
    if not pixels.shape[0]:
        raise SourceError(f"{where}: the batch file holds no images (0 rows in 'data')")
    labels = np.asarray(labels if labels is not None else [], dtype=np.int64)
    if labels.shape != (pixels.shape[0],):
        raise SourceError(f"{where}: {labels.size} labels for {pixels.shape[0]} images")
    _check_labels(where, labels)
    return labels, pixels


def _decode_image(path: str) -> bytes:
    from PIL import Image, UnidentifiedImageError

    try:
        with _open_binary(path) as handle, Image.open(handle) as image:
            if image.size != (32, 32):
                raise SourceError(
                    f"{path}: image is {image.size[0]}x{image.size[1]}, expected 32x32"
                )
            return np.asarray(image.convert("RGB"), dtype=np.uint8).tobytes()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        if isinstance(err, SourceError):
            raise
        raise SourceError(f"{path}: not a readable PNG or JPEG image ({err})") from err


def _parse_batch(shard: Shard, where: str, data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """A batch file's checked labels and its pixel rows as stored (planar, not yet HWC: the
    source check needs only the labels, and the transposing copy is a quarter of a pass)."""
    parse = _binary_records if shard.layout == BINARY else _python_records
    return parse(where, data)


def batch_file_records(shard: Shard, where: str, data: bytes) -> list[Record]:
    """The checked records of one batch file's bytes, in their stored order."""
    labels, planar = _parse_batch(shard, where, data)
    images = _planar_to_hwc(planar)
    base = os.path.basename(shard.member)
    pixels = images.reshape((-1, *IMAGE_SHAPE))
    summaries = np.stack(list(summarize(pixels).values()), axis=1).tolist()
    records = [
        Record(f"{base}:{index}", int(label), image.tobytes(), tuple(summary))
        for index, (label, image, summary) in enumerate(zip(labels, images, summaries))
    ]
    progress_logger().debug(
        "Cifar10ExampleGen: read %s, %d records (%s split)", where, len(records), shard.split
    )
    return records


def read_shard(shard: Shard) -> Iterator[Record]:
    """Yields the shard's records in their stored order."""
    if shard.layout == IMAGE_FOLDER:
        label = LABEL_NAMES.index(os.path.basename(shard.member))
        folder = os.path.join(shard.source, shard.member)
        count = 0
        for rel in _walk_files(folder):
            if rel.lower().endswith(IMAGE_SUFFIXES):
                count += 1
                image = _decode_image(os.path.join(folder, rel))
                pixels = np.frombuffer(image, np.uint8).reshape((1, *IMAGE_SHAPE))
                summary = tuple(float(value[0]) for value in summarize(pixels).values())
                yield Record(os.path.join(shard.member, rel), label, image, summary)
        progress_logger().debug("Cifar10ExampleGen: read %s, %d images", folder, count)
        return
    yield from batch_file_records(shard, *_read_member(shard))
