"""The Pusher's load test of its staged copy, before the commit (components/load_test.py has
what it checks): in a fresh Python process, so the version is loaded as a server loads it,
from its files alone, with nothing this process already holds (a loaded graph, restored
variables) standing in. A version that fails is not pushed: LoadTestFailed, the staging
folder removed, the served version untouched (outcome `load_test_failed`, exit status 9).

A version without warmup records (a model exported before them) is not pushed either: a
version is visible only once it has been loaded and answered as TF Serving will (fail closed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from tfx.dsl.io import fileio
from tfx.utils import io_utils

import components
from components import paths, warmup
from components.load_test import LoadTestFailed

# A fresh process imports TensorFlow (2-3 s) and loads the model (about 1 s); a process that
# takes this long is stuck, and the version is not pushed.
TIMEOUT_SECONDS = 300


def _child_env() -> dict[str, str]:
    """This process's environment with this code first on the path (the child runs the
    same `components`), and no accelerator: a server's load is judged on CPU."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(components.__file__)))
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": root + (os.pathsep + path if path else ""),
        "CUDA_VISIBLE_DEVICES": "",
    }


def load_test(staged: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """Runs the test on the staged folder: one line saying how it went (records, largest
    difference, seconds end to end) when it passed; LoadTestFailed when not, or when the
    folder has no warmup records to replay.
    A staged folder on an object store is read back into a local folder first, every file
    as the store holds it: the fresh process then needs no store of its own (tensorflow-io's
    s3:// aborts a process at exit, tensorflow/io#2039)."""
    if not fileio.exists(os.path.join(staged, warmup.WARMUP_FILE)):
        raise LoadTestFailed(
            f"the staged version cannot be load-tested: {warmup.WARMUP_FILE} is missing "
            "(no warmup records; nothing pushed, the served version stays)"
        )
    if not paths.is_remote(staged):
        return _run_child(staged, timeout)
    local = tempfile.mkdtemp(prefix="load-test-")
    try:
        io_utils.copy_dir(staged, local)
        return _run_child(local, timeout)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _run_child(staged: str, timeout: float) -> str:
    started = time.time()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "components.load_test", staged],
            capture_output=True,
            text=True,
            env=_child_env(),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise LoadTestFailed(f"load test: no answer within {timeout:g} s; nothing pushed") from None
    seconds = time.time() - started
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        result = {"passed": False, "reason": f"the process ended ({done.returncode}): {tail}"}
    if not result.get("passed") or done.returncode != 0:
        raise LoadTestFailed(
            f"the staged version failed its load test ({result.get('reason')}); "
            "nothing pushed, the served version stays"
        )
    return (
        f"passed: {result['records']} warmup records ({result['images']} images) replayed, "
        f"largest difference "
        f"{result['max_difference']:.2g}, in {seconds:.1f} s (a fresh process, end to end)"
    )
