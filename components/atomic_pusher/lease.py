"""The push lock on object stores (gs://, s3://): a fenced lease, `<base>/.push.lock`.

The lease object is created only if absent (GCS: `if_generation_match=0`; S3: PutObject
with `If-None-Match: *`) and every later write of it is conditional on the object being the
one last read (GCS: `if_generation_match=<generation>`; S3: `If-Match: <ETag>`). Its fencing
token is that generation or ETag (each write holds a fresh nonce, so ETags never repeat).

- Taking: create it; or replace a released one, or one whose token a waiter has seen
  unchanged for LEASE_SECONDS of its own clock (its holder stopped renewing: dead or
  stalled); clocks of other hosts are never compared.
- Holding: a thread renews it every LEASE_SECONDS / 3, conditional on the token. The holder
  counts it valid until LEASE_SECONDS after the start of its last renewal that succeeded;
  a waiter can take it only later than that.
- `reserve(highest)`: the next version number, past the highest numbered folder and past
  every number any holder reserved (kept in the object), written before it is used.
- `check()`: immediately before the commit point: the object still carries our token and
  our validity has a margin left, else PushLeaseLost (nothing is committed).
- Releasing: the object is rewritten as released (keeping the last number), not deleted.

Other schemes cannot create an object only if absent: pushes to them are refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid

from components.storage import object_store
from components.storage.served_versions import PushLeaseLost

LEASE_SECONDS = 300.0  # without a renewal for this long, a lease may be taken over
POLL_SECONDS = 1.0  # a waiter's reads of the lease object
CHECK_MARGIN = 0.25  # check(): at least this share of LEASE_SECONDS must be left


class UnsafeStore(object_store.ObjectStoreError):
    """A serving folder where two pushes could both commit: refused."""


def next_version(highest: int, last_reserved: int = 0) -> int:
    """A version is named by its push's Unix time, bumped past the highest numbered folder and
    the last number reserved, so versions only increase (TF Serving serves the highest)."""
    return max(int(time.time()), highest + 1, last_reserved + 1)


def _owner() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} ({uuid.uuid4().hex[:8]})"


def store_for(path: str):
    """The conditional-write store of the lease object at `path` (gs:// or s3://)."""
    if path.startswith("gs://"):
        return _GcsObject(path)
    if object_store.is_s3(path):
        return _S3Object(path)
    scheme = path.split("://", 1)[0]
    raise UnsafeStore(
        f"{path}: {scheme}:// cannot create an object only if absent, so two pushes could both"
        " commit into one version; push to a local folder, gs:// or s3:// instead"
    )


class _GcsObject:
    """One object through google-cloud-storage (which honours STORAGE_EMULATOR_HOST)."""

    def __init__(self, path: str):
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, self.key = path[len("gs://") :].partition("/")
        self.bucket = storage.Client().bucket(bucket)
        self.refused = (exceptions.PreconditionFailed, exceptions.NotFound)

    def read(self) -> tuple[bytes | None, str | None]:
        for _ in range(5):  # replaced between the two requests: again
            blob = self.bucket.get_blob(self.key)
            if blob is None:
                return None, None
            try:
                return blob.download_as_bytes(if_generation_match=blob.generation), str(
                    blob.generation
                )
            except self.refused:
                continue
        raise PushLeaseLost(f"gs://{self.bucket.name}/{self.key} keeps changing")

    def write(self, data: bytes, token: str | None) -> str | None:
        """Writes `data` if the object is still `token` (None: if absent); its new token,
        or None when the condition failed."""
        blob = self.bucket.blob(self.key)
        try:
            blob.upload_from_string(data, if_generation_match=int(token or 0))
        except self.refused:
            return None
        return str(blob.generation)


class _S3Object:
    """One object through botocore (the endpoint and keys object_store maps)."""

    def __init__(self, path: str):
        self.bucket, self.key = object_store.split(path)
        self.client = object_store._client()

    def read(self) -> tuple[bytes | None, str | None]:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.client.exceptions.NoSuchKey:
            return None, None
        return reply["Body"].read(), reply["ETag"]

    def write(self, data: bytes, token: str | None) -> str | None:
        import botocore.exceptions

        condition = {"IfMatch": token} if token else {"IfNoneMatch": "*"}
        try:
            reply = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data, **condition)
        except botocore.exceptions.ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or err.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise
        return reply["ETag"]


