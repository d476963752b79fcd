"""Keeps libraries' output off the console: TensorFlow's C++ start-up errors ("Unable to
register cuFFT factory"), absl and TFX logging. A user of the CLI reads the project's own
lines; the rest is in a file for when something goes wrong. Imports nothing heavy, so
every command can use it before TensorFlow loads."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# What TensorFlow's C++ (and absl) write to descriptor 2 as it is imported, on every machine,
# about nothing a user of this CLI can act on: the CUDA plugins registered twice, no CUDA
# driver (a CPU machine, or GPUs hidden on purpose), oneDNN on, the CPU's instructions, no
# TensorRT. `TF_CPP_MIN_LOG_LEVEL=2` (components/__init__.py) keeps INFO and WARNING away, yet
# not the plugins' ERROR lines, and 3 would hide every real error too. Such a line is dropped
# from the log, so a command that logged nothing else leaves no log.
STARTUP_NOISE = (
    b"Unable to register cuFFT factory",
    b"Unable to register cuDNN factory",
    b"Unable to register cuBLAS factory",
    b"oneDNN custom operations are on",
    b"Could not find cuda drivers on your machine",
    # TF 2.16: "CUDA_ERROR_NO_DEVICE"; TF 2.21 on a machine with no CUDA device at all:
    # "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
    b"failed call to cuInit: CUDA_ERROR_NO_DEVICE",
    b"failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    b"This TensorFlow binary is optimized to use available CPU instructions",
    b"To enable the following instructions:",  # the line above goes on with this one
    b"TF-TRT Warning: Could not find TensorRT",
    b"All log messages before absl::InitializeLog() is called are written to STDERR",
)
# A longer log (a long run's) keeps them: reading it all back would cost more than they do.
MAX_FILTERED_BYTES = 64 * 1024 * 1024


@contextlib.contextmanager
def _stderr_fd_to(log_fd: int) -> Iterator[None]:
    """File descriptor 2 (where C++ libraries write) goes to the log, while `sys.stderr`
    keeps writing to the console through a copy of the old descriptor. A `sys.stderr`
    that is not descriptor 2 (pytest's capture) is left as it is."""
    sys.stderr.flush()
    saved_fd = os.dup(2)
    saved_stderr = sys.stderr
    console = None
    try:
        writes_fd_2 = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        writes_fd_2 = False
    if writes_fd_2:
        console = open(
            os.dup(saved_fd),
            "w",
            buffering=1,
            encoding=saved_stderr.encoding,
            errors="backslashreplace",
        )
        sys.stderr = console
    os.dup2(log_fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        sys.stderr = saved_stderr
        if console is not None:
            console.close()


class _LogFileHandler(logging.FileHandler):
    """A log file that cannot be written (its disk full) says nothing on the console: the
    command's own error line says what went wrong, and one logging traceback per record
    would bury it."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


@contextlib.contextmanager
def _logging_to(path: Path, level: int) -> Iterator[None]:
    """Python logging from `level` up (TFX, Beam, absl) to `path` instead of the root
    logger's handlers and TensorFlow's own console handler."""
    from absl import logging as absl_logging

    root = logging.getLogger()
    file_handler = _LogFileHandler(path)
    file_handler.setLevel(level)  # live progress updates (below INFO) stay off the file
    file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved_level, saved_handlers = root.level, list(root.handlers)
    for handler in saved_handlers:
        root.removeHandler(handler)
    # TensorFlow gives its logger a console handler of its own when it is imported before the
    # root logger has one; its lines belong in the file like everyone else's.
    tf_logger = logging.getLogger("tensorflow")
    saved_tf_handlers = list(tf_logger.handlers)
    for handler in saved_tf_handlers:
        tf_logger.removeHandler(handler)
    # google-api-core turns off propagation of the "google" logger when it makes its first
    # client, unless that logger is configured (client_logging.setup_logging): given a level
    # here, the client libraries' lines reach this file however many clients were made.
    google = logging.getLogger("google")
    saved_google = google.level, google.propagate
    google.setLevel(level)
    google.propagate = True
    root.addHandler(file_handler)
    root.setLevel(level)
    saved_absl_verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    try:
        yield
    finally:
        absl_logging.set_verbosity(saved_absl_verbosity)
        root.removeHandler(file_handler)
        file_handler.close()
        google.setLevel(saved_google[0])
        google.propagate = saved_google[1]
        root.setLevel(saved_level)
        for handler in saved_handlers:
            root.addHandler(handler)
        for handler in saved_tf_handlers:
            tf_logger.addHandler(handler)


def user_log_dir() -> Path:
    """Where a command that was given no output folder keeps its log: the user's state
    directory (XDG Base Directory: `$XDG_STATE_HOME`, else `~/.local/state`), never the
    working directory."""
    state_home = os.environ.get("XDG_STATE_HOME", "")
    if not Path(state_home).is_absolute():  # the spec: a relative value is to be ignored
        state_home = str(Path.home() / ".local" / "state")
    return Path(state_home) / "cifar10-pipeline" / "logs"


@contextlib.contextmanager
def to_file(path: Path, level: int = logging.INFO) -> Iterator[None]:
    """Library output goes to `path` (appended): Python logging from `level` up and all
    that is written to descriptor 2 but TensorFlow's start-up lines; the project's own
    `sys.stderr` lines stay on the console. A log that stayed empty is removed, so quick
    commands leave nothing.
    Where the log cannot be written, everything stays on the console, as without one."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path, "a")
    except OSError:
        yield
        return
    start = os.fstat(log.fileno()).st_size
    with log, _stderr_fd_to(log.fileno()), _logging_to(path, level):
        yield
    with contextlib.suppress(OSError):  # a log that cannot be tidied is still a log
        _drop_startup_noise(path, start)
        if path.stat().st_size == 0:
            path.unlink()


def _drop_startup_noise(path: Path, start: int) -> None:
    """TensorFlow's start-up lines (`STARTUP_NOISE`) out of what this command appended to
    `path` from byte `start` on; what an earlier command wrote there stays as it was."""
    with open(path, "r+b") as log:
        log.seek(start)
        appended = log.read(MAX_FILTERED_BYTES + 1)
        if len(appended) > MAX_FILTERED_BYTES:
            return
        kept = b"".join(
            line
            for line in appended.splitlines(keepends=True)
            if not any(marker in line for marker in STARTUP_NOISE)
        )
        if kept != appended:
            log.seek(start)
            log.write(kept)
            log.truncate()
