"""The serving folder's push lock on local paths (flock): one holder at a time, refused on
network and FUSE mounts, and on stores without conditional creates. The fenced lease on
gs:// and s3:// against real servers: tests/test_push_lease.py."""

import threading
import time
import uuid

import pytest
from tfx.dsl.io import fileio

from components.atomic_pusher import lease, lock


@pytest.fixture
def base(tmp_path):
    return str(tmp_path / "serving")


def _holders_at_most_one(base, threads=4, rounds=5):
    inside, most, guard, errors = [0], [0], threading.Lock(), []

    def work():
        try:
            hold()
        except BaseException as error:
            errors.append(error)

    def hold():
        for _ in range(rounds):
            with lock.push_lock(base, timeout=60):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.01)
                with guard:
                    inside[0] -= 1

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    if errors:
        raise errors[0]
    return most[0]


def test_one_holder_at_a_time(base):
    fileio.makedirs(base)
    assert _holders_at_most_one(base) == 1


def test_waiting_past_the_timeout_is_a_clear_error(base):
    fileio.makedirs(base)
    refused = pytest.raises(lock.PushLockTimeout, match=r"another push has held .*\.push\.lock")
    with lock.push_lock(base), refused, lock.push_lock(base, timeout=0.3):
        pass
    with lock.push_lock(base, timeout=1):  # released: free again
        pass


def test_a_live_holder_past_the_lease_time_keeps_the_lock(base, monkeypatch):
    """Its heartbeat keeps it: a waiter watching for over the lease time still times out,
    and the holder can still commit; only a silent holder is taken over
    (tests/test_push_lease.py, SIGSTOP)."""
    fileio.makedirs(base)
    monkeypatch.setattr(lease, "LEASE_SECONDS", 0.6)
    refused = pytest.raises(lock.PushLockTimeout, match="another push has held")
    with lock.push_lock(base) as held:
        with refused, lock.push_lock(base, timeout=2.0):
            pass
        held.check()
        assert held.reserve(0) > 0


def test_a_record_seen_again_after_a_beat_is_watched_anew(base, monkeypatch):
    """The waiter times the record it saw last, not the first time it ever saw a record:
    a value that comes back (the CI failure: an empty file mid-beat, twice) is not a holder
    silent since the first sighting."""
    fileio.makedirs(base)
    monkeypatch.setattr(lease, "LEASE_SECONDS", 0.3)
    path = f"{base}/{lock.LOCK_NAME}"
    with open(path, "w+") as handle:
        watched = {}
        for record in ("a", "b", "a"):
            handle.seek(0)
            handle.write(record)
            handle.flush()
            assert not lock._break_if_silent(path, handle, watched)
            time.sleep(0.2)
        time.sleep(0.2)  # "a" unchanged for 0.4 s of watching: silent
        assert lock._break_if_silent(path, handle, watched)


MOUNTS = """\
/dev/vda / ext4 rw 0 0
s3fs /mnt/bucket fuse.s3fs rw,nosuid 0 0
server:/export /mnt/nfs nfs4 rw 0 0
/dev/vdb /mnt/bucket/local ext4 rw 0 0
//host/share /mnt/my\\040share cifs rw 0 0
"""


@pytest.mark.parametrize(
    "path, kind",
    [
        ("/srv/serving", "ext4"),
        ("/mnt/bucket/serving", "fuse.s3fs"),
        ("/mnt/bucketeer/serving", "ext4"),  # a longer name is not under /mnt/bucket
        ("/mnt/nfs", "nfs4"),
        ("/mnt/bucket/local/serving", "ext4"),  # the innermost mount counts
        ("/mnt/my share/serving", "cifs"),
    ],
)
def test_the_mount_type_is_the_innermost_mounts(tmp_path, path, kind):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert lock.mount_type(path, str(mounts)) == kind


@pytest.mark.parametrize("path", ["/mnt/bucket/serving", "/mnt/nfs/s", "/mnt/my share/s"])
def test_a_serving_folder_on_a_network_mount_is_refused_naming_the_bucket_url(tmp_path, path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    with pytest.raises(lease.UnsafeStore, match=r"mount, .* \(gs://BUCKET/PATH or s3://"):
        lock.refuse_network_mount(path, str(mounts))
    lock.refuse_network_mount("/srv/serving", str(mounts))  # a local disk: no error


def test_the_lock_itself_refuses_a_network_mount(base, tmp_path, monkeypatch):
    fileio.makedirs(base)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\nfuse {tmp_path} fuse.gcsfuse rw 0 0\n")
    monkeypatch.setattr(lock, "MOUNTS", str(mounts))
    with pytest.raises(lease.UnsafeStore, match="fuse.gcsfuse mount"), lock.push_lock(base):
        pass


def test_a_scheme_without_conditional_creates_is_refused():
    base = f"ram://push-lock-{uuid.uuid4().hex}/serving"
    refused = pytest.raises(lease.UnsafeStore, match="ram:// cannot create an object only if")
    with refused, lock.push_lock(base):
        pass