def _parse(data: bytes | None) -> dict:
    try:
        record = json.loads(data or b"{}")
    except ValueError:  # garbled: taken over like a stalled holder's
        return {}
    return record if isinstance(record, dict) else {}


class Lease:
    """A held lease (see the module docstring); `acquire` returns one."""

    def __init__(self, path: str, store, owner: str, token: str, record: dict, started: float):
        self.path, self.store, self.owner = path, store, owner
        self.token, self.record = token, record
        self.valid_until = started + LEASE_SECONDS
        self.lost = ""
        self._guard, self._stop = threading.Lock(), threading.Event()
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True)
        self._renewer.start()

    def _write(self, **changes) -> bool:
        """Rewrites the record, conditional on our token; under self._guard."""
        started = time.monotonic()
        record = {**self.record, **changes, "renewed": time.time(), "nonce": uuid.uuid4().hex}
        token = self.store.write(json.dumps(record).encode(), self.token)
        if token is None:
            self.lost = self.lost or "its lease object was replaced by another push"
            return False
        self.token, self.record = token, record
        self.valid_until = max(self.valid_until, started + LEASE_SECONDS)
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(LEASE_SECONDS / 3) and not self.lost:
            # The store unreachable: tried again; meanwhile the validity runs out.
            with self._guard, contextlib.suppress(Exception):
                self._write()

    def _lost(self, why: str) -> PushLeaseLost:
        self.lost = self.lost or why
        return PushLeaseLost(
            f"lost the push lease {self.path} ({self.lost}); nothing pushed by this push"
            " (rerun to push against what is served now)"
        )

    def check(self) -> None:
        """PushLeaseLost unless the lease is still ours, with a margin of validity left."""
        with self._guard:
            if self.lost:
                raise self._lost(self.lost)
            if time.monotonic() > self.valid_until - CHECK_MARGIN * LEASE_SECONDS:
                raise self._lost(f"not renewed for over {LEASE_SECONDS:.0f} s")
            _, token = self.store.read()
            if token != self.token:
                raise self._lost("its lease object was replaced by another push")

    def reserve(self, highest: int) -> int:
        """A version number above `highest` and every number reserved before, recorded in
        the lease object before it is returned."""
        with self._guard:
            last = int(self.record.get("last_version", 0))
            number = next_version(highest, last)
            if not self._write(last_version=number):
                raise self._lost(self.lost)
        self.check()
        return number

    def release(self) -> None:
        self._stop.set()
        self._renewer.join()
        with self._guard:
            if not self.lost:
                self._write(released=True)


def _takeable(record: dict, token: str, seen: dict) -> bool:
    """Released, or its token unchanged for LEASE_SECONDS of our watching."""
    if record.get("released"):
        return True
    since = seen.setdefault(token, time.monotonic())
    return time.monotonic() - since >= LEASE_SECONDS


def acquire(path: str, deadline: float, on_timeout) -> Lease:
    """Waits until the lease at `path` is ours; `on_timeout(holder)` (an exception) once
    `deadline` (time.monotonic()) passes."""
    store, owner, seen = store_for(path), _owner(), {}
    while True:
        data, token = store.read()
        record = _parse(data)
        if token is None or _takeable(record, token, seen):
            mine = {"owner": owner, "last_version": int(record.get("last_version", 0))}
            mine.update(renewed=time.time(), nonce=uuid.uuid4().hex)
            started = time.monotonic()
            new = store.write(json.dumps(mine).encode(), token)
            if new is not None:
                return Lease(path, store, owner, new, mine, started)
        if time.monotonic() >= deadline:
            raise on_timeout(record.get("owner", ""))
        time.sleep(POLL_SECONDS)
