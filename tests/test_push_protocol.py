"""AtomicPusher's push protocol when pushes overlap: staging under a unique name with a
lease, the version chosen and committed under the serving folder's push lock (so the push
that commits later gets the higher number), cleanup of dead pushes only, "already served"
only when the newest version holds the model, and the served-version check."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from components.atomic_pusher import executor as pusher
from components.storage import served_versions

import cifar_fixtures as fx

REPO = str(Path(__file__).resolve().parents[1])
LOCK_NAME = ".push.lock"


def _model(tmp_path, name):
    return fx.fake_saved_model(tmp_path, name)


def _files(directory):
    return fx.files_under(directory)


def _expected(model_path):
    return {**_files(model_path), pusher.SOURCE_FILE: model_path.encode()}


def _complete(base):
    """{version: files} for what TF Serving would load."""
    return {v: _files(os.path.join(base, v)) for v in served_versions.complete_versions(base)}


def _leftovers(base):
    """Names in the serving folder other than complete versions and the lock file."""
    complete = set(served_versions.complete_versions(base))
    return sorted(set(os.listdir(base)) - complete - {LOCK_NAME})


def _run_threads(*targets):
    """Runs each target in its own thread; re-raises the first exception."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]


def _record_commits(monkeypatch):
    """The versions in the order their moves into place began (the commit order)."""
    order, real_move = [], pusher.move_into_place

    def move(staging, final, **check):
        order.append(os.path.basename(final))
        return real_move(staging, final, **check)

    monkeypatch.setattr(pusher, "move_into_place", move)
    return order


def test_two_threads_pushing_at_once_give_two_complete_versions(tmp_path, monkeypatch):
    first, second = _model(tmp_path, "first"), _model(tmp_path, "second")
    base = str(tmp_path / "serving")
    both_staging, real_copy = threading.Barrier(2, timeout=60), pusher.copy_to_staging

    def copy_together(*args):  # both pushes are staging before either commits
        both_staging.wait()
        return real_copy(*args)

    monkeypatch.setattr(pusher, "copy_to_staging", copy_together)
    order = _record_commits(monkeypatch)
    results = {}
    _run_threads(
        lambda: results.update(first=pusher.publish_version(first, base)),
        lambda: results.update(second=pusher.publish_version(second, base)),
    )
    served = _complete(base)
    assert len(served) == 2 and order == sorted(order, key=int)  # later commit, higher number
    for model, name in ((first, "first"), (second, "second")):
        path, version, is_new = results[name]
        assert is_new and served[version] == _expected(model)
    assert _leftovers(base) == []


PUSH_PROCESS = """
import json, os, sys, time
from components.atomic_pusher import executor as pusher
model, base, ready, me, other, log = sys.argv[1:]
real_copy, real_move = pusher.copy_to_staging, pusher.move_into_place
def slow_copy(*args):  # both stay in their copies a while: they overlap
    time.sleep(0.5)
    return real_copy(*args)
def move(staging, final, **check):
    with open(log, "a") as handle:
        handle.write(f"{time.time_ns()} {os.path.basename(final)} {me}\\n")
    return real_move(staging, final, **check)
pusher.copy_to_staging, pusher.move_into_place = slow_copy, move
open(os.path.join(ready, me), "w").close()
deadline = time.time() + 120
while not os.path.exists(os.path.join(ready, other)) and time.time() < deadline:
    time.sleep(0.001)
print(json.dumps(pusher.publish_version(model, base)))
"""


