"""`cifar10-pipeline run --workers N`: the Trainer step as N worker processes on loopback,
each with its own TF_CONFIG, the way a Vertex AI CustomJob or a Kubeflow TFJob runs it.

Every worker is `python -m tfx.scripts.run_executor` with TFX's own GenericExecutor and this
execution's inputs, outputs and properties: the command TFX's Vertex trainer puts into each
worker pool, so each runs the same `run_fn` as on a cluster. This executor only launches and
watches them. When one fails (killed, out of memory), the others would wait in their next
collective for ever, so it stops them all and starts the group again, as Vertex AI or the
Training Operator restarts a job; training resumes from the chief's last epoch checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from absl import logging
from tfx import types
from tfx.components.trainer.component import Trainer
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs

from components.trainer import nothing_new
from components.trainer.config import LOCAL_WORKERS_KEY

# The executor each worker runs: TFX's, exactly as on Vertex AI.
WORKER_EXECUTOR = "tfx.components.trainer.executor.GenericExecutor"
# How often the whole group is started again after a worker failed.
MAX_RESTARTS = 2
POLL_SECONDS = 0.5
STOP_GRACE_SECONDS = 10.0


class WorkerGroupError(RuntimeError):
    """The workers kept failing; the message names the worker, its status and its log."""


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports nobody listens on (held open until all are found)."""
    with contextlib.ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("localhost", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]


def tf_config(ports: list[int], index: int) -> str:
    """TF_CONFIG of worker `index` in a loopback cluster (worker 0 is the chief)."""
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def _die_with_parent() -> None:
    """Runs in each worker before exec: the kernel kills it when the launcher dies, so a
    killed `run` never leaves workers behind (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM, then SIGKILL after a grace period; every process is reaped."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _watch(processes: list[subprocess.Popen]) -> tuple[int, int] | None:
    """Waits until all exit 0 (None) or one fails: (its index, its exit status), after the
    others were stopped."""
    try:
        while True:
            codes = [process.poll() for process in processes]
            failed = [(i, code) for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                return failed[0]
            if all(code == 0 for code in codes):
                return None
            time.sleep(POLL_SECONDS)
    finally:
        _stop(processes)


def run_group(command: list[str], count: int, log_dir: Path, restarts: int = MAX_RESTARTS):
    """Runs `count` copies of `command` as one multi-worker job (worker i's output appended
    to log_dir/worker-i.log), restarting the whole group up to `restarts` times."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(restarts + 1):
        ports = free_ports(count)
        processes = []
        for index in range(count):
            log = log_dir / f"worker-{index}.log"
            with open(log, "a") as handle:
                handle.write(f"--- attempt {attempt + 1}, TF_CONFIG {tf_config(ports, index)}\n")
                handle.flush()
                processes.append(
                    subprocess.Popen(
                        command,
                        env={**os.environ, "TF_CONFIG": tf_config(ports, index)},
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                        preexec_fn=_die_with_parent,
                    )
                )
        logging.info("Started %d workers: pids %s", count, [p.pid for p in processes])
        failed = _watch(processes)
        if failed is None:
            return
        index, code = failed
        message = f"worker {index} exited with status {code} (log {log_dir}/worker-{index}.log)"
        if attempt == restarts:
            raise WorkerGroupError(f"{message}; gave up after {restarts} restart(s)")
        logging.warning(
            "%s; stopped the others, restarting all %d from the last checkpoint", message, count
        )


class Executor(nothing_new.GenericExecutor):
    """TFX's Trainer executor, run by N worker processes when custom_config asks for it."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        custom_config = json.loads(
            exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null"
        )
        workers = int((custom_config or {}).get(LOCAL_WORKERS_KEY, 1))
        if workers <= 1 or nothing_new.nothing_new(input_dict) is not None:
            return super().Do(input_dict, output_dict, exec_properties)
        command = [
            sys.executable,
            "-m",
            "tfx.scripts.run_executor",
            "--executor_class_path",
            WORKER_EXECUTOR,
            "--inputs",
            artifact_utils.jsonify_artifact_dict(input_dict),
            "--outputs",
            artifact_utils.jsonify_artifact_dict(output_dict),
            "--exec-properties",
            json.dumps(exec_properties, sort_keys=True),
        ]
        model_run = artifact_utils.get_single_uri(
            output_dict[standard_component_specs.MODEL_RUN_KEY]
        )
        run_group(command, workers, Path(model_run) / "workers")


class MultiWorkerTrainer(Trainer):
    """TFX's Trainer whose step runs as `custom_config[LOCAL_WORKERS_KEY]` local workers."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
