"""Runs the pipeline on this machine: LocalDagRunner, Beam DirectRunner, SQLite metadata."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from components.contract import RUN_LOGS_KEPT
from components.runtime.progress import PROGRESS_LOGGER
from pipeline.common import library_log
from pipeline.local.summary import RunSummary
from pipeline.settings.config import PipelineConfig, TrainingConfig

LOCK_FILE = ".run.lock"


class OutputDirError(RuntimeError):
    """The output directory cannot be used; the message says why."""


class RunLockedError(OutputDirError):
    """Another run holds the output directory."""


@contextlib.contextmanager
def exclusive_output_dir(output_dir: Path) -> Iterator[None]:
    """An advisory lock so two runs never share one metadata store; released on exit,
    also when the process is killed."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        handle = open(output_dir / LOCK_FILE, "a+")
    except OSError as err:
        raise OutputDirError(
            f"cannot use output directory {output_dir}: {err.strerror or err}"
        ) from err
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunLockedError(
                f"{output_dir}: another run ({holder}) is using this output directory; "
                "wait for it or pass a different --output-dir"
            ) from err
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def local_config(
    output_dir: Path,
    source_uri: str,
    source_fingerprint: str,
    training: TrainingConfig,
    **overrides,
) -> PipelineConfig:
    output_dir = output_dir.resolve()
    return PipelineConfig(
        pipeline_name=overrides.pop("pipeline_name", "cifar10"),
        pipeline_root=str(output_dir / "artifacts"),
        metadata_path=str(output_dir / "metadata.sqlite"),
        serving_dir=str(output_dir / "serving"),
        source_uri=source_uri,
        source_fingerprint=source_fingerprint,
        training=training,
        # Only the user's Beam arguments: Beam's defaults already are the in-memory
        # DirectRunner with one worker, and any argument makes every Beam component build an
        # sdist of TFX for remote workers first (TFX's dependency_utils; 1.3-2.3 s each).
        beam_args=tuple(overrides.pop("beam_args", ())),
        **overrides,
    )


class _ProgressPrinter(logging.Handler):
    """Turns LocalDagRunner's 'Component X is running/finished' log lines into one
    short line per component, with its duration, and shows the components' own progress
    (`components.runtime.progress`): lasting lines always, live updates on a terminal only, on
    one line that rewrites itself."""

    def __init__(self, stream=None) -> None:
        super().__init__(logging.DEBUG)
        self.stream = stream or sys.stderr
        self.started: dict[str, float] = {}
        self._live_line = False  # a live update is on screen, without a newline

    def _print(self, line: str, live: bool = False) -> None:
        if self._live_line:
            self.stream.write("\r\033[K")  # clear the live line before writing over it
        self.stream.write(line if live else line + "\n")
        self.stream.flush()
        self._live_line = live

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        stamp = f"[{time.strftime('%H:%M:%S')}]"
        if record.name == PROGRESS_LOGGER:
            if record.levelno >= logging.INFO:
                self._print(f"{stamp} {message}")
            elif self.stream.isatty():
                self._print(f"{stamp} {message}", live=True)
            return
        if (
            record.levelno < logging.INFO
            or not message.startswith("Component ")
            or not message.endswith(("running.", "finished."))
        ):
            return
        node = message.split()[1]
        if message.endswith("running."):
            self.started[node] = time.time()
            self._print(f"{stamp} {node} started")
        else:
            seconds = time.time() - self.started.get(node, time.time())
            self._print(f"{stamp} {node} finished in {seconds:.1f}s")


@contextlib.contextmanager
def _logs_to_file(path: Path) -> Iterator[None]:
    """Full TFX/Beam logs go to a file; the console gets one line per component and the
    components' progress lines."""
    progress_logger = logging.getLogger(PROGRESS_LOGGER)
    saved_progress_level = progress_logger.level
    with library_log.to_file(path):
        progress = _ProgressPrinter()  # after to_file: sys.stderr is the console's now
        logging.getLogger().addHandler(progress)
        progress_logger.setLevel(logging.DEBUG if sys.stderr.isatty() else logging.INFO)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(progress)
            progress_logger.setLevel(saved_progress_level)


