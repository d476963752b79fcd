"""A night with no new span writes its run summary under the output folder's run lock, as
every run does: while another run holds the folder it is `busy` (exit status 10) and leaves
the holder's run_summary.json and latest night alone; alone, it writes `no_new_span`."""

import fcntl
import json

import pytest

from components.cifar10_example_gen.spans import NoNewSpan
from pipeline import cli
from pipeline.cli import run as cli_run


@pytest.fixture
def no_new_span(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def prepared(args, output_dir):
        raise NoNewSpan("no new span: span 3 is already served")

    monkeypatch.setattr(cli_run, "_prepared", prepared)
    return ["run", "--data", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out")]


def test_a_no_new_span_night_beside_a_running_one_is_busy_and_writes_no_summary(
    tmp_path, no_new_span, capsys
):
    out = tmp_path / "out"
    out.mkdir()
    holder = '{"outcome": "running, the holder\'s"}'
    (out / "run_summary.json").write_text(holder)
    with open(out / ".run.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        assert cli.main(no_new_span) == 10
    assert (out / "run_summary.json").read_text() == holder
    assert "another run (pid 4242)" in capsys.readouterr().err
    nights = out / "serving" / "cifar10" / ".nights"
    assert not (nights / "latest.json").exists()
    [busy] = nights.glob("*-busy.json")
    assert json.loads(busy.read_text())["outcome"] == "busy"


def test_a_no_new_span_night_alone_writes_its_summary(tmp_path, no_new_span):
    assert cli.main(no_new_span) == 0
    summary = json.loads((tmp_path / "out" / "run_summary.json").read_text())
    assert summary["outcome"] == "no_new_span"
