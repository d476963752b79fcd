"""The push lock's fenced lease on real object stores, from real processes: SeaweedFS for
s3:// (tests/seaweed.py, marker s3_store, `make test-s3`) and fake-gcs-server for gs://
(tests/fake_gcs.py, marker gcs_store, `make test-gcs`).

The Pusher's own commit (`publish_version`, PUBLISH below) is tested with a holder stopped
or killed mid-move on a local folder and on s3:// here, and on gs:// in
tests/test_gcs_store.py (TensorFlow's gs:// reaches the emulator only in its namespace).
The lock API's own cases (many writers at once, its cost, gs:// outside the namespace) run
PUSH: the lock with the store's URL and the Pusher's steps (dead commits removed, a number
reserved, part files written, the lock checked, saved_model.pb last) through the store's
client. What TF Serving would load is then read back: every complete version must hold all
parts of one writer, and no number may repeat.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import cifar_fixtures as fx
import fake_gcs
import seaweed

REPO = str(Path(__file__).resolve().parents[1])
LEASE_SECONDS = 2.0  # the lease's life in these tests (300 s in a push)
PARTS = 3

PUSH = r"""
import json, os, signal, sys, time
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests"))
from components.atomic_pusher import lock
import test_push_lease as t
life = float(os.environ["LEASE_SECONDS"])
try:
    from components.atomic_pusher import lease
    lease.LEASE_SECONDS, lease.POLL_SECONDS = life, 0.05
except ImportError:  # the code before the fenced lease: its own knobs
    lock.LEASE_SECONDS, lock.SETTLE_SECONDS, lock.POLL_SECONDS = life, 0.2, 0.05
base, me, commits, stall = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = t.Objects(base)
for _ in range(commits):
    try:
        t.commit(lock, store, base, me, stall)
    except Exception as err:
        if type(err).__name__ != "PushLeaseLost":
            raise
        print("LOST", err, flush=True)
        os._exit(3)
os._exit(0)  # a process that imported tensorflow-io aborts at exit (storage/object_store.py)
"""


class Objects:
    """The serving folder's objects through the store's own client."""

    def __init__(self, base: str):
        scheme, _, rest = base.partition("://")
        self.bucket, _, self.prefix = rest.partition("/")
        self.gcs, self.local = scheme == "gs", not rest
        if self.local:
            self.prefix = base
        elif self.gcs:
            from google.cloud import storage

            self.client = storage.Client().bucket(self.bucket)
        else:
            from components.storage import object_store

            self.client = object_store._client()

    def put(self, name: str, data: bytes) -> None:
        key = f"{self.prefix}/{name}"
        if self.gcs:
            self.client.blob(key).upload_from_string(data)
        else:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def read_all(self) -> dict[str, bytes]:
        """name under the serving folder -> content, the lock object left out."""
        if self.local:
            files = (p for p in Path(self.prefix).rglob("*") if p.is_file())
            found = {str(p): p.read_bytes() for p in files}
        elif self.gcs:
            blobs = self.client.client.list_blobs(self.bucket, prefix=self.prefix + "/")
            found = {b.name: b.download_as_bytes() for b in blobs}
        else:
            pages = self.client.get_paginator("list_objects_v2")
            keys = [
                item["Key"]
                for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + "/")
                for item in page.get("Contents", [])
            ]
            found = {
                k: self.client.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys
            }
        names = {k[len(self.prefix) + 1 :]: v for k, v in found.items()}
        return {k: v for k, v in names.items() if k != ".push.lock" and not k.endswith("/")}

    def versions(self) -> dict[int, dict[str, bytes]]:
        """{number: {file: content}} of the numbered folders."""
        found: dict[int, dict[str, bytes]] = {}
        for name, data in self.read_all().items():
            folder, _, file = name.partition("/")
            if folder.isdigit() and file:
                found.setdefault(int(folder), {})[file] = data
        return found

    def remove(self, number: int) -> None:
        for name in self.versions().get(number, {}):
            key = f"{self.prefix}/{number}/{name}"
            if self.gcs:
                self.client.blob(key).delete()
            else:
                self.client.delete_object(Bucket=self.bucket, Key=key)


def commit(lock, store: Objects, base: str, me: str, stall: str) -> None:
    """One push's commit, as the Pusher does it; `stall` ('stop', 'kill') after part 0."""
    with lock.push_lock(base, timeout=120) as held:
        for number, files in store.versions().items():  # dead commits, as the Pusher does
            if "saved_model.pb" not in files:
                store.remove(number)
        highest = max(store.versions(), default=0)  # listed again, as the Pusher does
        number = held.reserve(highest) if held else max(int(time.time()), highest + 1)
        print("RESERVED", number, flush=True)
        for part in range(PARTS):
            store.put(f"{number}/part{part}", me.encode())
            if part == 0 and stall in ("stop", "kill"):
                print("STALLED", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP if stall == "stop" else signal.SIGKILL)
        if held is not None:
            held.check()
        store.put(f"{number}/saved_model.pb", me.encode())
        print("PUSHED", number, flush=True)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    with seaweed.running(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="module")
