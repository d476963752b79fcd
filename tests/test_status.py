"""`cifar10-pipeline status`: the served version, its age, spans and accuracy, the last
night; exit 7 when nothing is served or it is older than --max-age, 8 when the last night
was red, 0 otherwise; --json for probes; bad input exit 2."""

import json
import time

import pytest

from components.night_report import message as nights
from pipeline import cli

from cifar_fixtures import served_version as _serve


def _night(base, outcome, **facts):
    message = {"outcome": outcome, "time": "2026-12-05T01:00:00+00:00", **facts}
    nights.record(str(base), message)
    return message


@pytest.fixture
def serving(tmp_path):
    base = tmp_path / "out" / "serving" / "cifar10"
    version = str(int(time.time()) - 3600)  # pushed an hour ago
    _serve(base, version, {1: "print-1", 2: "print-2"})
    _night(base, "pushed", served_after=version, eval_accuracy=0.8423)
    return base, version


def test_a_fresh_served_model_after_a_green_night_is_exit_0(serving, capsys):
    base, version = serving
    assert cli.main(["status", "--output-dir", str(base.parents[1]), "--max-age", "26h"]) == 0
    out = capsys.readouterr().out
    assert f"served          {version} (pushed 1.0 h ago)" in out
    assert "spans           1, 2" in out and "eval accuracy   84.23%" in out
    assert "last night      pushed at 2026-12-05T01:00:00+00:00" in out


@pytest.mark.parametrize("max_age, status", [("61m", 0), ("59m", 7)])
def test_max_age_just_inside_and_just_outside(serving, capsys, max_age, status):
    base, _ = serving
    assert cli.main(["status", "--model-dir", str(base), "--max-age", max_age]) == status


def test_a_red_last_night_is_exit_8_and_says_so(serving, capsys):
    base, _ = serving
    _night(base, "failed", failed_step="Trainer")
    assert cli.main(["status", "--model-dir", str(base), "--max-age", "26h"]) == 8
    out = capsys.readouterr().out
    assert "last night      failed at" in out and "(step Trainer)" in out
    assert "RED             the last night ended failed" in out


def test_a_green_no_op_night_stays_0(serving):
    base, _ = serving
    _night(base, "no_new_span")
    assert cli.main(["status", "--model-dir", str(base)]) == 0


def test_nothing_served_is_exit_7(tmp_path, capsys):
    assert cli.main(["status", "--model-dir", str(tmp_path / "empty")]) == 7
    assert "STALE           nothing is served" in capsys.readouterr().out


def test_json_for_probes(serving, capsys):
    base, version = serving
    assert cli.main(["status", "--model-dir", str(base), "--json", "--max-age", "2d"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["served"] == version and found["spans"] == [1, 2]
    assert found["eval_accuracy"] == 0.8423 and found["max_age_seconds"] == 172800
    assert found["stale"] is False and found["last_night"]["outcome"] == "pushed"


@pytest.mark.parametrize("max_age", ["26", "soon", "-1h", "h"])
def test_a_bad_max_age_is_exit_2_one_line(serving, capsys, max_age):
    base, _ = serving
    assert cli.main(["status", "--model-dir", str(base), f"--max-age={max_age}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --max-age: not a duration")


def test_a_rolled_back_version_is_listed_and_the_one_before_it_served(serving, capsys):
    base, version = serving
    newer = str(int(version) + 60)
    _serve(base, newer, {3: "print-3"})
    assert cli.main(["rollback", "--model-dir", str(base), "--reason", "x"]) == 0
    capsys.readouterr()
    assert cli.main(["status", "--model-dir", str(base), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["served"] == version and found["rolled_back"] == [newer]


@pytest.mark.parametrize("ahead, status", [(290, 0), (310, 7)])
def test_a_version_dated_ahead_of_the_clock_is_a_fault_not_fresh(tmp_path, capsys, monkeypatch,
                                                                 ahead, status):  # fmt: skip
    """A version pushed by a host whose clock ran ahead: read with this host's clock, its
    time is in the future. Beyond 300 s that is its own line and exit status 7, also without
    --max-age; within it, clock jitter, the version is fresh."""
    base = tmp_path / "serving" / "cifar10"
    now = time.time()
    version = str(int(now))
    _serve(base, version, {1: "print-1"})
    _night(base, "pushed", served_after=version)
    monkeypatch.setattr(time, "time", lambda: now - ahead)  # this host's clock is behind
    assert cli.main(["status", "--model-dir", str(base), "--max-age", "26h"]) == status
    out = capsys.readouterr().out
    if status:
        said = f"FUTURE          the served version {version} is dated 0.1 h ahead of this host's"
        assert said in out
        assert "STALE" not in out and "(pushed" not in out
    else:
        assert "FUTURE" not in out and "(pushed 0.0 h ago)" in out
    assert cli.main(["status", "--model-dir", str(base), "--json"]) == status
    found = json.loads(capsys.readouterr().out)
    assert found["dated_ahead"] is bool(status)


def test_a_night_message_names_a_served_version_dated_in_the_future(monkeypatch):
    now = 1_800_000_000
    monkeypatch.setattr(time, "time", lambda: now)
    ahead = str(now + 2 * 86400)
    night = nights.message({"outcome": "no_new_span"}, served_before=ahead, served_after=ahead)
    assert night["faults"] == [
        f"the served version {ahead} is dated 48.0 h ahead of this host's clock: a clock "
        "ran ahead when it was pushed, so its age is unknown"
    ]
    assert nights.message({"outcome": "pushed"}, served_after=str(now - 60))["faults"] == []


def test_the_help_names_every_red_outcome(capsys):
    with pytest.raises(SystemExit):
        cli.main(["status", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    for outcome in nights.RED_OUTCOMES:
        assert outcome in said