def outcome(facts: RunSummary, failure: BaseException | None) -> str:
    """How a run ended, for schedulers and people: the run summary's `outcome`."""
    from components.serving.load_test import LoadTestFailed
    from components.storage.served_versions import ServedVersionChanged
    from components.validation_gate import checks

    causes = [failure]
    while causes[-1] is not None and len(causes) < 20:
        causes.append(causes[-1].__cause__ or causes[-1].__context__)
    named = (
        (checks.DataDriftError, "drift"),
        (checks.LabelsError, "labels"),
        (checks.DuplicatesError, "duplicates"),
        (checks.DataValidationError, "data_invalid"),
        (ServedVersionChanged, "served_changed"),
        (LoadTestFailed, "load_test_failed"),
    )
    for error, name in named:
        if any(isinstance(c, error) for c in causes):
            return name
    if failure is not None:
        return "failed"
    if facts.outcome == "no_new_span":  # nothing trained, evaluated or pushed: not a failure
        return "no_new_span"
    if facts.blessed is False:
        return "not_blessed"
    if facts.push and facts.push.served_changed:
        return "served_changed"
    return "pushed" if facts.push and facts.push.pushed else "failed"


def failed_step(facts: RunSummary, failure: BaseException | None) -> str | None:
    """The step a failed run stopped in: the first whose execution failed, else the last
    that started (None when the run did not fail)."""
    if failure is None:
        return None
    failed = [node for node, state in facts.stage_states.items() if state == "failed"]
    started = list(facts.stage_seconds)
    return (failed or started or ["before the first step"])[0 if failed else -1]


def served_read_key(config: PipelineConfig) -> str:
    """The ServedState step's cache key for this run: what the serving folder holds now
    (components/storage/served_versions.py), so a rerun reads it again exactly when it changed."""
    from components.storage.served_versions import read_served_state

    return read_served_state(config.serving_model_dir).read_key()


def prune_logs(folder: Path, keep: int = RUN_LOGS_KEPT) -> list[Path]:
    """Removes the oldest run logs so that, with the one a run is about to write, `keep`
    remain; returns those removed."""
    logs = sorted(folder.glob("run-*.log"))  # named by the second each run started
    old = logs[: max(len(logs) - keep + 1, 0)]
    for path in old:
        path.unlink(missing_ok=True)
    return old


def run(config: PipelineConfig, output_dir: Path) -> RunSummary:
    """Runs the pipeline and returns (and writes) the run summary."""
    started = time.time()
    if not config.served_read_key:
        config = dataclasses.replace(config, served_read_key=served_read_key(config))
    log_path = output_dir / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S')}.log"
    prune_logs(log_path.parent)
    print(f"Full logs: {log_path}", file=sys.stderr)
    failure: BaseException | None = None
    with _logs_to_file(log_path):
        # Imported here: TensorFlow's start-up errors belong in the log too. Not through
        # `tfx.v1`, which imports google-cloud-aiplatform (seconds) for its extensions.
        from tfx.orchestration.local.local_dag_runner import LocalDagRunner

        from components.trainer.strategy import configure_cpu_replicas
        from pipeline.local import summary
        from pipeline.topology import create_pipeline

        try:
            # Every step runs in this process, and any eager TensorFlow in a step before the
            # Trainer (the gate reads records) fixes the process's devices: the CPU is split
            # into the Trainer's replicas before the first step, never after.
            configure_cpu_replicas(config.training.cpu_replicas)
            LocalDagRunner().run(create_pipeline(config))
        except BaseException as err:  # summarise what did run, then re-raise
            failure = err
        try:
            recorded = summary.collect(config.metadata_path)
        except RuntimeError:
            if failure is None:
                raise
            raise failure from None  # the run's own error, not "the store holds no run"
        facts = dataclasses.replace(
            recorded,
            total_seconds=round(time.time() - started, 1),
            log_file=str(log_path),
            failed=None if failure is None else f"{type(failure).__name__}: {failure}",
            source=config.source_uri,
            accuracy_gate=config.accuracy_gate,
        )
        facts = dataclasses.replace(
            facts, outcome=outcome(facts, failure), failed_step=failed_step(facts, failure)
        )
        facts.write(output_dir)
    if failure is not None:
        raise failure
    return facts
