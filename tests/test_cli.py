"""The CLI restates no default: what `run` passes without options is the config's own."""

import subprocess
import sys

import pytest

from components.trainer.config import TrainingConfig
from pipeline import cli
from pipeline.config import DEFAULT_OUTPUT_DIR, PipelineConfig


def test_run_without_options_builds_the_default_training_config():
    args = cli.build_parser().parse_args(["run"])
    assert cli._training_config(args) == TrainingConfig()
    defaults = PipelineConfig(
        pipeline_name="p",
        pipeline_root="r",
        source_uri="s",
        source_fingerprint="f",
        serving_dir="d",
    )
    assert (args.eval_fraction, args.accuracy_gate, args.max_regression) == (
        defaults.eval_fraction,
        defaults.accuracy_gate,
        defaults.max_regression,
    )


def test_help_shows_the_config_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    text = capsys.readouterr().out
    assert "(default: airbench)" in text and "(default: 0.8)" in text


def test_compile_keeps_library_output_off_the_console(tmp_path):
    """TensorFlow's C++ start-up errors ("Unable to register cuFFT factory") and TFX's
    logging go to outputs/logs under the working directory; the console gets only ours."""
    output = tmp_path / "pipeline.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "compile", "--target", "kubeflow"]
        + ["--pipeline-root", "gs://b/root", "--image", "img", "--data", "gs://b/d.tar.gz"]
        + ["--output", str(output)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == f"Compiled {output}\n"
    assert done.stderr == ""
    (log,) = (tmp_path / DEFAULT_OUTPUT_DIR / "logs").glob("compile-*.log")
    assert "INFO" in log.read_text()
