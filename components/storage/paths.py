"""Paths that may be local or remote (gs://, s3://): the one set of helpers every module uses
to read them, through tf.io.gfile (object_store's, which also knows s3://) where remote and
the standard library where local, so local runs need no TensorFlow file system at all."""

from __future__ import annotations

import os
import posixpath

from components.storage import object_store


def is_remote(path: str) -> bool:
    return "://" in path


def _gfile(path: str):
    return object_store.gfile(path)


def join(*parts: str) -> str:
    return posixpath.join(*parts) if is_remote(parts[0]) else os.path.join(*parts)


def exists(path: str) -> bool:
    return _gfile(path).exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _gfile(path).isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    """Names directly under `path`, sorted, without a trailing slash; empty when it does not
    exist."""
    if is_remote(path):
        return sorted(n.rstrip("/") for n in _gfile(path).listdir(path)) if exists(path) else []
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def walk(root: str) -> list[str]:
    """Every file under `root`, sorted."""
    if is_remote(root):
        found = (
            join(folder, name) for folder, _, names in _gfile(root).walk(root) for name in names
        )
        return sorted(found)
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)


def remove(path: str) -> None:
    """A file or object (nothing when there is none)."""
    if is_remote(path):
        if exists(path):
            _gfile(path).remove(path)
    elif os.path.lexists(path):
        os.remove(path)


def modified(path: str) -> float:
    """When a file or object last changed, in seconds since the epoch."""
    if is_remote(path):
        return _gfile(path).stat(path).mtime_nsec / 1e9
    return os.stat(path).st_mtime


def open_binary(path: str):
    return _gfile(path).GFile(path, "rb") if is_remote(path) else open(path, "rb")


def read_text(path: str) -> str:
    if is_remote(path):
        with _gfile(path).GFile(path) as handle:
            return handle.read()
    with open(path) as handle:
        return handle.read()


class DamagedRecord(ValueError):
    """A JSON record the project wrote cannot be read back; the message names the file."""


def read_json(path: str):
    """The JSON record at `path`; DamagedRecord (naming it) when it is not whole JSON."""
    import json

    try:
        return json.loads(read_text(path))
    except (ValueError, UnicodeDecodeError) as err:
        raise DamagedRecord(f"{path}: damaged record, not JSON ({err})") from None


def write_bytes(path: str, data: bytes) -> None:
    """`data` to a file or object, its folder made first where local."""
    if is_remote(path):
        object_store.write_bytes(path, data)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = f"{path}.partial-{os.getpid()}"
    try:  # whole or not at all: a full disk leaves no half-written file
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def remove_tree(path: str) -> None:
    """A folder and all under it (nothing when it does not exist); on s3:// also the folder
    entry SeaweedFS leaves (object_store.remove_tree). The one way every module removes one."""
    if object_store.is_s3(path):
        object_store.remove_tree(path)
    elif is_remote(path):
        if exists(path):
            _gfile(path).rmtree(path)
    elif os.path.isdir(path):
        import shutil

        shutil.rmtree(path)
