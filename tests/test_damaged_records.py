"""Records an operator's commands read or write (issue 71 item 10): a damaged night record or
`endpoint.json` is one line naming the file and exit status 2, never a traceback, and nothing
moves; the rollback record is whole or absent, so a rollback stopped while writing it (a full
disk) leaves the version served, no partial record, and one line."""

import builtins
import errno

import pytest

from pipeline import cli

from cifar_fixtures import served_version as _serve
from conftest import one_line_error


@pytest.fixture
def serving(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    base = tmp_path / "out" / "serving" / "cifar10"
    for version in ("100", "200"):
        _serve(base, version)
    return base


def _listing(base):
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*"))


def test_a_damaged_night_record_is_named_by_status(serving, capsys):
    record = serving / ".nights" / "latest.json"
    record.parent.mkdir()
    record.write_text('{"outcome": "pus')
    assert cli.main(["status", "--model-dir", str(serving)]) == 2
    one_line_error(capsys, str(record), "damaged")


@pytest.mark.parametrize("version", ["200", "100"])
def test_a_damaged_endpoint_record_stops_rollback_in_one_line(serving, capsys, version):
    (serving / version / "endpoint.json").write_text("{not json")
    before = _listing(serving)
    assert cli.main(["rollback", "--model-dir", str(serving), "--reason", "r"]) == 2
    one_line_error(capsys, str(serving / version / "endpoint.json"), "damaged")
    assert _listing(serving) == before


def test_a_rollback_stopped_while_writing_its_record_leaves_nothing_half_written(
    serving, capsys, monkeypatch
):
    real_open = builtins.open

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def open_(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullDisk(handle) if ".rolled-back" in str(path) and "w" in mode else handle

    monkeypatch.setattr(builtins, "open", open_)
    assert cli.main(["rollback", "--model-dir", str(serving), "--reason", "r"]) == 2
    monkeypatch.setattr(builtins, "open", real_open)
    one_line_error(capsys, "No space left on device")
    aside = serving / ".rolled-back"
    assert not aside.exists() or [p.name for p in aside.iterdir()] == []
    assert (serving / "200" / "saved_model.pb").exists()
    assert cli.main(["rollback", "--model-dir", str(serving), "--reason", "r"]) == 0
    assert sorted(p.name for p in aside.iterdir()) == ["200", "200.json"]
