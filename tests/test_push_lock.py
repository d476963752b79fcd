"""The serving folder's push lock: one holder at a time, on local paths (flock) and on
remote ones (the best-effort lease object, exercised for real on TensorFlow's ram://)."""

import json
import threading
import time
import uuid

import pytest
from tfx.dsl.io import fileio

from components.atomic_pusher import lock


@pytest.fixture(params=["local", "remote"])
def base(request, tmp_path, monkeypatch):
    if request.param == "local":
        return str(tmp_path / "serving")
    monkeypatch.setattr(lock, "SETTLE_SECONDS", 0.05)
    monkeypatch.setattr(lock, "POLL_SECONDS", 0.01)
    return f"ram://push-lock-{uuid.uuid4().hex}/serving"


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


def test_the_remote_lease_is_deleted_on_release_and_taken_over_once_expired(monkeypatch):
    monkeypatch.setattr(lock, "SETTLE_SECONDS", 0.05)
    base = f"ram://push-lock-{uuid.uuid4().hex}/serving"
    fileio.makedirs(base)
    path = f"{base}/{lock.LOCK_NAME}"
    with lock.push_lock(base), fileio.open(path, "r") as handle:
        assert json.loads(handle.read())["expires"] > time.time()
    assert not fileio.exists(path)
    with fileio.open(path, "w") as handle:  # a dead holder's lease, expired
        handle.write(json.dumps({"owner": "dead", "expires": time.time() - 1}))
    with lock.push_lock(base, timeout=1):
        pass
    assert not fileio.exists(path)
