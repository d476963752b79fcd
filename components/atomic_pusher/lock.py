"""The serving folder's push lock, `<base>/.push.lock`: one commit (choose a version number,
move the staged files in) at a time, so a later commit always gets a higher number.
`push_lock` yields the holder: `reserve(highest)` gives the version number, `check()` is
called immediately before the commit point and raises PushLeaseLost when the lock was lost.

Local paths: `fcntl.flock` on the file, which the kernel releases when the holder dies, and
a heartbeat the holder writes into it every LEASE_SECONDS / 3. A holder that stops beating
(SIGSTOP, a hung call) for LEASE_SECONDS of a waiter's watching loses the lock: the waiter
unlinks the file (under a flock on the folder, so two waiters cannot both) and locks a new
one; the woken holder's `check()` finds the path is no longer its file and raises
PushLeaseLost. Refused on network and FUSE mounts (`refuse_network_mount`), where flock
excludes nothing between hosts: the bucket's gs:// or s3:// URL is the way there.

gs:// and s3://: a fenced lease object (components/atomic_pusher/lease.py). Other schemes
are refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator

from components.atomic_pusher import lease
from components.storage import served_versions
from components.storage.served_versions import PushLeaseLost

LOCK_NAME = ".push.lock"
TIMEOUT_SECONDS = 600  # waiting longer than this for the lock is an error
POLL_SECONDS = 0.2
RECORD_BYTES = 512  # the lock file's record (holder, heartbeat), space-padded
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
    """The holder of a local flock: numbers past the highest folder; lost only when it stopped
    beating for LEASE_SECONDS and a waiter broke the lock (module docstring)."""

    def __init__(self, path: str, handle):
        self.path, self.handle, self.lost, self.owner = path, handle, "", _owner()
        self.inode = os.fstat(handle.fileno()).st_ino
        self._guard, self._stop = threading.Lock(), threading.Event()
        self._beat()
        self._beater = threading.Thread(target=self._beat_loop, daemon=True)
        self._beater.start()

    def _ours(self) -> bool:
        return _inode(self.path) == self.inode

    def _beat(self) -> None:
        with self._guard:
            started = time.monotonic()
            if not self._ours():
                self.lost = self.lost or "a waiter broke it after it went silent"
                return
            # One write of a fixed length at offset 0: a reader never sees it half done.
            record = json.dumps({"owner": self.owner, "beat": uuid.uuid4().hex})
            os.pwrite(self.handle.fileno(), record.ljust(RECORD_BYTES).encode(), 0)
            self.valid_until = started + lease.LEASE_SECONDS

    def _beat_loop(self) -> None:
        while not self._stop.wait(lease.LEASE_SECONDS / 3) and not self.lost:
            with contextlib.suppress(OSError):
                self._beat()

    def reserve(self, highest: int) -> int:
        self.check()
        return lease.next_version(highest)

    def check(self) -> None:
        with self._guard:
            if not self.lost and not self._ours():
                self.lost = "a waiter broke it after it went silent"
            if not self.lost and time.monotonic() > self.valid_until - lease.CHECK_MARGIN * (
                lease.LEASE_SECONDS
            ):
                self.lost = f"no heartbeat for over {lease.LEASE_SECONDS:.0f} s"
            if self.lost:
                raise PushLeaseLost(
                    f"lost the push lease {self.path} ({self.lost}); nothing pushed by this"
                    " push (rerun to push against what is served now)"
                )

    def release(self) -> None:
        self._stop.set()
        self._beater.join()
        self.handle.close()  # releases the flock


def _timed_out(path: str, timeout: float, holder: str) -> PushLockTimeout:
    return PushLockTimeout(
        f"another push has held {path} for over {timeout:.0f} s (holder: {holder or 'unknown'});"
        " nothing pushed"
    )


def _record(handle) -> str:
    return os.pread(handle.fileno(), RECORD_BYTES, 0).decode(errors="replace")


def _break_if_silent(path: str, handle, watched: dict) -> bool:
    """Unlinks the lock file `handle` holds open when its holder's heartbeat has not changed
    for LEASE_SECONDS of our watching; True when it did."""
    inode, record = os.fstat(handle.fileno()).st_ino, _record(handle)
    if watched.get("record") != (inode, record):  # a beat since the last look: watch anew
        watched.update(record=(inode, record), since=time.monotonic())
    if time.monotonic() - watched["since"] < lease.LEASE_SECONDS:
        return False
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # held for one stat and one unlink
        with contextlib.suppress(FileNotFoundError):
            with open(path) as current:
                same = os.fstat(current.fileno()).st_ino == inode and current.read() == record
            if same:
                os.unlink(path)
                logging.warning("took the push lock %s over from a silent holder: %s", path, record)
    finally:
        os.close(folder)  # releases its flock
    return True


@contextlib.contextmanager
def _local_flock(path: str, deadline: float, timeout: float) -> Iterator[_Flocked]:
    refuse_network_mount(os.path.dirname(path))
    watched: dict = {}
    while True:
        # Not O_APPEND, under which pwrite appends; closing it releases the lock.
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(handle.fileno()).st_ino == _inode(path):
                break
        except BlockingIOError:
            if not _break_if_silent(path, handle, watched) and time.monotonic() >= deadline:
                record = _record(handle)
                handle.close()
                raise _timed_out(path, timeout, _parse_owner(record)) from None
        handle.close()  # a lock on a file a waiter unlinked, or held by another: again
        time.sleep(POLL_SECONDS)
    holder = _Flocked(path, handle)
    try:
        yield holder
    finally:
        holder.release()


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return -1


def _parse_owner(record: str) -> str:
    try:
        return str(json.loads(record).get("owner", ""))
    except (ValueError, AttributeError):
        return record.strip()


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
