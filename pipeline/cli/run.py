"""`cifar10-pipeline run`: the whole pipeline on this machine, its report and its one-screen
summary; bad data is refused before TFX, Beam or TensorFlow is imported."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import time
from pathlib import Path

from pipeline.cli.shared import (
    add_gate_args,
    add_serving_args,
    add_training_args,
    keep_versions,
    training_config,
)
from pipeline.common import exit_status
from pipeline.common.files import write_atomically
from pipeline.operations.serving import MODEL_NAME, is_uri
from pipeline.settings.config import DEFAULT_OUTPUT_DIR


def _bf16_blocked_here(training) -> str:
    """Why this machine's CPU cannot train the bf16 asked for ("" where it can, or where a GPU
    or TPU may train instead): the Trainer's own refusal, said before any step runs."""
    from components.trainer import hardware

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1")
    no_gpu = hidden or not glob.glob("/dev/nvidia[0-9]*")
    if training.precision != "mixed_bfloat16" or training.strategy == "tpu" or not no_gpu:
        return ""
    return hardware.cpu_bf16_blocked(hardware.detect("cpu"))


def _prepared(args: argparse.Namespace, output_dir: Path):
    """(the run's config, its spans) after the arguments, the data location and every
    record are checked; raises ValueError (SourceError and SpanError are ValueErrors),
    DataSourceError or NoNewSpan. Light modules only: TFX, Beam and TensorFlow take about
    a minute to import here, and a mistyped --data must not wait for them."""
    from pipeline.local import runner as local_runner
    from pipeline.local import span_choice
    from pipeline.settings import data_source

    training = training_config(args)
    settings = dict(
        eval_fraction=args.eval_fraction,
        accuracy_gate=args.accuracy_gate,
        max_regression=args.max_regression,
        max_class_drop=args.max_class_drop,
        accept_drift=args.accept_drift,
        accept_labels=args.accept_labels,
        accept_duplicates=args.accept_duplicates,
        keep_versions=keep_versions(args),
        force=args.force,
        enable_cache=not args.no_cache,
        beam_args=tuple(args.beam_arg),
        local_workers=args.workers,
    )
    # the arguments first: a bad flag must not wait for a download
    local_runner.local_config(output_dir, "", "", training, **settings)
    blocked = _bf16_blocked_here(training)
    if blocked:
        raise ValueError(blocked)
    source = data_source.resolve(args.data)
    config = local_runner.local_config(output_dir, source, "", training, **settings)
    choice = span_choice.choose(source, args.span, args.spans, args.force, config.serving_model_dir)
    config = dataclasses.replace(
        config,
        source_fingerprint=choice.cache_key,
        served_read_key=choice.served_key,
        **choice.settings,
    )
    return config, choice


def _at_least_1(text: str, note: str = "") -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more{note}, got {value}")
    return value


def _span_number(text: str) -> int:
    """--span N: span folders are numbered from 1 (0 is what a plain source is called)."""
    return _at_least_1(text, " (0 stands for a plain source)")


def _window(text: str) -> int:
    """--spans K: at least one span."""
    return _at_least_1(text)


def _no_new_span(output_dir: Path, err: Exception, started: float, night: dict) -> int:
    """Nothing new to train: one line, a run summary that says so, exit status 0. The summary
    is written under the run lock, as a run's is: beside a run that holds the folder, this
    night is `busy` and leaves that run's summary alone."""
    from pipeline.local import runner as local_runner
    from pipeline.local.summary import RunSummary

    try:
        with local_runner.exclusive_output_dir(output_dir):
            RunSummary(
                run_id="",
                record_counts={},
                stage_seconds={},
                stage_states={},
                artifacts={},
                total_seconds=round(time.time() - started, 1),
                outcome="no_new_span",
                failed=None,
            ).write(output_dir)
    except local_runner.RunLockedError as locked:
        return _refused(night, str(locked), exit_status.BUSY)
    except local_runner.OutputDirError as bad:
        return _refused(night, str(bad), exit_status.BAD_INPUT)
    print(str(err))
    return exit_status.OK


