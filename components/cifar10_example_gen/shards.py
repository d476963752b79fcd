"""Where a CIFAR-10 source's records are: its layout (binary or python batch files, in an archive
or a folder, or an image folder per class), its shards, and archive members checked before any
byte of them is read. Every problem raises `SourceError` naming the file."""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from isal import igzip, isal_zlib

from components.contract import IMAGE_BYTES, LABEL_NAMES
from components.storage import object_store

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
    # The image's summary features, in contract.IMAGE_SUMMARY_FEATURES order (summaries.py).
    summary: tuple[float, ...] = ()


def _is_archive(path: str) -> bool:
    return path.endswith((".tar.gz", ".tgz", ".tar"))


def _gfile(path: str = ""):
    """tf.io.gfile, for remote sources only (gs://, and s3:// through tensorflow-io)."""
    return object_store.gfile(path)


def _is_remote(path: str) -> bool:
    return "://" in path


class _RemoteFile(io.RawIOBase):
    """A tf.io.gfile GFile as a raw binary stream. GFile has read() but no readinto(), which
    gzip's reader (and so igzip's) calls: a gzipped archive on gs:// or s3:// failed with
    AttributeError before anything was read."""

    def __init__(self, handle) -> None:
        self._handle = handle

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._handle.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._handle.seek(offset, whence)
        return self._handle.tell()

    def tell(self) -> int:
        return self._handle.tell()

    def close(self) -> None:
        if not self.closed:
            self._handle.close()
        super().close()


def _open_binary(path: str) -> BinaryIO:
    if _is_remote(path):
        raw = _RemoteFile(_gfile(path).GFile(path, "rb"))
        return io.BufferedReader(raw, buffer_size=1 << 20)  # type: ignore[return-value]
    return open(path, "rb")


def _is_dir(path: str) -> bool:
    return _gfile(path).isdir(path) if _is_remote(path) else os.path.isdir(path)


def _exists(path: str) -> bool:
    return _gfile(path).exists(path) if _is_remote(path) else os.path.exists(path)


def _walk_files(root: str) -> list[str]:
    """Relative paths of all files under root, sorted for determinism."""
    found = []
    if _is_remote(root):
        for dirpath, _, filenames in _gfile(root).walk(root):
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


# What tarfile and the inflaters raise for a corrupt or cut-off archive.
_ARCHIVE_ERRORS = (tarfile.TarError, EOFError, zlib.error, isal_zlib.error, OSError)


@contextlib.contextmanager
def _tar_stream(raw: BinaryIO) -> Iterator[tarfile.TarFile]:
    """The archive as a forward-only tar stream, a gzipped one inflated by ISA-L's igzip:
    the same bytes as zlib's in about half the time, and inflating is most of a pass over
    the archive (CIFAR-10's pixels barely compress). Read in blocks of 1 MiB, not tarfile's
    10 KiB."""
    magic = raw.read(2)
    raw.seek(0)
    if magic != b"\x1f\x8b":  # a plain tar, or another compression tarfile detects
        with tarfile.open(fileobj=raw, mode="r|*", bufsize=1 << 20) as tar:
            yield tar
        return
    with (
        igzip.IGzipFile(fileobj=raw, mode="rb") as inflated,
        tarfile.open(fileobj=inflated, mode="r|", bufsize=1 << 20) as tar,
    ):
        yield tar


def _read_to_end(path: str, tar: tarfile.TarFile) -> None:
    """After the last member, the archive must end as a whole one does: tarfile stops
    silently at a stream that ends between members (a tar copied so far reads as a
    smaller archive), so the end-of-archive block must have been read whole; the rest is
    read too, so that a gzipped archive's trailer (its CRC and length) is checked."""
    whole_end_block = tar.fileobj.tell() == tar.offset + tarfile.BLOCKSIZE
    while tar.fileobj.read(1 << 20):
        pass
    if not whole_end_block:
        raise SourceError(
            f"{path}: corrupt or truncated archive (it ends before its end-of-archive block)"
        )


def _archive_members(path: str) -> list[str]:
    """Names of the archive's regular files; every member's name and link are checked,
    and the archive is read to its end."""
    try:
        with _open_binary(path) as raw, _tar_stream(raw) as tar:
            members = tar.getmembers()
            _read_to_end(path, tar)
    except _ARCHIVE_ERRORS as err:
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


def _archive_batches(path: str, members: set[str] | None) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) of the named members (None: of every batch file), in one pass
    over the archive; every member passed on the way is checked as `_archive_members` does,
    and so is the archive's end once every member is passed."""
    try:
        with _open_binary(path) as raw, _tar_stream(raw) as tar:
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
            _read_to_end(path, tar)  # not reached when the caller stops early
    except _ARCHIVE_ERRORS as err:
        raise SourceError(f"{path}: corrupt or truncated archive ({err})") from err
