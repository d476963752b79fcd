"""A rollback killed between its steps (issue 71 item 10): SIGKILL after its record is written
and before the version leaves the serving folder. `status` explains the state (the version
still served has a rollback record: the rollback did not finish) with exit status 7, and
running the same `rollback` again finishes it."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from components.storage import served_versions
from pipeline import cli

from cifar_fixtures import served_version as _serve

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def serving(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    base = tmp_path / "out" / "serving" / "cifar10"
    for version in ("100", "200", "300"):
        _serve(base, version)
    return base


def _killed_rollback(base, *flags) -> int:
    """`rollback` in a child process that SIGKILLs itself at its first folder move, after the
    record of that version was written."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from components.atomic_pusher import rollback
        replace = os.replace
        def killed_at_the_move(source, target):  # the record's own write goes through
            if ".partial-" not in str(source):
                os.kill(os.getpid(), signal.SIGKILL)
            replace(source, target)
        rollback.os.replace = killed_at_the_move
        from pipeline import cli
        sys.exit(cli.main(["rollback", "--model-dir", {str(base)!r}, "--reason", "bad",
                           *{list(flags)!r}]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True)
    return done.returncode


@pytest.mark.parametrize("flags", [(), ("--to", "100")])
def test_status_explains_an_interrupted_rollback_and_a_second_one_finishes_it(
    serving, capsys, flags
):
    assert _killed_rollback(serving, *flags) == -signal.SIGKILL
    assert served_versions.newest_complete_version(str(serving)) == "300"  # still served
    assert cli.main(["status", "--model-dir", str(serving)]) == 7
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("ROLLBACK")]
    assert "300" in line and "did not finish" in line and "rollback" in line
    assert cli.main(["rollback", "--model-dir", str(serving), "--reason", "bad", *flags]) == 0
    left = "200" if not flags else "100"
    assert served_versions.complete_versions(str(serving))[-1] == left
    capsys.readouterr()
    assert cli.main(["status", "--model-dir", str(serving)]) == 0
    assert "ROLLBACK" not in capsys.readouterr().out


def test_status_json_names_the_unfinished_rollback(serving, capsys):
    assert _killed_rollback(serving) == -signal.SIGKILL
    assert cli.main(["status", "--model-dir", str(serving), "--json"]) == 7
    import json

    assert json.loads(capsys.readouterr().out)["unfinished_rollback"] == ["300"]
