"""The CLI restates no default: what `run` passes without options is the config's own."""

import pytest

from components.trainer.config import TrainingConfig
from pipeline import cli
from pipeline.config import PipelineConfig


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