def gs_server(tmp_path_factory):
    with fake_gcs.running(tmp_path_factory.mktemp("fake-gcs")) as server:
        yield server


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3_store),
        pytest.param("gs", marks=pytest.mark.gcs_store),
    ]
)
def store(request, monkeypatch):
    """(serving folder URL, environment of a process using it); this process gets it too."""
    server = request.getfixturevalue(f"{request.param}_server")
    env = {**server.env(), "REPO": REPO, "LEASE_SECONDS": str(LEASE_SECONDS)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return f"{request.param}://{server.bucket}/serving-{uuid.uuid4().hex[:8]}", env


def _start(store, me: str, commits: int = 1, stall: str = "no") -> subprocess.Popen:
    base, env = store
    return subprocess.Popen(
        [sys.executable, "-c", PUSH, base, me, str(commits), stall],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""},
        cwd=REPO,
    )


def _wait_for(process: subprocess.Popen, word: str) -> list[str]:
    """stdout lines up to and with the first starting with `word`."""
    lines = []
    while not lines or not lines[-1].startswith(word):
        line = process.stdout.readline()
        assert line, f"ended before {word}: {process.stderr.read()[-3000:]}"
        lines.append(line)
    return lines


def _served(base: str) -> dict[int, str]:
    """{number: writer} of the complete versions; a mixed or partial one fails the test."""
    served = {}
    for number, files in Objects(base).versions().items():
        if "saved_model.pb" in files:
            writers = set(files.values())
            assert len(files) == PARTS + 1 and len(writers) == 1, (number, files)
            served[number] = writers.pop().decode()
    return served


def _numbers(out: str, word: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith(word)]


def test_two_processes_pushing_at_once_get_distinct_complete_versions(store):
    """Two processes, three commits each, all within a few seconds: six complete versions,
    none mixed, no number twice."""
    processes = {me: _start(store, me, commits=3) for me in ("a", "b")}
    pushed = {}
    for me, process in processes.items():
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-3000:]
        pushed[me] = _numbers(out, "PUSHED")
    served = _served(store[0])
    assert sorted(served) == sorted(pushed["a"] + pushed["b"]) and len(served) == 6
    assert all(served[n] == me for me, numbers in pushed.items() for n in numbers)


def test_a_holder_stalled_past_its_lease_commits_nothing_when_it_wakes(store):
    """The holder stops (SIGSTOP: its renewals stop too) after one part; another push takes
    the lease over, removes the half version and commits. Woken, the first finds its lease
    gone before saved_model.pb: it ends LOST (PushLeaseLost), no broken version appears."""
    stalled = _start(store, "stalled", stall="stop")
    first = _numbers("".join(_wait_for(stalled, "STALLED")), "RESERVED")
    started = time.monotonic()
    taker = _start(store, "taker")
    out, err = taker.communicate(timeout=120)
    assert taker.returncode == 0, err[-3000:]
    print(f"taken over after {time.monotonic() - started:.1f} s (lease {LEASE_SECONDS} s)")
    os.kill(stalled.pid, signal.SIGCONT)
    late_out, late_err = stalled.communicate(timeout=120)
    (taken,) = _numbers(out, "PUSHED")
    assert _served(store[0]) == {taken: "taker"} and taken > first[0]
    assert stalled.returncode == 3 and "LOST" in late_out, (late_out, late_err[-3000:])


def test_a_holder_killed_mid_commit_is_recovered_by_the_next_push(store):
    """SIGKILL after one part: the next push takes the lease once it has gone unrenewed for
    the lease's life, removes the half version and commits under a number never reserved
    before."""
    killed = _start(store, "killed", stall="kill")
    (first,) = _numbers("".join(_wait_for(killed, "STALLED")), "RESERVED")
    killed.wait(timeout=60)
    assert killed.returncode == -signal.SIGKILL
    following = _start(store, "next")
    out, err = following.communicate(timeout=120)
    assert following.returncode == 0, err[-3000:]
    (number,) = _numbers(out, "PUSHED")
    assert _served(store[0]) == {number: "next"} and number > first
    assert set(Objects(store[0]).versions()) == {number}


