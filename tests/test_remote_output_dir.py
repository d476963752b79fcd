"""`--output-dir` with a bucket URI (issue 71 item 11): `status` and `rollback` read the serving
folder a compiled pipeline pushes to, `<pipeline-root>/serving/cifar10`, on gs:// and s3://
(tests/test_object_store.py and tests/test_gcs_store.py run them on SeaweedFS and the GCS
emulator); `run` and `gc`, which need a local folder (SQLite ML Metadata, the run lock),
refuse it in one line with exit status 2, naming what to use instead. None of them makes a
local folder named after the URI."""

import pytest

from pipeline import cli

from conftest import one_line_error


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.mark.parametrize("root", ["gs://bucket/root", "s3://mlpipeline/root/"])
def test_status_reads_the_serving_folder_under_a_bucket_root(root, monkeypatch, tmp_path):
    from pipeline.operations import status

    asked = []

    def read(folder):
        asked.append(folder)
        raise OSError("stand-in: nothing read")

    monkeypatch.setattr(status, "read", read)
    assert cli.main(["status", "--output-dir", root]) == 2
    assert asked == [root.rstrip("/") + "/serving/cifar10"]
    assert not list(tmp_path.glob("*:"))


@pytest.mark.parametrize("root", ["gs://bucket/root", "s3://mlpipeline/root"])
def test_rollback_acts_on_the_serving_folder_under_a_bucket_root(root, monkeypatch, tmp_path):
    from components.atomic_pusher import rollback

    asked = []

    def roll_back(folder, reason, to, api_endpoint):
        asked.append(folder)
        raise rollback.RollbackError(f"{folder}: stand-in")

    monkeypatch.setattr(rollback, "roll_back", roll_back)
    assert cli.main(["rollback", "--output-dir", root, "--reason", "r"]) == 2
    assert asked == [f"{root}/serving/cifar10"]
    assert not list(tmp_path.glob("*:"))


@pytest.mark.parametrize("root", ["gs://bucket/root", "s3://mlpipeline/root"])
def test_gc_refuses_a_bucket_in_one_line(root, capsys, tmp_path):
    assert cli.main(["gc", "--output-dir", root, "--older-than", "30"]) == 2
    one_line_error(capsys, root, "local run folder")
    assert not list(tmp_path.glob("*:"))


@pytest.mark.parametrize("root", ["gs://bucket/out", "s3://mlpipeline/out"])
def test_run_refuses_a_bucket_output_dir_in_one_line(root, capsys, tmp_path):
    assert cli.main(["run", "--output-dir", root, "--data", str(tmp_path / "none")]) == 2
    one_line_error(capsys, root, "--pipeline-root")
    assert not list(tmp_path.glob("*:"))
