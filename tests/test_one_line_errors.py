"""Bad input to `compile`, `submit` and `local-kfp` that once ended in a traceback (exit
status 1): one line naming the file and the problem, exit status 2."""

from pathlib import Path

import pytest

from pipeline import cli
from pipeline.common import kfp_platform

from conftest import one_line_error

KUBEFLOW = ["compile", "--target", "kubeflow", "--pipeline-root", "gs://b/r", "--image", "i"]
KUBEFLOW += ["--data", "gs://b/d.tar.gz"]


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_compile_to_a_folder_is_refused_in_one_line(tmp_path, capsys):
    output = tmp_path / "pipeline.yaml"
    output.mkdir()
    assert cli.main([*KUBEFLOW, "--output", str(output)]) == 2
    one_line_error(capsys, str(output), "is a folder")


def test_compile_under_a_file_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "notes").write_text("x")
    output = tmp_path / "notes" / "pipeline.yaml"
    assert cli.main([*KUBEFLOW, "--output", str(output)]) == 2
    one_line_error(capsys, str(output), f"{tmp_path / 'notes'} is a file")


def _binary_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"\x00\xff\xfe not text")
    return path


def test_a_pipeline_file_that_is_not_text_is_refused_by_submit(tmp_path, capsys):
    path = _binary_yaml(tmp_path)
    argv = ["submit", str(path), "--target", "kubeflow", "--host", "http://127.0.0.1:9"]
    assert cli.main([*argv, "--dry-run"]) == 2
    one_line_error(capsys, f"error: {path}: not a readable KFP pipeline YAML (not UTF-8 text)")


def test_a_pipeline_file_that_is_not_text_is_a_pipeline_file_error(tmp_path):
    """What `local-kfp` reads the file with (pipeline.kfp_local.plan), in the kfp SDK's
    own environment."""
    path = _binary_yaml(tmp_path)
    with pytest.raises(kfp_platform.PipelineFileError, match="not UTF-8 text"):
        kfp_platform.read_pipeline_file(path)
    with pytest.raises(kfp_platform.PipelineFileError, match=r"\(No such file or directory\)"):
        kfp_platform.read_pipeline_file(tmp_path / "missing.yaml")


def test_local_kfp_checks_its_folders_before_starting(tmp_path, capsys):
    """Once a traceback from the kfp environment (--output-dir under a file), or a missing
    --data found 40 s later, when the first step failed."""
    pipeline_file = tmp_path / "p.yaml"
    pipeline_file.write_text("pipelineInfo: {name: x}\n")
    (tmp_path / "notes").write_text("x")
    out = tmp_path / "notes" / "out"
    assert cli.main(["local-kfp", str(pipeline_file), "--output-dir", str(out)]) == 2
    one_line_error(capsys, f"error: --output-dir {out}: {tmp_path / 'notes'} is a file")
    missing = tmp_path / "cifar.tar.gz"
    argv = ["local-kfp", str(pipeline_file), "--data", str(missing)]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    one_line_error(capsys, f"error: --data {missing}: no such file or folder")
