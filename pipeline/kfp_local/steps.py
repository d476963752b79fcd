"""The planned steps run by kfp.local, each container step a process of the project's Python with
the image's ENV; kfp.local patched for that while the run lasts, and each step's outcome kept."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.kfp_local.plan import Image, Plan

# What a step takes from this machine's environment besides the image's ENV: where programs,
# home and temporary files are, the locale, and which GPUs (a pod's device plugin decides
# that on a cluster). Nothing else, so a variable the image lacks is missing here too.
HOST_VARIABLES = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ", "CUDA_VISIBLE_DEVICES")
EXCEPTION_LINE = re.compile(r"[\w.]*(?:Error|Exception|Exit)\b")
MODULE_PATH = re.compile(r"^(?:\w+\.)+(?=\w+:)")


@dataclass
class Step:
    """One step as it ran: status, seconds, its log, and its output artifacts' metadata."""

    name: str
    ok: bool
    seconds: float
    log: Path
    outputs: dict[str, dict] = field(default_factory=dict)


def last_error(log: Path) -> str:
    """The last exception of a step's log on one line, its indented continuation lines
    joined (what a person looks for first), without the module path."""
    lines = log.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if EXCEPTION_LINE.match(line)]
    if not starts:
        return next((line.strip() for line in reversed(lines) if line.strip()), "(no output)")
    message = [lines[starts[-1]]]
    for line in lines[starts[-1] + 1 :]:
        if not line.strip() or not line[0].isspace():
            break
        message.append(line.strip())
    return MODULE_PATH.sub("", " ".join(message))


@dataclass
class HostSteps:
    """Runs each container step as a process of the project's Python, with the image's ENV
    in the directory its WORKDIR maps to; logs to one file per step, progress to `report`.
    TFX's entrypoint takes the executor input as --json_serialized_invocation_args; its
    output file's folder names the task."""

    python: str
    image: Image
    workdir: Path
    log_dir: Path
    names: dict[str, str]  # kfp.local's task folder name -> the task's name
    total: int
    report: Callable[[str], None]
    done: list[Step] = field(default_factory=list)
    # With --keep-uris: artifacts under `local_root` (kfp.local's pipeline root) are given
    # to the step under `remote_root` (the file's s3:// or gs:// root) instead, and the step gets
    # `store_env` (plan.store_environment: what the cluster would set from its secret).
    local_root: str = ""
    remote_root: str = ""
    store_env: dict[str, str] = field(default_factory=dict)

    def _on_store(self, command: list[str]) -> list[str]:
        """The step's executor input with its artifacts' URIs moved to the remote root; its
        output metadata file stays local, where kfp.local reads it."""
        at = command.index("--json_serialized_invocation_args") + 1
        invocation = json.loads(command[at])
        for side in ("inputs", "outputs"):
            for artifacts in invocation.get(side, {}).get("artifacts", {}).values():
                for artifact in artifacts.get("artifacts", []):
                    uri = artifact.get("uri", "")
                    if uri.startswith(self.local_root.rstrip("/") + "/"):
                        artifact["uri"] = (
                            self.remote_root.rstrip("/") + uri[len(self.local_root.rstrip("/")) :]
                        )
        return [*command[:at], json.dumps(invocation), *command[at + 1 :]]

    def run(self, command: list[str], env: dict[str, str]) -> bool:
        invocation = json.loads(command[command.index("--json_serialized_invocation_args") + 1])
        output_file = Path(invocation["outputs"]["outputFile"])
        name = self.names.get(output_file.parent.name, output_file.parent.name)
        if command[0] in ("python", "python3"):
            command = [self.python, *command[1:]]
        if self.remote_root:
            command = self._on_store(command)
        log = self.log_dir / f"{name}.log"
        position = f"[{len(self.done) + 1}/{self.total}] {name}"
        self.report(f"{position}: running (log {log})")
        start = time.monotonic()
        with log.open("w") as out:
            returncode = subprocess.call(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**_host_environment(), **self.image.env, **env, **self.store_env},
            )
        step = Step(name, returncode == 0, time.monotonic() - start, log)
        if step.ok and output_file.exists():
            written = json.loads(output_file.read_text()).get("artifacts", {})
            step.outputs = {
                key: artifact.get("metadata", {})
                for key, artifacts in written.items()
                for artifact in artifacts.get("artifacts", [])[:1]
            }
        self.done.append(step)
        verdict = "SUCCESS" if step.ok else f"FAILED (exit status {returncode})"
        self.report(f"{position}: {verdict} in {step.seconds:.0f} s")
        return step.ok


def _host_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in HOST_VARIABLES if name in os.environ}


@contextlib.contextmanager
def patched_kfp_local(steps: HostSteps) -> Iterator[None]:
    """The two changes to kfp.local this run needs, undone on exit.

    1. Container steps run as host processes (`HostSteps`): kfp.local's SubprocessRunner
       refuses container components (it runs lightweight Python components only), and its
       DockerRunner needs a Docker engine and the built image, which is what this run checks
       before either exists.
    2. An input artifact keeps the type its input declares (TFX's `title: tfx.Examples`):
       kfp.local hands an upstream artifact on as a generic `system.Artifact`, while the
       KFP backend keeps the type in ML Metadata; TFX's entrypoint picks the artifact class
       by that type.
    """
    from kfp.local import executor_input_utils, status, subprocess_task_handler
    from kfp.local.task_handler_interface import ITaskHandler

    class HostStepHandler(ITaskHandler):
        def __init__(self, image, full_command, pipeline_root, runner, env_vars=None) -> None:
            self.command, self.env = list(full_command), dict(env_vars or {})

        def run(self) -> status.Status:
            ok = steps.run(self.command, self.env)
            return status.Status.SUCCESS if ok else status.Status.FAILURE

    construct = executor_input_utils.construct_executor_input

    def with_declared_types(*, component_spec, **kwargs):
        executor_input = construct(component_spec=component_spec, **kwargs)
        for key, artifacts in executor_input.inputs.artifacts.items():
            declared = component_spec.input_definitions.artifacts[key].artifact_type
            for artifact in artifacts.artifacts:
                artifact.type.CopyFrom(declared)
        return executor_input

    handler = subprocess_task_handler.SubprocessTaskHandler
    subprocess_task_handler.SubprocessTaskHandler = HostStepHandler
    executor_input_utils.construct_executor_input = with_declared_types
    try:
        yield
    finally:
        subprocess_task_handler.SubprocessTaskHandler = handler
        executor_input_utils.construct_executor_input = construct


def task_folders(plan: Plan) -> dict[str, str]:
    """kfp.local's folder name of each task -> the task's name. kfp.local cuts five
    characters off a component's name, expecting the `comp-` prefix the kfp compiler
    writes; TFX's names have none (Trainer -> er), so progress uses the names back."""
    from kfp.local import executor_input_utils

    return {
        executor_input_utils.get_local_task_resource_name(name): name
        for name in plan.spec["components"]
    }


def run_plan(plan: Plan, steps: HostSteps, output_dir: Path, kfp_log: Path) -> None:
    """Runs the planned spec with kfp.local (SubprocessRunner, no caching); kfp.local's own
    log lines go to `kfp_log`, the steps' progress to `steps.report`."""
    from kfp import components, local

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(output_dir),
        raise_on_error=False,
    )
    pipeline = components.load_component_from_text(yaml.safe_dump(plan.spec))
    with kfp_log.open("w") as log, contextlib.redirect_stdout(log), patched_kfp_local(steps):
        pipeline()
