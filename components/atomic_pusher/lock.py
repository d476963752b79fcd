"""The serving folder's push lock, `<base>/.push.lock`: one commit (choose a version number,
move the staged files in) at a time, so a later commit always gets a higher number.
`push_lock` yields the holder: `reserve(highest)` gives the version number, `check()` is
called immediately before the commit point and raises PushLeaseLost when the lock was lost.

Local paths: `fcntl.flock` on the file, which the kernel releases when the holder dies; it
cannot be lost. Refused on network and FUSE mounts (`refuse_network_mount`), where flock
excludes nothing between hosts: the bucket's gs:// or s3:// URL is the way there.

gs:// and s3://: a fenced lease object (components/atomic_pusher/lease.py). Other schemes
are refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator

from components.atomic_pusher import lease
from components.storage import served_versions

LOCK_NAME = ".push.lock"
TIMEOUT_SECONDS = 600  # waiting longer than this for the lock is an error
POLL_SECONDS = 0.2
MOUNTS = "/proc/self/mounts"
# Filesystem types (or their prefixes) shared between hosts, where flock holds on one only.
NETWORK_FILESYSTEMS = ("fuse", "nfs", "cifs", "smb", "9p", "ceph", "glusterfs", "lustre", "afs")


class PushLockTimeout(RuntimeError):
    """Another push held the serving folder's push lock for longer than the timeout."""


def _owner() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


@contextlib.contextmanager
def push_lock(base_directory: str, timeout: float | None = None) -> Iterator:
    """Holds `<base_directory>/.push.lock` for the block and yields the holder; raises
    PushLockTimeout after `timeout` seconds (default TIMEOUT_SECONDS) of waiting."""
    path = served_versions.join(base_directory, LOCK_NAME)
    timeout = TIMEOUT_SECONDS if timeout is None else timeout
    hold = _remote_lease if "://" in base_directory else _local_flock
    with hold(path, time.monotonic() + timeout, timeout) as holder:
        yield holder


def mount_type(path: str, mounts: str | None = None) -> str:
    """The filesystem type of the mount `path` is on ('' when the mounts file, by default
    MOUNTS, is unreadable)."""
    try:
        with open(mounts or MOUNTS) as handle:
            entries = [line.split()[1:3] for line in handle if len(line.split()) >= 3]
    except OSError:
        return ""
    path = os.path.realpath(path)
    best, kind = "", ""
    for point, fstype in entries:
        point = point.replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def refuse_network_mount(path: str, mounts: str | None = None) -> None:
    """UnsafeStore (one line) when `path` is on a network or FUSE mount."""
    kind = mount_type(path, mounts)
    if kind.startswith(NETWORK_FILESYSTEMS):
        raise lease.UnsafeStore(
            f"{path} is on a {kind} mount, where a lock on one host excludes no other: push to"
            " the bucket's own URL (gs://BUCKET/PATH or s3://BUCKET/PATH) instead"
        )


class _Flocked:
    """The holder of a local flock: never lost; numbers past the highest folder."""

    def reserve(self, highest: int) -> int:
        return lease.next_version(highest)

    def check(self) -> None:
        pass


def _timed_out(path: str, timeout: float, holder: str) -> PushLockTimeout:
    return PushLockTimeout(
        f"another push has held {path} for over {timeout:.0f} s (holder: {holder or 'unknown'});"
        " nothing pushed"
    )


@contextlib.contextmanager
def _local_flock(path: str, deadline: float, timeout: float) -> Iterator[_Flocked]:
    refuse_network_mount(os.path.dirname(path))
    with open(path, "a+") as handle:  # closing it releases the lock
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    raise _timed_out(path, timeout, handle.read().strip()) from None
                time.sleep(POLL_SECONDS)
        handle.seek(0)
        handle.truncate()
        handle.write(_owner())  # for the timeout message of whoever waits
        handle.flush()
        yield _Flocked()


@contextlib.contextmanager
def _remote_lease(path: str, deadline: float, timeout: float) -> Iterator[lease.Lease]:
    held = lease.acquire(path, deadline, lambda holder: _timed_out(path, timeout, holder))
    try:
        yield held
    finally:
        # After a commit the version is visible: a lease that cannot be marked released
        # only expires on its own (and a failed push's own error is the one to report).
        try:
            held.release()
        except Exception as err:  # any store error gets the same warning
            logging.warning(
                "the push lease was not released (%s); it expires by itself: %s", path, err
            )
