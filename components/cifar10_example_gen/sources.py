"""Readers for the three CIFAR-10 layouts, treating every byte as untrusted.

A source is split into shards (one batch file, or one class folder) so that a
Beam pipeline can read shards in parallel. Every problem raises `SourceError`
with a message that starts with the offending file, before anything is written.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import posixpath
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import BinaryIO

import numpy as np

from components.contract import IMAGE_BYTES, IMAGE_SHAPE, LABEL_NAMES, NUM_CLASSES
from components.progress import progress_logger

BINARY_RECORD_BYTES = 1 + IMAGE_BYTES
# The largest official batch file is 30,730,000 bytes; anything far larger is
# not CIFAR-10 and must not be read into memory.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")

BINARY, PYTHON, IMAGE_FOLDER = "binary", "python", "image_folder"
TRAIN, TEST = "train", "test"

_BINARY_NAME = re.compile(r"^(data_batch_\d+|test_batch)\.bin$")
_PYTHON_NAME = re.compile(r"^(data_batch_\d+|test_batch)$")


class SourceError(ValueError):
    """The data source is unusable; the message names the file and the problem."""


@dataclass(frozen=True)
class Shard:
    """One independently readable piece of a source."""

    source: str  # archive file or root folder
    member: str  # path inside the archive, or relative to the root folder
    layout: str  # BINARY, PYTHON or IMAGE_FOLDER
    split: str  # TRAIN or TEST, as the source labels it


@dataclass(frozen=True)
class Record:
    record_id: str
    label: int
    image: bytes  # 32x32x3 uint8, row-major HWC


def _is_archive(path: str) -> bool:
    return path.endswith((".tar.gz", ".tgz", ".tar"))


def _gfile():
    import tensorflow as tf  # only needed for remote (gs://) sources

    return tf.io.gfile


def _is_remote(path: str) -> bool:
    return "://" in path


def _open_binary(path: str) -> BinaryIO:
    if _is_remote(path):
        return _gfile().GFile(path, "rb")
    return open(path, "rb")


def _is_dir(path: str) -> bool:
    return _gfile().isdir(path) if _is_remote(path) else os.path.isdir(path)


def _exists(path: str) -> bool:
    return _gfile().exists(path) if _is_remote(path) else os.path.exists(path)


def _walk_files(root: str) -> list[str]:
    """Relative paths of all files under root, sorted for determinism."""
    found = []
    if _is_remote(root):
        for dirpath, _, filenames in _gfile().walk(root):
            rel = os.path.relpath(dirpath, root)
            found.extend(os.path.normpath(os.path.join(rel, f)) for f in filenames)
    else:
        for dirpath, _, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            found.extend(os.path.normpath(os.path.join(rel, f)) for f in filenames)
    return sorted(found)


def _classify_member(name: str) -> tuple[str, str] | None:
    """(layout, split) for a batch file name, or None if it is not one."""
    base = os.path.basename(name)
    for layout, pattern in ((BINARY, _BINARY_NAME), (PYTHON, _PYTHON_NAME)):
        match = pattern.match(base)
        if match:
            return layout, TEST if match.group(1) == "test_batch" else TRAIN
    return None


def _batch_shards(source: str, names: Iterable[str]) -> list[Shard]:
    shards = []
    for name in names:
        kind = _classify_member(name)
        if kind:
            shards.append(Shard(source, name, kind[0], kind[1]))
    layouts = {s.layout for s in shards}
    if len(layouts) > 1:
        raise SourceError(
            f"{source}: mixes binary (*.bin) and python (pickled) batch files; "
            "use one CIFAR-10 release"
        )
    return shards


def _unsafe(member: tarfile.TarInfo) -> str:
    """Why extracting `member` could write or point outside the archive's folder ('' if
    it could not). Nothing here extracts archives, but such a member means the archive
    is not an official release, and other tools (tar -x) would follow it."""
    name = member.name.replace("\\", "/")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    if ".." in name.split("/"):
        return "'..' in its path"
    if member.issym() or member.islnk():
        target = member.linkname.replace("\\", "/")
        if target.startswith("/") or re.match(r"^[A-Za-z]:", target):
            return f"link to the absolute path '{member.linkname}'"
        # a symlink's target is relative to its own folder, a hard link's to the archive root
        base = posixpath.dirname(name) if member.issym() else ""
        if posixpath.normpath(posixpath.join(base, target)).split("/")[0] == "..":
            return f"link to '{member.linkname}', outside the archive"
    if member.isdev():
        return "device file"
    return ""


def _refuse_if_unsafe(path: str, member: tarfile.TarInfo) -> None:
    reason = _unsafe(member)
    if reason:
        raise SourceError(
            f"{path}: unsafe archive member '{member.name}' ({reason}); refusing the whole archive"
        )


def _archive_members(path: str) -> list[str]:
    """Names of the archive's regular files; every member's name and link are checked."""
    try:
        with _open_binary(path) as raw, tarfile.open(fileobj=raw, mode="r:*") as tar:
            members = tar.getmembers()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise SourceError(f"{path}: corrupt or truncated archive ({err})") from err
    for member in members:
        _refuse_if_unsafe(path, member)
    return [m.name for m in members if m.isfile()]


def _image_folder_shards(root: str, files: list[str]) -> list[Shard]:
    shards = set()
    for rel in files:
        parts = rel.split(os.sep)
        if len(parts) != 3 or parts[0] not in (TRAIN, TEST):
            continue
        split, class_name, _ = parts
        if class_name not in LABEL_NAMES:
            raise SourceError(
                f"{os.path.join(root, split, class_name)}: unknown class folder "
                f"'{class_name}'; expected one of {', '.join(LABEL_NAMES)}"
            )
        shards.add(Shard(root, os.path.join(split, class_name), IMAGE_FOLDER, split))
    return sorted(shards, key=lambda s: s.member)


def _with_training_data(source: str, shards: list[Shard]) -> list[Shard]:
    """The shards, training shards first, if there are any training shards."""
    if not any(s.split == TRAIN for s in shards):
        raise SourceError(
            f"{source}: no CIFAR-10 training data found (expected data_batch_N.bin, "
            "data_batch_N (python release) or train/<class_name>/*.png)"
        )
    return sorted(shards, key=lambda s: (s.split != TRAIN, s.member))


def _is_archive_file(source: str) -> bool:
    return _is_archive(source) and not _is_dir(source)


def list_shards(source: str) -> list[Shard]:
    """Detects the layout of `source` and lists its shards, training shards first."""
    if not _exists(source):
        raise SourceError(f"{source}: no such file or folder")
    if _is_dir(source):
        files = _walk_files(source)
        shards = _batch_shards(source, files)
        if not shards and _is_dir(os.path.join(source, TRAIN)):
            shards = _image_folder_shards(source, files)
    elif _is_archive(source):
        shards = _batch_shards(source, _archive_members(source))
    else:
        raise SourceError(
            f"{source}: not a CIFAR-10 source; expected a .tar.gz archive, an extracted "
            "cifar-10-batches-bin/ or cifar-10-batches-py/ folder, or an image folder "
            "<split>/<class_name>/*.png"
        )
    return _with_training_data(source, shards)


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
    if not data or len(data) % BINARY_RECORD_BYTES:
        raise SourceError(
            f"{where}: {len(data)} bytes is not a positive multiple of the "
            f"{BINARY_RECORD_BYTES}-byte record size (1 label byte + {IMAGE_BYTES} pixels)"
        )
    table = np.frombuffer(data, dtype=np.uint8).reshape(-1, BINARY_RECORD_BYTES)
    labels = table[:, 0].astype(np.int64)
    _check_labels(where, labels)
    return labels, _planar_to_hwc(table[:, 1:])


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
    labels = np.asarray(labels if labels is not None else [], dtype=np.int64)
    if labels.shape != (pixels.shape[0],):
        raise SourceError(f"{where}: {labels.size} labels for {pixels.shape[0]} images")
    _check_labels(where, labels)
    return labels, _planar_to_hwc(pixels)


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
    parse = _binary_records if shard.layout == BINARY else _python_records
    return parse(where, data)


def batch_file_records(shard: Shard, where: str, data: bytes) -> list[Record]:
    """The checked records of one batch file's bytes, in their stored order."""
    labels, images = _parse_batch(shard, where, data)
    base = os.path.basename(shard.member)
    records = [
        Record(f"{base}:{index}", int(label), image.tobytes())
        for index, (label, image) in enumerate(zip(labels, images))
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
                yield Record(
                    os.path.join(shard.member, rel), label, _decode_image(os.path.join(folder, rel))
                )
        progress_logger().debug("Cifar10ExampleGen: read %s, %d images", folder, count)
        return
    yield from batch_file_records(shard, *_read_member(shard))


def read_groups(shards: Sequence[Shard]) -> list[tuple[Shard, ...]]:
    """The shards in units that are each read in one pass: all batch files of an archive
    together (a gzipped tar cannot seek, so reading its 5 official batch files one by one
    decompresses 15 files' worth), every file or folder shard on its own."""
    archived = tuple(s for s in shards if _is_archive(s.source))
    return ([archived] if archived else []) + [(s,) for s in shards if not _is_archive(s.source)]


def read_group(group: Sequence[Shard]) -> Iterator[tuple[Shard, Record]]:
    """(shard, record) for every record of one `read_groups` unit."""
    if not _is_archive(group[0].source):
        for shard in group:
            yield from ((shard, record) for record in read_shard(shard))
        return
    by_member = {shard.member: shard for shard in group}
    for name, data in _archive_batches(group[0].source, set(by_member)):
        shard = by_member[name]
        yield from ((shard, r) for r in batch_file_records(shard, f"{shard.source}:{name}", data))


class EvalCarver:
    """Deterministic, class-balanced choice of eval records from training data.

    Within each shard the k-th record of a class (k = 0, 1, ...) goes to eval
    when floor((k + 1) * f) > floor(k * f): exactly a fraction f of every class,
    spread evenly through the file, identical on every run and every runner.
    """

    def __init__(self, eval_fraction: float):
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        fraction = Fraction(str(eval_fraction)).limit_denominator(100_000)
        # exact integer arithmetic: Fraction objects cost 50 us a record
        self._numerator, self._denominator = fraction.numerator, fraction.denominator

    def is_eval(self, rank_in_class: int) -> bool:
        n, d = self._numerator, self._denominator
        return (rank_in_class + 1) * n // d > rank_in_class * n // d


def split_group(
    group: Sequence[Shard], has_test_split: bool, eval_fraction: float
) -> Iterator[tuple[str, Record]]:
    """Yields ('train' | 'eval', record) for every record of one `read_groups` unit."""
    carver = EvalCarver(eval_fraction)
    seen_per_class: dict[str, list[int]] = {}
    for shard, record in read_group(group):
        if shard.split == TEST or has_test_split:
            yield ("eval" if shard.split == TEST else "train"), record
            continue
        seen = seen_per_class.setdefault(shard.member, [0] * NUM_CLASSES)
        rank = seen[record.label]
        seen[record.label] += 1
        yield ("eval" if carver.is_eval(rank) else "train"), record


def _archive_batches(path: str, members: set[str] | None) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of the named members (None: of every batch file), in one pass
    over the archive; every member passed on the way is checked as `_archive_members` does."""
    try:
        with _open_binary(path) as raw, tarfile.open(fileobj=raw, mode="r|*") as tar:
            for member in tar:
                _refuse_if_unsafe(path, member)
                wanted = members is None and _classify_member(member.name) is not None
                if not member.isfile() or not (wanted or (members and member.name in members)):
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise SourceError(
                        f"{path}:{member.name}: {member.size} bytes is too large for a batch file"
                    )
                handle = tar.extractfile(member)
                yield member.name, handle.read() if handle else b""
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise SourceError(f"{path}: corrupt or truncated archive ({err})") from err


def inspect_source(source: str) -> tuple[list[Shard], dict[str, int]]:
    """Reads and checks every record of the source once (layout, batch files, record
    sizes, labels, pickles, archive members); its shards and the record count per source
    split. An archive is read in a single pass.

    Pure numpy, no TensorFlow: the CLI runs it before it imports TFX, so bad input is
    refused in seconds."""
    counts = {TRAIN: 0, TEST: 0}
    if not (_exists(source) and _is_archive_file(source)):
        shards = list_shards(source)
        for shard in shards:
            counts[shard.split] += sum(1 for _ in read_shard(shard))
        return shards, counts
    names = []
    for name, data in _archive_batches(source, None):
        layout, split = _classify_member(name) or ("", "")
        names.append(name)
        shard = Shard(source, name, layout, split)
        counts[split] += len(_parse_batch(shard, f"{source}:{name}", data)[0])
    return _with_training_data(source, _batch_shards(source, names)), counts


def count_records(source: str) -> dict[str, int]:
    """The record count per source split, after `inspect_source` checked every record."""
    return inspect_source(source)[1]


def load_arrays(
    source: str, eval_fraction: float = 0.1
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """All records as {split: (images uint8 [N,32,32,3], labels int64 [N])}.

    Used by benchmarks and by `predict --samples`; the pipeline itself reads through Beam.
    """
    shards = list_shards(source)
    has_test = any(s.split == TEST for s in shards)
    images: dict[str, list[bytes]] = {"train": [], "eval": []}
    labels: dict[str, list[int]] = {"train": [], "eval": []}
    for group in read_groups(shards):
        for split, record in split_group(group, has_test, eval_fraction):
            images[split].append(record.image)
            labels[split].append(record.label)
    return {
        split: (
            np.frombuffer(b"".join(images[split]), np.uint8).reshape((-1,) + IMAGE_SHAPE),
            np.asarray(labels[split], np.int64),
        )
        for split in images
    }


def fingerprint(source: str) -> str:
    """Cheap identity of a source's contents (sizes and modification times), so that
    replacing data at the same path invalidates the pipeline cache."""
    import hashlib

    def stat(path: str) -> str:
        if _is_remote(path):
            info = _gfile().stat(path)
            return f"{info.length}:{info.mtime_nsec}"
        info = os.stat(path)
        return f"{info.st_size}:{info.st_mtime_ns}"

    if not _exists(source):
        raise SourceError(f"{source}: no such file or folder")
    if not _is_dir(source):
        return stat(source)
    digest = hashlib.sha256()
    for rel in _walk_files(source):
        digest.update(f"{rel}={stat(os.path.join(source, rel))};".encode())
    return digest.hexdigest()[:16]
