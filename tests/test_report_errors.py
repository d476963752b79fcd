"""`report` on a folder it cannot read: an outdated, damaged or foreign run summary, damaged
artifacts, a page it cannot write. One line naming the folder or file and the problem, exit
status 2, no traceback, and the page left as it was (none written, none half-written)."""

import json
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.local.summary import SUMMARY_FILE, RunSummary


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _summary(run_dir: Path, **artifacts) -> Path:
    RunSummary("r1", {"train": 3}, {}, {}, artifacts).write(run_dir)
    return run_dir / SUMMARY_FILE


def _refused(capsys, run_dir: Path, *named: str) -> str:
    """The one error line of `report run_dir`, after checking the page is as it was."""
    before = (run_dir / "report.html").read_text() if (run_dir / "report.html").is_file() else None
    assert cli.main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for text in named:
        assert text in err, err
    after = (run_dir / "report.html").read_text() if (run_dir / "report.html").is_file() else None
    assert after == before
    assert not list(run_dir.glob(".*.part")) if run_dir.is_dir() else True
    return err


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"run_id": "r1", "record_counts": {}}', "missing artifacts, stage_seconds"),
        ('{"run_id": "r1", "rec', "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        ("[1, 2, 3]", "not a run summary"),
        ('{"model": "resnet", "accuracy": 0.9}', "not a run summary"),
    ],
    ids=["outdated", "truncated", "binary", "a-list", "foreign"],
)
def test_a_summary_it_cannot_read_is_one_line(tmp_path, capsys, content, problem):
    summary = tmp_path / SUMMARY_FILE
    if isinstance(content, bytes):
        summary.write_bytes(content)
    else:
        summary.write_text(content)
    (tmp_path / "report.html").write_text("the page of an earlier report")
    _refused(capsys, tmp_path, f"error: {summary}: ", problem)


def test_a_field_of_the_wrong_kind_is_named(tmp_path, capsys):
    summary = _summary(tmp_path)
    values = json.loads(summary.read_text())
    summary.write_text(json.dumps({**values, "stage_seconds": {"Trainer": "slow"}}))
    _refused(capsys, tmp_path, str(summary), "stage_seconds")


def test_a_summary_that_is_a_folder_and_a_run_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "run" / SUMMARY_FILE).mkdir(parents=True)
    _refused(capsys, tmp_path / "run", str(tmp_path / "run" / SUMMARY_FILE))
    (tmp_path / "file").write_text("x")
    assert cli.main(["report", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'file'}: not a folder\n"


def test_damaged_statistics_are_named(tmp_path, capsys):
    from components.storage.tfx_files import statistics_file

    statistics = tmp_path / "artifacts" / "statistics"
    damaged = Path(statistics_file(str(statistics), "train"))
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"\x0a\xff\xff\xff\xffnot a proto")
    _summary(tmp_path, statistics=str(statistics))
    _refused(capsys, tmp_path, str(damaged))


def test_damaged_examples_are_named(tmp_path, capsys):
    from components.storage.tfx_files import split_uri

    examples = tmp_path / "artifacts" / "examples"
    split = Path(split_uri(str(examples), "train"))
    split.mkdir(parents=True)
    (split / "data_tfrecord-00000-of-00001.gz").write_bytes(b"not gzip at all" * 10)
    _summary(tmp_path, examples=str(examples))
    _refused(capsys, tmp_path, str(examples))


def test_a_page_it_cannot_write_is_named(tmp_path, capsys):
    _summary(tmp_path)
    (tmp_path / "report.html").mkdir()
    _refused(capsys, tmp_path, str(tmp_path / "report.html"))