def test_two_processes_pushing_at_once_give_two_complete_versions(tmp_path):
    models = {"a": _model(tmp_path, "a"), "b": _model(tmp_path, "b")}
    base, ready, log = str(tmp_path / "serving"), tmp_path / "ready", tmp_path / "commits.log"
    ready.mkdir()
    env = {**os.environ, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""}
    processes = {
        me: subprocess.Popen(
            [sys.executable, "-c", PUSH_PROCESS, models[me], base, ready, me, other, log],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for me, other in (("a", "b"), ("b", "a"))
    }
    results = {}
    for me, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        results[me] = json.loads(out.strip().splitlines()[-1])
    served = _complete(base)
    assert len(served) == 2
    for me, (_, version, is_new) in results.items():
        assert is_new and served[version] == _expected(models[me])
    commits = [line.split() for line in log.read_text().splitlines()]
    in_commit_order = [version for _, version, _ in sorted(commits, key=lambda c: int(c[0]))]
    assert in_commit_order == sorted(served, key=int)
    assert _leftovers(base) == []


def test_the_push_that_commits_later_gets_the_higher_number(tmp_path, monkeypatch):
    """The number is chosen at commit, not at start: a push that started earlier but
    finished later is the one TF Serving serves, as its "pushed" says."""
    early, late = _model(tmp_path, "early"), _model(tmp_path, "late")
    base = str(tmp_path / "serving")
    clock = [1_000_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    early_staging, late_done = threading.Event(), threading.Event()
    real_copy = pusher.copy_to_staging

    def copy(model_path, *args):
        if model_path == early:  # the early push stays in its copy until the late one is done
            early_staging.set()
            assert late_done.wait(60)
        return real_copy(model_path, *args)

    monkeypatch.setattr(pusher, "copy_to_staging", copy)
    results = {}

    def late_push():
        assert early_staging.wait(60)
        clock[0] += 100
        results["late"] = pusher.publish_version(late, base)
        clock[0] += 100
        late_done.set()

    _run_threads(lambda: results.update(early=pusher.publish_version(early, base)), late_push)
    assert int(results["early"][1]) > int(results["late"][1])
    assert served_versions.newest_complete_version(base) == results["early"][1]
    assert _complete(base)[results["early"][1]] == _expected(early)


def test_a_retry_of_the_same_push_gives_one_version(tmp_path):
    model, base = _model(tmp_path, "model"), str(tmp_path / "serving")
    path, version, is_new = pusher.publish_version(model, base, expected_served=None)
    # The retry carries the state its run read before the first try: nothing served.
    again = pusher.publish_version(model, base, expected_served=None)
    assert is_new and again == (path, version, False)
    assert list(_complete(base)) == [version] and _leftovers(base) == []


@pytest.mark.parametrize("check", [False, True], ids=["unchecked", "expecting-the-newest"])
def test_a_model_is_already_served_only_when_the_newest_version_holds_it(tmp_path, check):
    first, second = _model(tmp_path, "first"), _model(tmp_path, "second")
    base = str(tmp_path / "serving")
    _, v1, _ = pusher.publish_version(first, base)
    _, v2, _ = pusher.publish_version(second, base)
    # TF Serving serves v2 (the second model); the first model is not served any more.
    expected = {"expected_served": v2} if check else {}
    path, v3, is_new = pusher.publish_version(first, base, **expected)
    assert is_new and int(v3) > int(v2) > int(v1)
    assert served_versions.newest_complete_version(base) == v3
    assert _files(path) == _expected(first)


def test_pushing_an_older_versions_model_trips_a_stale_expected_version(tmp_path):
    first, second = _model(tmp_path, "first"), _model(tmp_path, "second")
    base = str(tmp_path / "serving")
    _, v1, _ = pusher.publish_version(first, base)
    _, v2, _ = pusher.publish_version(second, base)
    with pytest.raises(pusher.ServedVersionChanged):  # the run read v1, v2 came since
        pusher.publish_version(first, base, expected_served=v1)
    assert sorted(_complete(base), key=int) == [v1, v2] and _leftovers(base) == []


def test_served_version_changed_before_the_push_pushes_nothing(tmp_path):
    base = str(tmp_path / "serving")
    _, other, _ = pusher.publish_version(_model(tmp_path, "other"), base)
    with pytest.raises(pusher.ServedVersionChanged) as raised:
        pusher.publish_version(_model(tmp_path, "mine"), base, expected_served=None)
    assert str(raised.value) == (
        f"served version changed during this run: it read nothing, the serving folder now"
        f" serves {other}; nothing pushed (rerun to judge against {other})"
    )
    assert list(_complete(base)) == [other] and _leftovers(base) == []


def test_served_version_changed_while_staging_pushes_nothing(tmp_path, monkeypatch):
    base = str(tmp_path / "serving")
    _, read, _ = pusher.publish_version(_model(tmp_path, "read"), base)
    other, mine = _model(tmp_path, "other"), _model(tmp_path, "mine")
    real_copy, pushed = pusher.copy_to_staging, []

    def copy_while_another_push_lands(model_path, *args):
        real_copy(model_path, *args)
        if model_path == mine:  # another run's push commits while this one is staged
            pushed.append(pusher.publish_version(other, base)[1])

    monkeypatch.setattr(pusher, "copy_to_staging", copy_while_another_push_lands)
    with pytest.raises(pusher.ServedVersionChanged) as raised:
        pusher.publish_version(mine, base, expected_served=read)
    assert f"it read {read}, the serving folder now serves {pushed[0]};" in str(raised.value)
    assert sorted(_complete(base), key=int) == [read, pushed[0]] and _leftovers(base) == []


def _staging(base, name, lease=None, age=0.0):
    """A staging folder as another push leaves it: a file, and a LEASE when given."""
    folder = Path(base) / f"{pusher.STAGING_PREFIX}{name}"
    (folder / "variables").mkdir(parents=True)
    (folder / "variables" / "variables.index").write_bytes(b"index")
    if lease is not None:
        (folder / "LEASE").write_text(json.dumps(lease))
    then = time.time() - age
    for path in (folder / "variables" / "variables.index", folder / "variables", folder):
        os.utime(path, (then, then))
    return folder.name


def test_cleanup_removes_only_what_dead_pushes_left(tmp_path):
    base = tmp_path / "serving"
    dead_after = pusher.DEAD_AFTER_SECONDS
    elsewhere = {"host": "another-host", "pid": 4242}
    now = time.time()
    live = [
        _staging(base, "fresh-lease", {**elsewhere, "started": now - 60}),
        _staging(base, "no-lease-fresh-files"),
    ]
    dead = [
        _staging(base, "old-lease", {**elsewhere, "started": now - dead_after - 1}),
        _staging(base, "no-lease-old-files", age=dead_after + 1),
        # On this host, with nobody holding its lease's lock: its process died.
        _staging(base, "owner-gone", {"host": socket.gethostname(), "pid": 1, "started": now}),
    ]
    (base / "7").mkdir()  # a commit that died midway: no saved_model.pb
    (base / "7" / "fingerprint.pb").write_bytes(b"half")
    pusher.publish_version(_model(tmp_path, "model"), str(base))
    names = os.listdir(base)
    assert all(name in names for name in live)
    assert not [name for name in dead if name in names] and "7" not in names


KILLED_IN_THE_MOVE = """
import os, signal, sys
from components.atomic_pusher import executor as pusher
real_rename, moved = pusher.fileio.rename, []
def rename(*args, **kwargs):
    real_rename(*args, **kwargs)
    moved.append(args)
    if len(moved) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, like a power cut
pusher.fileio.rename = rename
pusher.publish_version(sys.argv[1], sys.argv[2])
"""


def test_a_push_killed_midway_is_cleared_by_the_next_one_at_once(tmp_path):
    """On this host, a dead push's staging is recognised at once (its lease's flock was
    dropped with the process), not only after DEAD_AFTER_SECONDS."""
    base = str(tmp_path / "serving")
    env = {**os.environ, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IN_THE_MOVE, _model(tmp_path, "killed"), base],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    left = os.listdir(base)
    assert [n for n in left if n.startswith(pusher.STAGING_PREFIX)] and _complete(base) == {}
    assert [n for n in left if n.isdigit()]  # a half-moved version, without saved_model.pb
    path, version, _ = pusher.publish_version(_model(tmp_path, "next"), base)
    assert list(_complete(base)) == [version] and _leftovers(base) == []


def test_a_live_push_keeps_its_staging_while_another_push_runs(tmp_path, monkeypatch):
    base = str(tmp_path / "serving")
    slow, fast = _model(tmp_path, "slow"), _model(tmp_path, "fast")
    staged, fast_done, real_copy = threading.Event(), threading.Event(), pusher.copy_to_staging

    def copy(model_path, *args):
        real_copy(model_path, *args)
        if model_path == slow:  # staged, then waits while the other push runs its cleanup
            staged.set()
            assert fast_done.wait(60)

    monkeypatch.setattr(pusher, "copy_to_staging", copy)
    results = {}

    def fast_push():
        assert staged.wait(60)
        results["fast"] = pusher.publish_version(fast, base)
        fast_done.set()

    _run_threads(lambda: results.update(slow=pusher.publish_version(slow, base)), fast_push)
    served = _complete(base)
    assert served[results["slow"][1]] == _expected(slow)
    assert served[results["fast"][1]] == _expected(fast)
    assert _leftovers(base) == []


def _saved_model(path, value):
    import tensorflow as tf

    module = tf.Module()
    module.value = tf.Variable(float(value))
    module.predict = tf.function(lambda: module.value * 2.0, input_signature=[])
    tf.saved_model.save(module, str(path))
    return str(path)


def test_real_saved_models_pushed_at_once_each_load_from_their_version(tmp_path):
    import tensorflow as tf

    models = {value: _saved_model(tmp_path / f"model{value}", value) for value in (1, 2)}
    base, results = str(tmp_path / "serving"), {}
    _run_threads(
        *(
            lambda value=value, path=path: results.update(
                {value: pusher.publish_version(path, base)}
            )
            for value, path in models.items()
        )
    )
    assert len({version for _, version, _ in results.values()}) == 2
    for value, (path, _, _) in results.items():
        assert float(tf.saved_model.load(path).predict()) == 2.0 * value


def test_a_store_without_conditional_creates_is_refused_with_one_line(tmp_path):
    """ram:// (like any scheme but gs:// and s3://) cannot create an object only if absent:
    two pushes could both commit, so the push is refused, nothing is moved in."""
    from components.atomic_pusher import lease

    base = f"ram://push-{uuid.uuid4().hex}/serving"
    with pytest.raises(lease.UnsafeStore, match=r"^ram://.*cannot create an object only if"):
        pusher.publish_version(_model(tmp_path, "model"), base)
    assert served_versions.complete_versions(base) == []


@pytest.mark.parametrize("lost", [
    [],  # the staging emptied after its load test (removed by another host's cleanup)
    ["variables/variables.data-00000-of-00001"],
    ["saved_model.pb"],
], ids=["emptied", "no-variable-data", "no-graph"])  # fmt: skip
def test_a_partial_staged_copy_is_an_error_not_a_green_push(tmp_path, lost):
    """The commit checks the staged copy is a whole SavedModel before moving it and the
    version after: a partial one raises, naming what is missing, and leaves no version."""
    model, base = _model(tmp_path, "model"), str(tmp_path / "serving")

    def lose_files(staging):
        for name in lost or fx.files_under(staging):
            os.remove(os.path.join(staging, name))

    with pytest.raises(pusher.IncompleteVersion, match="missing") as raised:
        pusher.publish_version(model, base, expected_served=None, check=lose_files)
    named = (lost or ["saved_model.pb"])[0].split("00000")[0]  # the data shard: by its prefix
    assert named in str(raised.value)
    assert served_versions.complete_versions(base) == []
    assert not [n for n in os.listdir(base) if n.isdigit()]


def test_a_lease_release_that_fails_after_the_commit_is_a_warning(tmp_path, caplog):
    """The version is committed and visible; a lease that cannot be marked released expires
    on its own, so the push succeeded."""
    from unittest import mock

    from components.atomic_pusher import lock

    class Held:
        def release(self):
            raise OSError("the store did not answer")

    leasing = lock._remote_lease("gs://b/serving/.push.lease", time.monotonic() + 5, 5)
    with mock.patch.object(lock.lease, "acquire", return_value=Held()), leasing:
        pass
    assert "the push lease was not released" in caplog.text
    assert "the store did not answer" in caplog.text
