"""The serving folder's push lock, `<base>/.push.lock`: one commit (choose a version number,
move the staged files in) at a time, so a later commit always gets a higher number.

Local paths: `fcntl.flock` on the file, which the kernel releases when the holder dies.

Remote paths (gs://, s3://): best-effort. tf.io.gfile has no compare-and-set and no atomic
create-if-absent, so the lock is a lease object holding JSON {owner, expires}: wait while an
unexpired lease exists, write ours, wait SETTLE_SECONDS, read it back; held only if it is
still ours. The window it leaves: a pusher that saw no lease and then stalled for more than
SETTLE_SECONDS before writing its own overwrites a lease another pusher has already
confirmed, and both commit at once; so does a commit running past LEASE_SECONDS. Released by
deleting the object (only while it is still ours); a dead holder's lease expires.
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

from components import object_store, served_versions

LOCK_NAME = ".push.lock"
TIMEOUT_SECONDS = 600  # waiting longer than this for the lock is an error
LEASE_SECONDS = 300  # a remote lease's life: far longer than moving one model's files
SETTLE_SECONDS = 1.0  # remote: between writing the lease and reading it back
POLL_SECONDS = 0.2


class PushLockTimeout(RuntimeError):
    """Another push held the serving folder's push lock for longer than the timeout."""


def _owner() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


@contextlib.contextmanager
def push_lock(base_directory: str, timeout: float | None = None) -> Iterator[None]:
    """Holds `<base_directory>/.push.lock` for the block; raises PushLockTimeout after
    `timeout` seconds (default TIMEOUT_SECONDS) of waiting."""
    path = served_versions.join(base_directory, LOCK_NAME)
    timeout = TIMEOUT_SECONDS if timeout is None else timeout
    hold = _remote_lease if "://" in base_directory else _local_flock
    with hold(path, time.monotonic() + timeout, timeout):
        yield


def _timed_out(path: str, timeout: float, holder: str) -> PushLockTimeout:
    return PushLockTimeout(
        f"another push has held {path} for over {timeout:.0f} s (holder: {holder or 'unknown'});"
        " nothing pushed"
    )


@contextlib.contextmanager
def _local_flock(path: str, deadline: float, timeout: float) -> Iterator[None]:
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
        yield


def _read_lease(path: str) -> dict | None:
    """The lease object's content; None when there is none (or it cannot be parsed: objects
    are written whole, so that is not one being written)."""
    import tensorflow as tf  # remote paths only, where TensorFlow reads them anyway

    try:
        with object_store.gfile(path).GFile(path) as handle:
            lease = json.loads(handle.read())
        return lease if isinstance(lease, dict) else None
    except (tf.errors.NotFoundError, ValueError):
        return None


@contextlib.contextmanager
def _remote_lease(path: str, deadline: float, timeout: float) -> Iterator[None]:
    owner = _owner()
    while True:
        lease = _read_lease(path)
        if lease is None or float(lease.get("expires", 0)) < time.time():
            if fileio.exists(path):  # expired (or garbled): replaced, never appended to
                with contextlib.suppress(fileio.NotFoundError):
                    fileio.remove(path)
            with fileio.open(path, "w") as handle:
                handle.write(json.dumps({"owner": owner, "expires": time.time() + LEASE_SECONDS}))
            time.sleep(SETTLE_SECONDS)
            lease = _read_lease(path)
            if lease is not None and lease.get("owner") == owner:
                break
        if time.monotonic() >= deadline:
            raise _timed_out(path, timeout, (lease or {}).get("owner", ""))
        time.sleep(POLL_SECONDS)
    try:
        yield
    finally:
        if (_read_lease(path) or {}).get("owner") == owner:
            with contextlib.suppress(fileio.NotFoundError):  # taken over after expiring
                fileio.remove(path)
