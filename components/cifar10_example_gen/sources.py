"""Readers for the three CIFAR-10 layouts, treating every byte as untrusted.

A source is split into shards (one batch file, or one class folder) so that a
Beam pipeline can read shards in parallel. Every problem raises `SourceError`
with a message that starts with the offending file, before anything is written.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np

from components.cifar10_example_gen.records import _parse_batch, batch_file_records, read_shard
from components.cifar10_example_gen.shards import (
    BINARY,
    IMAGE_FOLDER,
    PYTHON,
    TEST,
    TRAIN,
    Record,
    Shard,
    SourceError,
    _archive_batches,
    _batch_shards,
    _classify_member,
    _exists,
    _gfile,
    _is_archive,
    _is_archive_file,
    _is_dir,
    _is_remote,
    _walk_files,
    _with_training_data,
    list_shards,
)
from components.contract import IMAGE_SHAPE, NUM_CLASSES

# The reader's public names; the layouts and decoding live in `shards` and `records`.
__all__ = [
    "BINARY",
    "IMAGE_FOLDER",
    "PYTHON",
    "TEST",
    "TRAIN",
    "EvalCarver",
    "Record",
    "Shard",
    "SourceError",
    "batch_file_records",
    "count_records",
    "fingerprint",
    "inspect_source",
    "list_shards",
    "load_arrays",
    "read_group",
    "read_groups",
    "read_shard",
    "split_group",
]


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


def inspect_source(source: str) -> tuple[list[Shard], dict[str, int]]:
    """Reads and checks every record of the source once (layout, batch files, record
    sizes, labels, pickles, archive members); its shards and the record count per source
    split. An archive is read in a single pass.

    Pure numpy, no TensorFlow: the CLI runs it before it imports TFX, so bad input is
    refused in seconds. A local run checks its source twice in one process, in the CLI and
    in the ExampleGen's executor (its guarantee on every runner); the second check of local
    files that have not changed since (same inode, size, modification and change times)
    is the first one's result, not another read."""
    identity = _local_identity(source)
    if identity is None:
        return _inspect(source)
    shards, counts = _checked(source, identity)
    return list(shards), dict(counts)


def _local_identity(source: str) -> tuple | None:
    """What changes when a local file or any file of a local folder is replaced or written;
    None for a remote source or one that is not there (the check says why)."""
    if _is_remote(source) or not os.path.exists(source):
        return None

    def stat(path: str) -> tuple:
        info = os.stat(path)
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    if not os.path.isdir(source):
        return stat(source)
    return tuple((rel, stat(os.path.join(source, rel))) for rel in _walk_files(source))


@functools.lru_cache(maxsize=16)
def _checked(source: str, identity: tuple) -> tuple[tuple[Shard, ...], tuple]:
    """`_inspect` for one identity of a local source; a SourceError is raised, not kept."""
    shards, counts = _inspect(source)
    return tuple(shards), tuple(counts.items())


def _inspect(source: str) -> tuple[list[Shard], dict[str, int]]:
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
            info = _gfile(path).stat(path)
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
