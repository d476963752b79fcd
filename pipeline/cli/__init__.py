"""`cifar10-pipeline`: run the pipeline locally, compile and submit it to Vertex AI or
Kubeflow Pipelines (after running the compiled file here under kfp.local, if you like),
classify images with the pushed model."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

from components.storage import object_store
from pipeline.cli import compile as compile_command
from pipeline.cli import gc, local_kfp, predict, report, rollback, run, status, submit
from pipeline.common import exit_status, library_log

# Commands whose libraries' console output (TensorFlow's C++ start-up errors, TFX and absl
# logging) goes to a log file of its own: --log-file, else the user's state directory, never
# the working directory. `run` keeps its log in its output folder. Each with the lowest level
# its log keeps: what `predict` and `report` would log at INFO is what their imports say
# (Beam's type hints, absl's optional modules), so they keep warnings and errors, and a log
# that stays empty is removed.
LIBRARY_OUTPUT_TO_LOG = {
    "compile": logging.INFO,
    "submit": logging.INFO,
    "predict": logging.WARNING,
    "report": logging.WARNING,
    "rollback": logging.WARNING,
    "status": logging.WARNING,
    "gc": logging.WARNING,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cifar10-pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=exit_status.epilog(),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands_in_order = (
        run, compile_command, submit, local_kfp, report, predict, rollback, status, gc,
    )  # fmt: skip
    for command in commands_in_order:
        command.add_parser(commands)
    for name in LIBRARY_OUTPUT_TO_LOG:
        commands.choices[name].add_argument(
            "--log-file",
            metavar="PATH",
            help="where the libraries' log goes (default: a new file in "
            "$XDG_STATE_HOME/cifar10-pipeline/logs, else ~/.local/state/cifar10-pipeline/logs)",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    # Library deprecation notices (google-api-core on Python 3.10, TF/TFX internals) are
    # not actionable for a user of this CLI; the full logs still go to the log file.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="google")
    args = build_parser().parse_args(argv)
    if args.command not in LIBRARY_OUTPUT_TO_LOG:
        return args.func(args)
    if args.log_file:
        log_path = Path(args.log_file).expanduser().resolve()
    else:  # the process id too: two commands started in the same second must not share a log
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        log_path = library_log.user_log_dir() / f"{args.command}-{stamp}.log"
    with library_log.to_file(log_path, LIBRARY_OUTPUT_TO_LOG[args.command]):
        status = args.func(args)
    if status == exit_status.ERROR and log_path.exists():  # a refusal stays one line
        print(f"(the libraries' log: {log_path})", file=sys.stderr)
    return status


def entry() -> None:
    """The `cifar10-pipeline` console script (and `python -m pipeline.cli`): `main()`, its
    exit handlers, then the process ends without tearing the interpreter down. Once
    TensorFlow, TFX and Beam are imported, Python's own teardown (thousands of modules, their
    C++ objects) takes 1-2 s that nothing needs: by then every output is written and closed,
    every worker process joined. The handlers still run (the library log's flush, AutoGraph
    deleting its generated files from the temporary folder). An exception still leaves the
    normal way, traceback and all, except once tensorflow-io is imported (an s3:// path):
    its teardown would abort, so the traceback is printed and the exit status is 1."""
    try:
        status = main()
    except Exception:
        if not object_store.active():
            raise
        # tensorflow-io aborts interpreter teardown (exit 134, tensorflow/io#2039): the
        # traceback, then the same quick exit as below with the unexpected-error status.
        traceback.print_exc()
        status = exit_status.ERROR
    atexit._run_exitfuncs()  # what interpreter shutdown would run first, then clears
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing reaches it
            stream.flush()
    os._exit(status)
