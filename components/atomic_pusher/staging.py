"""Staging folders, `<base>/.staging-<uuid4 hex>/`: where one push copies its model before
the commit moves the files into a version. Each holds a `LEASE` (JSON: host, pid, started
unix time) written before anything else, so another push can tell a live push's staging
from a dead one's and removes only the dead.

Before its files are moved into a version, a push writes `COMMIT` (the version) into its
staging folder, under the push lock. A push that takes the lock later and finds a COMMIT
knows its writer is done or lost the lock (stalled past the lease, or died): it removes that
staging folder before the version folder it fed (`clear_committing`), so a stalled writer
finds its files gone and can never complete that version.

Dead: the lease started more than DEAD_AFTER_SECONDS ago (without a lease: the newest file
is that old), or, on a local disk and the same host, nobody holds the lease file's flock
any more (each push holds it while it lives; the kernel drops it when the process dies).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator

from tfx.dsl.io import fileio

from components.storage import object_store, served_versions
from components.storage.paths import remove_tree

STAGING_PREFIX = ".staging-"
LEASE_FILE = "LEASE"
COMMIT_FILE = "COMMIT"
# Far longer than any push takes (a CIFAR model's copy takes seconds, a large model's on an
# object store minutes): a staging folder this old belongs to a push that died.
DEAD_AFTER_SECONDS = 6 * 3600


def _remote(path: str) -> bool:
    return "://" in path


@contextlib.contextmanager
def staging_folder(base_directory: str) -> Iterator[str]:
    """A new staging folder with this push's lease in it, removed when the block ends
    (whether the push committed it or failed)."""
    staging = served_versions.join(base_directory, f"{STAGING_PREFIX}{uuid.uuid4().hex}")
    fileio.makedirs(staging)
    held = _write_lease(staging)
    try:
        yield staging
    finally:
        with contextlib.suppress(fileio.NotFoundError):
            if object_store.is_s3(staging):
                remove_tree(staging)  # its folder entry too on s3://
            elif fileio.exists(staging):
                fileio.rmtree(staging)
        if held is not None:
            held.close()


def _write_lease(staging: str):
    """Writes the lease; on a local disk also holds its flock while the push lives (the
    open file is returned, closing it releases the flock)."""
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})
    lease = served_versions.join(staging, LEASE_FILE)
    if _remote(staging):
        with fileio.open(lease, "w") as handle:
            handle.write(record)
        return None
    # Locked under another name, then renamed: a LEASE is never there unlocked while alive.
    handle = open(f"{lease}.new", "w")  # held open until the push ends
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.write(record)
    handle.flush()
    os.rename(f"{lease}.new", lease)
    return handle


def _read_lease(staging: str) -> dict | None:
    path = served_versions.join(staging, LEASE_FILE)
    try:
        lease = json.loads(served_versions.read_text(path))
    except Exception:  # absent, vanishing or garbled: judged by its files' times
        return None
    return lease if isinstance(lease, dict) else None


def _newest_file_time(staging: str) -> float | None:
    """Modification time of the newest file under `staging` or of the folder itself."""
    times = []
    files = [os.path.join(root, n) for root, _, names in fileio.walk(staging) for n in names]
    for path in [staging, *files]:
        with contextlib.suppress(Exception):  # a file moved or removed meanwhile
            times.append(fileio.stat(path).mtime_nsec / 1e9)
    return max(times) if times else None


def _owner_gone(staging: str) -> bool:
    """Local disks: True when nobody holds the lease file's flock (its push has ended)."""
    try:
        with open(os.path.join(staging, LEASE_FILE)) as handle:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
    except (BlockingIOError, FileNotFoundError):
        return False


def is_dead(staging: str, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    lease = _read_lease(staging)
    if lease is None:
        newest = _newest_file_time(staging)
        return newest is not None and now - newest > DEAD_AFTER_SECONDS
    if now - float(lease.get("started", 0)) > DEAD_AFTER_SECONDS:
        return True
    same_host = lease.get("host") == socket.gethostname()
    return not _remote(staging) and same_host and _owner_gone(staging)


def clear_dead_staging(base_directory: str) -> None:
    """Removes the staging folders of pushes that died; a live push's stays."""
    for name in served_versions.listdir(base_directory):
        staging = served_versions.join(base_directory, name)
        if name.startswith(STAGING_PREFIX) and is_dead(staging):
            with contextlib.suppress(fileio.NotFoundError):  # another push removed it first
                remove_tree(staging)


def mark_committing(staging: str, version: str) -> None:
    """Under the push lock, before the first file moves: which version this staging feeds."""
    with fileio.open(served_versions.join(staging, COMMIT_FILE), "w") as handle:
        handle.write(version)


def clear_committing(base_directory: str) -> None:
    """Under the push lock only: removes the staging folders of commits that ended or lost
    the lock (those with a COMMIT), so none of them can move another file into a version."""
    for name in served_versions.listdir(base_directory):
        staging = served_versions.join(base_directory, name)
        if name.startswith(STAGING_PREFIX) and served_versions.exists(
            served_versions.join(staging, COMMIT_FILE)
        ):
            with contextlib.suppress(fileio.NotFoundError):
                remove_tree(staging)