def test_the_lease_protocols_cost_per_push(store):
    """Not a bound: the time the lease adds to one uncontended push, printed for the
    record (take, reserve, check, release)."""
    from components.atomic_pusher import lease, lock

    took = []
    for _ in range(5):
        started = time.monotonic()
        with lock.push_lock(store[0]) as held:
            held.reserve(0)
            held.check()
        took.append(time.monotonic() - started)
    print(f"lease protocol per push on {store[0].split(':')[0]}: {min(took):.3f} s")
    record = json.loads(lease.store_for(f"{store[0]}/.push.lock").read()[0])
    assert record["released"] and record["last_version"] >= int(time.time()) - 60


PUBLISH = r"""
import os, signal, sys
from components.storage import object_store
from components.atomic_pusher import executor as pusher, lock
life = float(os.environ["LEASE_SECONDS"])
try:
    from components.atomic_pusher import lease
    lease.LEASE_SECONDS, lease.POLL_SECONDS = life, 0.05
except ImportError:  # the code before the fenced lease: its own knobs
    lock.LEASE_SECONDS, lock.SETTLE_SECONDS, lock.POLL_SECONDS = life, 0.2, 0.05
model, base, stall = sys.argv[1:4]
object_store.enable(base)  # what a step's entry point does (components/storage/s3_entrypoint.py)
real_move = pusher.move_into_place
def move(staging, final, before_last=None):
    def stalled():  # every file but saved_model.pb moved: a half version
        print("STALLED", final.rstrip("/").rsplit("/", 1)[-1], flush=True)
        os.kill(os.getpid(), signal.SIGSTOP if stall == "stop" else signal.SIGKILL)
        if before_last is not None:
            before_last()
    real_move(staging, final, before_last=stalled if stall != "no" else before_last)
pusher.move_into_place = move
try:
    print("PUSHED", pusher.publish_version(model, base)[1], flush=True)
except pusher.ServedVersionChanged as err:
    print("LOST", err, flush=True)
    os._exit(3)
os._exit(0)
"""


def _publish(store, model: str, stall: str = "no") -> subprocess.Popen:
    base, env = store
    return subprocess.Popen(
        [sys.executable, "-c", PUBLISH, model, base, stall],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""},
        cwd=REPO,
    )


def _model_files(model: str) -> dict[str, bytes]:
    from components.atomic_pusher.executor import SOURCE_FILE

    return {**fx.files_under(model), SOURCE_FILE: model.encode()}


@pytest.mark.parametrize(
    "where, stall",
    [
        ("local", "stop"),  # killed locally: the kernel frees the flock (test_push_protocol.py)
        pytest.param("s3", "stop", marks=pytest.mark.s3_store),
        pytest.param("s3", "kill", marks=pytest.mark.s3_store),
    ],
)
def test_the_pusher_itself_after_a_holder_stalled_or_died_mid_move(
    where, stall, tmp_path, monkeypatch, request
):
    """The Pusher's own commit (publish_version) in real processes, on a local folder (flock
    and its heartbeat) and on s3:// (files moved through the S3 API): the first is stopped
    (SIGSTOP) or killed with every file but saved_model.pb moved; the next push takes the lock
    over within the lease time (not the 600 s wait), removes the first's staging and half
    version, and commits its model whole. A stopped first push, woken, commits nothing
    (PushLeaseLost). Left in the serving folder: the next push's version only."""
    if where == "local":
        store = (str(tmp_path / "serving"), {"LEASE_SECONDS": str(LEASE_SECONDS)})
    else:
        server = request.getfixturevalue("s3_server")
        store = (
            f"s3://{server.bucket}/pusher-{uuid.uuid4().hex[:8]}",
            {**server.env(), "LEASE_SECONDS": str(LEASE_SECONDS)},
        )
    for name, value in store[1].items():
        monkeypatch.setenv(name, value)
    first_model, next_model = (
        fx.fake_saved_model(tmp_path, "first"),
        fx.fake_saved_model(tmp_path, "next"),
    )
    first, following = _publish(store, first_model, stall), None
    try:
        (half,) = _numbers("".join(_wait_for(first, "STALLED")), "STALLED")
        following = _publish(store, next_model)
        out, err = following.communicate(timeout=30 * LEASE_SECONDS)  # the lock waits 600 s
        assert following.returncode == 0, err[-3000:]
        (number,) = _numbers(out, "PUSHED")
        if stall == "stop":
            os.kill(first.pid, signal.SIGCONT)
        late_out, late_err = first.communicate(timeout=300)
    finally:
        for process in (first, following):
            if process is not None and process.poll() is None:
                process.kill()
    left = Objects(store[0]).read_all()
    mine = {n[len(f"{number}/") :]: v for n, v in left.items() if n.startswith(f"{number}/")}
    assert mine == _model_files(next_model) and number > half
    assert sorted(left) == sorted(f"{number}/{n}" for n in mine), sorted(left)
    if stall == "stop":
        assert first.returncode == 3 and "lost the push lease" in late_out, late_err[-3000:]
