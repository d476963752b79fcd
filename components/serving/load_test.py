"""The load test of a staged version (issue 62 item 3): before the Pusher commits a version,
a fresh Python process (`python -m components.serving.load_test VERSION_DIR`) loads it as TF
Serving loads it, from its files alone, with nothing the Pusher's process already holds (a
loaded graph, restored variables) standing in; it replays every warmup record
(components/serving/warmup.py) through its signature and compares the answers with the ones
the Trainer kept. A version that fails is not pushed: LoadTestFailed, the staging folder
removed, the served version untouched (outcome `load_test_failed`, exit status 9). A version
without warmup records is not pushed either (fail closed).

What the fresh process checks:
1. `variables/` complete: the index and every data shard it names are there
   (tensorflow/serving#1086: a server loaded a version whose variables were not written yet),
   then `tf.saved_model.load` with the `serve` tag restores every variable (a truncated shard
   fails here);
2. each record's PredictRequest names a signature of the model and exactly its input names;
3. every answer is finite (NaN or infinity fails), every record's answer has the kept top
   class (a class whose kept probability ties the top within TOLERANCE counts as the same)
   and every probability within TOLERANCE of the kept one.

It prints one JSON line ({"passed", "reason", "records", "images", "max_difference",
"seconds"}); exit status 0 when passed, 1 when not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import components
from components.contract import PROBABILITIES_KEY
from components.serving import warmup
from components.storage import paths

# Rounding between the Trainer's call and the replay (another process, maybe another CPU's
# kernels) moves a probability by about 1e-6; a changed weight moves it by far more.
TOLERANCE = 1e-3
_SHARD = re.compile(r"^variables\.data-(\d{5})-of-(\d{5})$")


class LoadTestFailed(RuntimeError):
    """The staged version failed its load test: nothing was pushed, the served one stays."""


def check_variables(version_dir: str) -> None:
    """ValueError naming what is missing from `variables/`."""
    import tensorflow as tf

    folder = os.path.join(version_dir, "variables")
    names = tf.io.gfile.listdir(folder) if tf.io.gfile.isdir(folder) else []
    if "variables.index" not in names:
        raise ValueError("variables/variables.index is missing")
    shards = [m for m in map(_SHARD.match, names) if m]
    if not shards:
        raise ValueError("variables/ holds no variables.data-* shard")
    count = int(shards[0].group(2))
    missing = sorted(set(range(count)) - {int(m.group(1)) for m in shards})
    if missing:
        raise ValueError(f"variables/ lacks data shard(s) {missing} of {count}")


def _requests(version_dir: str) -> list:
    """The PredictRequests of the warmup file, at most MAX_WARMUP_RECORDS of them."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = os.path.join(version_dir, warmup.WARMUP_FILE)
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    if not records or len(records) > warmup.MAX_WARMUP_RECORDS:
        raise ValueError(f"{len(records)} warmup records (1 to {warmup.MAX_WARMUP_RECORDS})")
    return [prediction_log_pb2.PredictionLog.FromString(r).predict_log.request for r in records]


def _replay(loaded, requests: list) -> np.ndarray:
    """Every request through its signature, one call each, as TF Serving's warmup runs them."""
    import tensorflow as tf

    answers = []
    for number, request in enumerate(requests):
        name = request.model_spec.signature_name or "serving_default"
        if name not in loaded.signatures:
            raise ValueError(f"record {number}: the model has no signature {name!r}")
        signature = loaded.signatures[name]
        expected = set(signature.structured_input_signature[1])
        if set(request.inputs) != expected:
            raise ValueError(
                f"record {number}: inputs {sorted(request.inputs)}, "
                f"the signature's {sorted(expected)}"
            )
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        answers.append(signature(**inputs)[PROBABILITIES_KEY].numpy())
    return np.concatenate(answers)


def compare(found: np.ndarray, kept: np.ndarray, tolerance: float = TOLERANCE) -> float:
    """The largest difference between the answers; ValueError when they do not agree."""
    if found.shape != kept.shape:
        raise ValueError(f"answers of shape {found.shape}, {kept.shape} kept")
    for name, answers in (("replayed", found), ("kept", kept)):
        bad = np.flatnonzero(~np.isfinite(answers).all(axis=1))
        if bad.size:
            raise ValueError(f"{bad.size} {name} answers are not finite (record {int(bad[0])})")
    difference = float(np.abs(found - kept).max()) if found.size else 0.0
    top = found.argmax(axis=1)
    rows = np.arange(len(kept))
    changed = np.flatnonzero(kept[rows, top] < kept.max(axis=1) - tolerance)
    if changed.size:
        first = int(changed[0])
        raise ValueError(
            f"{changed.size} of {len(kept)} records change their top class (record {first}: "
            f"class {int(top[first])}, kept {int(kept[first].argmax())})"
        )
    if difference > tolerance:
        raise ValueError(f"a probability differs by {difference:.3g} (tolerance {tolerance:g})")
    return difference


def replay_here(version_dir: str) -> dict:
    """The fresh process's test, in this process: its result (the module's docstring); never
    raises for a failed test."""
    started = time.time()
    result = {"passed": False, "reason": "", "records": 0, "images": 0, "max_difference": None}
    try:
        import tensorflow as tf

        check_variables(version_dir)
        requests = _requests(version_dir)
        result["records"] = len(requests)
        loaded = tf.saved_model.load(version_dir, tags=["serve"])
        found = _replay(loaded, requests)
        result["images"] = len(found)
        result["max_difference"] = compare(found, warmup.read_answers(version_dir))
        result["passed"] = True
    except Exception as err:  # any failure to load or answer is the test's finding
        result["reason"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
    result["seconds"] = round(time.time() - started, 2)
    return result


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
    if not paths.exists(os.path.join(staged, warmup.WARMUP_FILE)):
        raise LoadTestFailed(
            f"the staged version cannot be load-tested: {warmup.WARMUP_FILE} is missing "
            "(no warmup records; nothing pushed, the served version stays)"
        )
    if not paths.is_remote(staged):
        return _run_child(staged, timeout)
    local = tempfile.mkdtemp(prefix="load-test-")
    try:
        from tfx.utils import io_utils

        io_utils.copy_dir(staged, local)
        return _run_child(local, timeout)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _run_child(staged: str, timeout: float) -> str:
    started = time.time()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "components.serving.load_test", staged],
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


def main(argv: list[str]) -> int:
    result = replay_here(argv[1])
    print(json.dumps(result), flush=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    # Without TensorFlow's teardown at exit (most of a second on a busy host): the result
    # is printed, nothing else is written.
    os._exit(main(sys.argv))