def cmd_run(args: argparse.Namespace) -> int:
    """The run, then its night's report: kept in the serving folder and, with --notify or
    $CIFAR10_NOTIFY_URL, delivered; neither changes the exit status."""
    from components.night_report import message as nights

    if is_uri(args.output_dir):
        print(f"error: --output-dir {args.output_dir}: `run` writes to a local folder (its "
              "SQLite ML Metadata and run lock); to push to a bucket, compile the pipeline "
              "with --pipeline-root there", file=sys.stderr)  # fmt: skip
        return exit_status.BAD_INPUT
    url = args.notify if args.notify is not None else os.environ.get(nights.NOTIFY_VARIABLE)
    try:
        url = nights.check_url(url) if url else None
    except nights.NotifyUrlError as err:
        print(f"error: {'--notify' if args.notify else nights.NOTIFY_VARIABLE}: {err}",
              file=sys.stderr)  # fmt: skip
        return exit_status.BAD_INPUT
    output_dir = Path(args.output_dir).resolve()
    night: dict = {"summary_before": _written(output_dir), "served_before": _served(output_dir)}
    status = _run(args, output_dir, night)
    _report_night(output_dir, night, status, url)
    return status


def _refused(night: dict, error: str, status: int) -> int:
    print(f"error: {error}", file=sys.stderr)
    night["error"] = error
    return status


def _written(output_dir: Path) -> int | None:
    """When the run summary was last written (ns), None when there is none."""
    from pipeline.local.summary import SUMMARY_FILE

    path = output_dir / SUMMARY_FILE
    return path.stat().st_mtime_ns if path.exists() else None


def _served(output_dir: Path) -> str | None:
    from components.storage.served_versions import newest_complete_version

    return newest_complete_version(str(output_dir / "serving" / MODEL_NAME))


def _report_night(output_dir: Path, night: dict, status: int, url: str | None) -> None:
    """The night's message, from the summary this run wrote (or, for a run refused before
    writing one, its error line), kept in the serving folder and delivered to `url`."""
    from components.night_report import message as nights
    from pipeline.local.summary import SUMMARY_FILE

    path = output_dir / SUMMARY_FILE
    # A run refused because another holds the folder wrote no summary: one found newer is
    # the holder's, and its night is not this one.
    busy = status == exit_status.BUSY
    mine = not busy and _written(output_dir) not in (None, night["summary_before"])
    summary = json.loads(path.read_text()) if mine else {
        "outcome": "busy" if busy else "failed", "failed_step": "before the first step",
        "failed": night.get("error"),
    }  # fmt: skip
    message = nights.message(
        summary, runner="run", exit_status=status, served_before=night["served_before"],
        served_after=_served(output_dir), report=night.get("report"),
    )  # fmt: skip
    try:  # a run refused before it made its folder leaves none behind
        if output_dir.is_dir() and not night.get("disk_full"):
            nights.record(str(output_dir / "serving" / MODEL_NAME), message)
    except OSError as err:
        if not _disk_full(err):  # a full disk has its own error line already
            print(f"warning: the night's record was not kept: {err}", file=sys.stderr)
    if url is None:
        return
    said = nights.deliver(url, message)
    print(f"notification   {said}")
    if mine:
        summary["notification"] = said
        write_atomically(path, json.dumps(summary, indent=1, default=str))


