"""`cifar10-pipeline rollback`: the served version leaves the folder TF Serving reads, kept
aside with who, when and why; the version before it is served; later nights read it there
(never served, its spans not retrained unattended); bad input changes nothing (exit 2).
Tried at dd83add: a version moved out of the serving folder by hand was retrained and pushed
again the next night (exit 0, outcome pushed)."""

import json

import pytest

from components.cifar10_example_gen import spans
from components.storage import served_versions
from pipeline import cli

from cifar_fixtures import served_version as _serve


@pytest.fixture
def serving(tmp_path):
    base = tmp_path / "out" / "serving" / "cifar10"
    for version in ("100", "200", "300"):
        _serve(base, version)
    return base


def _listing(base):
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*"))


def test_the_served_version_is_rolled_back_and_kept_aside_with_who_when_why(serving, capsys):
    status = cli.main(["rollback", "--output-dir", str(serving.parents[1]), "--reason", "bad"])
    assert status == 0
    assert served_versions.complete_versions(str(serving)) == ["100", "200"]
    state = served_versions.read_served_state(str(serving))
    assert state.version == "200" and list(state.rolled_back) == ["300"]
    record = state.rolled_back["300"]
    assert record["why"] == "bad" and record["rolled_back_to"] == "200"
    assert "@" in record["who"] and record["when"].endswith("+00:00")
    assert record["spans"] == {"3": "print-300"}
    kept = serving / ".rolled-back" / "300"
    assert (kept / "saved_model.pb").read_bytes() == b"graph"
    assert (kept / "variables" / "variables.index").read_bytes() == b"index"
    out = capsys.readouterr().out
    assert "rolled back   version 300" in out and "served now    version 200" in out
    # the state survives its artifact, as every later step reads it
    again = served_versions.ServedState.from_json(state.to_json())
    assert again.rolled_back == state.rolled_back


def test_rollback_to_a_version_takes_every_newer_one_out(serving):
    assert cli.main(["rollback", "--model-dir", str(serving), "--to", "100", "--reason", "x"]) == 0
    state = served_versions.read_served_state(str(serving))
    assert state.version == "100" and list(state.rolled_back) == ["200", "300"]


@pytest.mark.parametrize(
    "flags, problem",
    [
        (["--to", "150"], "no complete version 150 (complete: 100, 200, 300)"),
        (["--to", "300"], "version 300 is already the one served"),
        (["--to", "v2"], "--to v2: a version is a number"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(serving, capsys, flags, problem):
    before = _listing(serving)
    status = cli.main(["rollback", "--model-dir", str(serving), *flags, "--reason", "x"])
    err = capsys.readouterr().err
    assert status == 2 and problem in err and len(err.strip().splitlines()) == 1
    assert _listing(serving) == before


def test_nothing_older_to_serve_is_refused(tmp_path, capsys):
    base = tmp_path / "serving"
    _serve(base, "100")
    before = _listing(base)
    assert cli.main(["rollback", "--model-dir", str(base), "--reason", "x"]) == 2
    assert "the only complete version; nothing older to serve" in capsys.readouterr().err
    assert _listing(base) == before


def test_a_reason_is_required(serving, capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(["rollback", "--model-dir", str(serving)])
    assert refused.value.code == 2 and "--reason" in capsys.readouterr().err


def test_the_rolled_back_spans_are_not_retrained_unattended(serving):
    cli.main(["rollback", "--model-dir", str(serving), "--reason", "labels were wrong"])
    state = served_versions.read_served_state(str(serving))
    with pytest.raises(
        spans.NoNewSpan,
        match=r"span-3 trained version 300, which was rolled "
        r"back \(.*: labels were wrong\); nothing is retrained unattended",
    ):
        spans.check_not_stale({3: "print-300"}, state)
    spans.check_not_stale({3: "print-300"}, state, force=True)  # --force retrains
    spans.check_not_stale({3: "other content"}, state)  # new content under the number is new


def test_a_plain_source_rolled_back_is_not_retrained_either(tmp_path):
    base = tmp_path / "serving"
    _serve(base, "100", {0: "archive-a"})
    _serve(base, "200", {0: "archive-b"})
    cli.main(["rollback", "--model-dir", str(base), "--reason", "x"])
    state = served_versions.read_served_state(str(base))
    with pytest.raises(spans.NoNewSpan, match="this source trained version 200"):
        spans.check_not_stale({0: "archive-b"}, state)
    assert json.loads((base / ".rolled-back" / "200.json").read_text())["spans"] == {
        "0": "archive-b"
    }
