"""The CLI restates no default: what `run` passes without options is the config's own."""

import os
import subprocess
import sys

import pytest

from components.trainer.config import TrainingConfig
from pipeline import cli
from pipeline.cli.shared import training_config
from pipeline.settings.config import PipelineConfig


def test_run_without_options_builds_the_default_training_config():
    args = cli.build_parser().parse_args(["run"])
    assert training_config(args) == TrainingConfig()
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


@pytest.mark.parametrize(
    "flags, problem",
    [
        (["--span", "0"], "--span: must be 1 or more (0 stands for a plain source), got 0"),
        (["--span", "-1"], "argument --span: must be 1 or more"),
        (["--spans", "0"], "argument --spans: must be 1 or more"),
    ],
)
def test_span_flags_below_1_are_refused(flags, problem, capsys):
    """--span 0 once checked a span-0 folder while the ExampleGen took the newest span,
    and --spans 0 meant 1."""
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", *flags])
    assert refused.value.code == 2
    assert problem in capsys.readouterr().err


FRACTION_FLAGS = ["--accuracy-gate", "--max-regression", "--max-class-drop"]


@pytest.mark.parametrize("command", ["run", "compile"])
@pytest.mark.parametrize("flag", FRACTION_FLAGS)
@pytest.mark.parametrize("value", ["-0.01", "1.01", "nan"])
def test_fraction_flags_outside_0_to_1_are_refused(command, flag, value, capsys):
    """A negative margin once passed the parser (and --max-class-drop -0.1 blocked every
    candidate); a share above 1 means nothing."""
    with pytest.raises(SystemExit) as refused:
        cli.main([command, flag, value])
    assert refused.value.code == 2
    expected = f"argument {flag}: must be a fraction from 0 to 1, got {value}"
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("flag", FRACTION_FLAGS)
@pytest.mark.parametrize("value", ["0", "1"])
def test_fraction_flags_take_0_and_1(flag, value):
    args = cli.build_parser().parse_args(["run", flag, value])
    assert getattr(args, flag[2:].replace("-", "_")) == float(value)


@pytest.mark.parametrize("value, problem", [("0", "got 0"), ("1", "got 1"), ("-0.5", "got -0.5")])
def test_the_eval_fraction_is_strictly_between_0_and_1(value, problem, capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", "--eval-fraction", value])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --eval-fraction: must be more than 0 and less than 1" in err and problem in err


def _compile_kubeflow(cwd, output, *extra, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "compile", "--target", "kubeflow"]
        + ["--pipeline-root", "gs://b/root", "--image", "img", "--data", "gs://b/d.tar.gz"]
        + ["--output", str(output), *extra],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def test_compile_keeps_library_output_off_the_console_and_out_of_the_working_dir(tmp_path):
    """TensorFlow's C++ start-up errors ("Unable to register cuFFT factory") and TFX's
    logging go to the user's state directory; the console gets only ours, and the folder
    the command runs in gets nothing but the file it was asked to write."""
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    output = tmp_path / "pipeline.yaml"
    done = _compile_kubeflow(work, output, env={"XDG_STATE_HOME": str(state)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == f"Compiled {output}\n"
    assert done.stderr == ""
    assert list(work.iterdir()) == []
    (log,) = (state / "cifar10-pipeline" / "logs").glob("compile-*.log")
    assert "INFO" in log.read_text()


def test_log_file_takes_the_log_and_a_refusal_stays_one_line(tmp_path):
    """--log-file takes the log wherever the user says; a refused flag is still one line."""
    log = tmp_path / "mine" / "compile.log"
    done = _compile_kubeflow(tmp_path, tmp_path / "p.yaml", "--log-file", str(log))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "INFO" in log.read_text()
    failed = _compile_kubeflow(tmp_path, tmp_path / "p.txt", "--log-file", str(log))
    assert failed.returncode == 2
    assert len(failed.stderr.strip().splitlines()) == 1 and "must end in .yaml" in failed.stderr


def test_an_unexpected_failure_names_the_log(tmp_path, monkeypatch, capsys):
    """Where a command fails for a reason it cannot put in one line (exit status 1), the
    last line says where the libraries' log is."""
    import logging

    from pipeline.cli import compile as compile_command

    def failing(args):
        logging.getLogger("tfx").warning("what went wrong, in full")
        print("error: RuntimeError: boom", file=sys.stderr)
        return 1

    monkeypatch.setattr(compile_command, "cmd_compile", failing)
    log = tmp_path / "compile.log"
    status = cli.main(["compile", "--pipeline-root", "gs://b/r", "--image", "i", "--data", "gs://b/d",
                       "--log-file", str(log)])  # fmt: skip
    assert status == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"(the libraries' log: {log})"
    assert "what went wrong, in full" in log.read_text()


def test_the_user_log_dir_follows_xdg_state_home(monkeypatch, tmp_path):
    from pipeline.common.library_log import user_log_dir

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert user_log_dir() == tmp_path / "cifar10-pipeline" / "logs"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_log_dir() == tmp_path / "home" / ".local" / "state" / "cifar10-pipeline" / "logs"


def test_the_console_script_exits_with_mains_status_after_flushing_what_it_printed(tmp_path):
    """The entry point skips the interpreter's teardown (os._exit), so what the command
    printed into a pipe must be flushed first, the exit handlers must have run, and its
    status must be main()'s. Run as a
    real process: the report of a folder with no run is refused (exit 2) after a line on
    stdout that only a flush brings through a pipe."""
    marker = tmp_path / "exit-handler-ran"
    script = (
        "import atexit, pathlib, sys\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
        "from pipeline import cli\n"
        "real = cli.main\n"
        "def main():\n"
        "    print('printed before the exit')\n"
        "    return real(['report', sys.argv[1]])\n"
        "cli.main = main\n"
        "cli.entry()\n"
        "print('never reached')\n"
    )
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "no-run")],
        capture_output=True,
        text=True,
        env=buffered,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == "printed before the exit\n"
    assert "no-run" in done.stderr
    assert marker.read_text() == "yes"  # exit handlers ran (AutoGraph's clean-up is one)


# Flags for the test harness only (a stand-in's endpoint, the kfp venv's interpreter).
HIDDEN_FLAGS = {"--api-endpoint", "--kfp-python"}


def test_every_flag_a_command_takes_is_in_its_help():
    """A flag that works but is missing from --help (as --poll-seconds was) is a flag no
    reader can find."""
    from pipeline import cli as main_cli

    commands = main_cli.build_parser()._subparsers._group_actions[0].choices
    for name, parser in commands.items():
        shown = parser.format_help()
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in HIDDEN_FLAGS:
                    assert flag in shown, f"`{name} --help` does not show {flag}"