def _run(args: argparse.Namespace, output_dir: Path, night: dict) -> int:
    """The run itself; `night` gets the error line of a run that stopped with one."""
    from components.cifar10_example_gen.sources import SourceError
    from components.cifar10_example_gen.spans import NoNewSpan, SpanError
    from components.serving.load_test import LoadTestFailed
    from components.storage.served_versions import ServedVersionChanged
    from components.trainer.hardware import PrecisionError
    from components.validation_gate.checks import DataValidationError
    from pipeline.local import report_text
    from pipeline.local import runner as local_runner
    from pipeline.settings import data_source

    known = (
        (SourceError, exit_status.BAD_INPUT),
        (SpanError, exit_status.BAD_INPUT),
        (PrecisionError, exit_status.BAD_INPUT),
        (local_runner.RunLockedError, exit_status.BUSY),  # before its base class
        (local_runner.OutputDirError, exit_status.BAD_INPUT),
        (DataValidationError, exit_status.DATA_INVALID),
        (ServedVersionChanged, exit_status.SERVED_CHANGED),
        (LoadTestFailed, exit_status.LOAD_TEST_FAILED),
    )
    checking = time.time()
    try:
        config, choice = _prepared(args, output_dir)
    except NoNewSpan as err:
        return _no_new_span(output_dir, err, checking, night)
    except (ValueError, data_source.DataSourceError) as err:
        return _refused(night, str(err), exit_status.BAD_INPUT)
    named = "" if choice.numbers == [0] else f", spans {choice.numbers}"
    print(
        f"Data: {config.source_uri}{named} ({choice.counts['train']} training and "
        f"{choice.counts['test']} test records, checked in {time.time() - checking:.1f}s)"
        f"\nOutput: {output_dir}",
        file=sys.stderr,
    )
    try:
        with local_runner.exclusive_output_dir(output_dir):
            try:
                facts = local_runner.run(config, output_dir)
            finally:  # also for a failed run: the report says what did run and why it stopped
                report_path = _write_report(output_dir)
    except Exception as err:
        full = next((c for c in _causes(err) if _disk_full(c)), None)
        if full is not None:
            night["disk_full"] = True  # nothing more is written there, the night's record too
            return _refused(
                night,
                f"no space left writing to {output_dir} ({full.strerror}); free some "
                "space or pass another --output-dir; the failed step's files are not used",
                exit_status.BAD_INPUT,
            )
        for cause in _causes(err):
            for error_type, status in known:
                if isinstance(cause, error_type):
                    return _refused(night, str(cause), status)
        night["error"] = f"{type(err).__name__}: {err}"
        print(f"error: {night['error']}\n(see the log file above for details)", file=sys.stderr)
        return exit_status.ERROR
    print(report_text.render(facts))
    if report_path:
        print(f"report         {report_path}")
        night["report"] = str(report_path)
    if facts.blessed is False:
        return exit_status.NOT_BLESSED
    if facts.outcome == "served_changed":
        print(f"error: {facts.push.served_changed}", file=sys.stderr)
        return exit_status.SERVED_CHANGED
    return exit_status.OK


def _write_report(output_dir: Path) -> Path | None:
    """The HTML report of a finished run; a broken report must not hide the outcome. A run
    that could not even write its summary (a full disk) has no report, and its own error
    line says why."""
    from pipeline.local import report
    from pipeline.local.summary import SUMMARY_FILE

    if not (output_dir / SUMMARY_FILE).exists():
        return None
    try:
        return report.build_report(output_dir)
    except Exception as err:
        print(f"warning: could not write the report: {err}", file=sys.stderr)
        return None


def _disk_full(err: BaseException) -> bool:
    import errno

    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def _causes(err: BaseException) -> list[BaseException]:
    """The exception and the ones it was raised from (an executor's error may arrive
    wrapped by the orchestrator)."""
    chain = [err]
    while (chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return chain


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Run locally: data, output folder, training and gate."""
    run = commands.add_parser(
        "run",
        help="run the whole pipeline locally (Beam DirectRunner, SQLite metadata)",
        description="Ingest, validate, train, evaluate and push on this machine. Finished "
        "steps are reused from the metadata cache on a rerun.",
    )
    run.add_argument(
        "--data",
        metavar="PATH_OR_URL",
        help="CIFAR-10 archive (.tar.gz), extracted cifar-10-batches-bin/ or "
        "-py/ folder, image folder, gs:// path or URL. Default: "
        "$CIFAR10_DATA, then the local cache, then the official download",
    )
    run.add_argument(
        "--output-dir",
        default=str(DEFAULT_OUTPUT_DIR),
        help="artifacts, metadata, serving models and run_summary.json (default: %(default)s)",
    )
    run.add_argument(
        "--notify",
        metavar="URL",
        help="POST the night's report (JSON, whatever the outcome) to this webhook, within "
        "10 s; default: $CIFAR10_NOTIFY_URL. Never changes the exit status",
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="rerun every component even if its inputs did not change",
    )
    run.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra Beam pipeline option, e.g. --beam-arg=--direct_num_workers=2",
    )
    spans = run.add_argument_group(
        "spans (--data holding span-1/, span-2/, ...: TFX's {SPAN})",
    )
    spans.add_argument(
        "--span", type=_span_number, metavar="N", help="train on span N (default: the newest span)"
    )
    spans.add_argument(
        "--spans",
        type=_window,
        metavar="K",
        help="train on a rolling window: the newest K spans up to --span (default: 1)",
    )
    spans.add_argument(
        "--force",
        action="store_true",
        help="train even though the served model was already trained on the newest span",
    )
    add_training_args(run)
    add_gate_args(run)
    add_serving_args(run)
    run.set_defaults(func=cmd_run)
