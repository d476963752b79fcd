"""What every night adds to a serving folder is bounded (issue 71 item 8): night records beyond
NIGHTS_KEPT go (the pushing night of a version still served stays: `status` reads it), a dead
night's facts folder goes once stale, rolled-back versions keep their files for the newest
ROLLED_BACK_WHOLE and their records always, only the latest rollback's choice is protected
from --keep-versions, and a run folder keeps RUN_LOGS_KEPT run logs. Then the soak: 60
simulated nights through the product's code (benchmarks/soak.py) on a local folder; the same
on s3:// and gs:// in tests/test_soak_stores.py."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from benchmarks import soak
from components.atomic_pusher import executor as pusher
from components.atomic_pusher import retention
from components.contract import (
    NIGHTS_KEPT,
    ROLLED_BACK_WHOLE,
    RUN_LOGS_KEPT,
    STALE_NIGHT_SECONDS,
)
from components.night_report import message
from components.storage import night_facts, served_versions
from pipeline import cli
from pipeline.local import runner

import cifar_fixtures as fx
import http_stand_in


def _night(outcome: str, served_after: str | None = None) -> dict:
    return {"outcome": outcome, "served_after": served_after}


def _records(base) -> list[str]:
    folder = base / night_facts.NIGHTS_DIR
    return sorted(n for n in os.listdir(folder) if n != message.LATEST_FILE and n.endswith(".json"))


@pytest.mark.parametrize("extra", [0, 1])
def test_night_records_beyond_the_kept_are_removed(tmp_path, extra):
    base = tmp_path / "serving"
    for _ in range(NIGHTS_KEPT + extra):
        message.record(str(base), _night("no_new_span"))
    kept = _records(base)
    assert len(kept) == NIGHTS_KEPT  # just inside: all kept; one more: the oldest goes
    assert json.loads((base / ".nights" / "latest.json").read_text())["outcome"] == "no_new_span"


def test_the_night_that_pushed_a_served_version_is_kept_however_old(tmp_path, capsys):
    base = tmp_path / "serving"
    fx.served_version(base, "100")
    message.record(str(base), {**_night("pushed", "100"), "eval_accuracy": 0.87})
    message.record(str(base), _night("pushed", "99"))  # a version no longer in the folder
    for _ in range(NIGHTS_KEPT):
        message.record(str(base), _night("no_new_span"))
    pushed = [n for n in _records(base) if n.endswith("-pushed.json")]
    assert len(pushed) == 1 and len(_records(base)) == NIGHTS_KEPT + 1
    assert cli.main(["status", "--model-dir", str(base), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval_accuracy"] == 0.87


@pytest.mark.parametrize(
    "age, removed", [(STALE_NIGHT_SECONDS - 60, False), (STALE_NIGHT_SECONDS + 60, True)]
)
def test_a_dead_nights_facts_go_once_stale_and_a_running_nights_stay(tmp_path, age, removed):
    base = str(tmp_path / "serving")
    dead, running = night_facts.folder(base, "dead-run"), night_facts.folder(base, "running-run")
    night_facts.write(dead, night_facts.SERVED, {"served_before": None})
    night_facts.write(running, night_facts.SERVED, {"served_before": None})
    then = time.time() - age
    for path in os.listdir(dead):
        os.utime(os.path.join(dead, path), (then, then))
    message.record(base, _night("no_new_span"))
    assert os.path.exists(dead) is not removed
    assert os.path.exists(running)


def test_rolled_back_versions_keep_their_records_and_the_newest_their_files(tmp_path):
    base = tmp_path / "serving"
    versions = [str(v) for v in range(100, 100 + 100 * (ROLLED_BACK_WHOLE + 4), 100)]
    for version in versions:
        fx.served_version(base, version)
    for _ in range(ROLLED_BACK_WHOLE + 2):
        assert cli.main(["rollback", "--model-dir", str(base), "--reason", "bad"]) == 0
    aside = sorted(served_versions.rolled_back(str(base)), key=int)
    assert len(aside) == ROLLED_BACK_WHOLE + 2
    model = fx.fake_saved_model(tmp_path, "next")
    _, version, _ = pusher.publish_version(model, str(base))
    folders = [v for v in aside if (base / ".rolled-back" / v).is_dir()]
    assert folders == aside[-ROLLED_BACK_WHOLE:]
    assert list(served_versions.rolled_back(str(base))) == aside  # every record stays
    # the span checks still find them: a span a rolled-back version trained on is not retrained
    state = served_versions.read_served_state(str(base))
    oldest = aside[0]
    assert state.rollback_of(int(oldest) // 100, f"print-{oldest}")[0] == oldest
    assert int(version) > int(aside[-1])


def test_version_numbers_keep_rising_past_a_rolled_back_version_whose_files_are_gone(tmp_path):
    base = tmp_path / "serving"
    fx.served_version(base, "100")
    future = str(int(time.time()) + 86400)  # pushed by a host whose clock ran a day ahead
    fx.served_version(base, future)
    assert cli.main(["rollback", "--model-dir", str(base), "--reason", "bad"]) == 0
    shutil.rmtree(base / ".rolled-back" / future)  # as prune_rolled_back leaves it: the record
    _, version, _ = pusher.publish_version(fx.fake_saved_model(tmp_path, "x"), str(base))
    assert int(version) == int(future) + 1


def test_only_the_latest_rollbacks_choice_outlives_keep_versions(tmp_path):
    base = tmp_path / "serving"
    for version in ("100", "200", "300"):
        fx.served_version(base, version)
    assert cli.main(["rollback", "--model-dir", str(base), "--to", "100", "--reason", "a"]) == 0
    for version in ("400", "500", "600"):
        fx.served_version(base, version)
    assert cli.main(["rollback", "--model-dir", str(base), "--to", "400", "--reason", "b"]) == 0
    for version in ("700", "800", "900"):
        fx.served_version(base, version)
    assert retention.prune(str(base), 2) == ["100", "700"]  # 400: the latest rollback's
    assert served_versions.complete_versions(str(base)) == ["400", "800", "900"]


@pytest.mark.parametrize("present", [RUN_LOGS_KEPT - 1, RUN_LOGS_KEPT])
def test_a_run_keeps_its_newest_logs(tmp_path, present):
    logs = tmp_path / "logs"
    logs.mkdir()
    names = [f"run-20260101-{i:06d}.log" for i in range(present)]
    for name in names:
        (logs / name).write_text("x")
    (logs / "other.txt").write_text("not a run log")
    removed = runner.prune_logs(logs)
    left = sorted(p.name for p in logs.glob("run-*.log"))
    assert len(left) == min(present, RUN_LOGS_KEPT - 1)  # room for the one about to start
    assert [p.name for p in removed] == names[: present - len(left)]
    assert (logs / "other.txt").exists()


def check_soak(rows: list[dict], delivered: bool) -> None:
    """Every night reported (delivered, where a webhook was set), and no growth once the
    kept night records are full, but one small record per rollback."""
    for row in rows:
        if row["night"] % 10 == 3:
            assert row["outcome"] is None  # the night that died
        else:
            assert row["outcome"] == ("pushed delivered" if delivered else "pushed"), row
    by_night = {row["night"]: row for row in rows}
    settled, last = by_night[NIGHTS_KEPT + 10], by_night[len(rows)]
    rollbacks = sum(1 for n in range(NIGHTS_KEPT + 11, len(rows) + 1) if n % 20 == 10)
    assert last["files"] <= settled["files"] + rollbacks, (settled, last)
    assert last["bytes"] <= settled["bytes"] + 400 * rollbacks + 2000, (settled, last)


def run_soak(root, env=None) -> list[dict]:
    """benchmarks/soak.py in a process of its own (it sets the clock of the process it runs in)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", str(root)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_sixty_nights_on_a_local_folder_stay_bounded(tmp_path):
    with http_stand_in.webhook() as (hook, url):
        rows = run_soak(tmp_path / "root", {**os.environ, message.NOTIFY_VARIABLE: url})
    assert len(rows) == soak.NIGHTS
    check_soak(rows, delivered=True)
    assert len(hook.received) == soak.NIGHTS - soak.NIGHTS // 10  # one a night that ended
    base = tmp_path / "root" / "serving" / "cifar10"
    assert len(served_versions.complete_versions(str(base))) <= soak.KEEP_VERSIONS + 1
    assert not any((base / ".nights" / "running").iterdir())
