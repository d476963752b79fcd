"""Runs a compiled pipeline file under KFP's own local orchestrator (`kfp.local`), each
container step a process on this machine, before an image is built or a run submitted.

It runs in its own environment (`.venv-kfp`, `make setup-kfp`): a current kfp SDK needs
protobuf >= 6, TFX 1.16 < 5. `cifar10-pipeline local-kfp` starts it as
`python -m pipeline.kfp_local`; every step then runs in the project's environment (`--python`)
with the Dockerfile's ENV, in the Dockerfile's WORKDIR mapped to the checkout. So this module
imports nothing that imports TFX (pyproject.toml's import-linter contracts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeline import exit_status
from pipeline.submission import has_dag

# A cloud URI inside any string of the spec, also inside JSON-encoded constants.
CLOUD_URI = re.compile(r"\b(?:gs|s3)://[^\s\"'\\,;]+")
# Cifar10ExampleGen's input naming the data (components/cifar10_example_gen/spec.py).
DATA_PARAMETER = "source_uri"
# Steps that call Google APIs whatever the data: the Vertex Trainer (a CustomJob) and Pusher
# (an endpoint deploy), and Beam steps sent to Dataflow.
GOOGLE_EXECUTOR_PREFIX = "tfx.extensions.google_cloud_ai_platform."
DATAFLOW_ARG = "--runner=DataflowRunner"
# What a step takes from this machine's environment besides the image's ENV: where programs,
# home and temporary files are, the locale, and which GPUs (a pod's device plugin decides
# that on a cluster). Nothing else, so a variable the image lacks is missing here too.
HOST_VARIABLES = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ", "CUDA_VISIBLE_DEVICES")
EXCEPTION_LINE = re.compile(r"[\w.]*(?:Error|Exception|Exit)\b")
MODULE_PATH = re.compile(r"^(?:\w+\.)+(?=\w+:)")


class LocalRunError(ValueError):
    """The file cannot run here; the message is one line that says why."""


@dataclass(frozen=True)
class Image:
    """What the pipeline image gives every step: its working directory and ENV."""

    workdir: str
    env: dict[str, str]


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    logical = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not (line.strip() or logical):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        keyword, _, rest = (logical + line).strip().partition(" ")
        logical = ""
        yield keyword.upper(), rest.strip()


def read_dockerfile(path: Path) -> Image:
    """WORKDIR and ENV of the default (last) stage, through the stages it is built FROM,
    so the steps get what the image sets, not a copy of it kept here."""
    stages: dict[str, dict] = {}
    current: dict = {"workdir": "/", "env": {}}
    for keyword, rest in _instructions(Path(path).read_text()):
        if keyword == "FROM":
            words = rest.split()
            base = stages.get(words[0], {"workdir": "/", "env": {}})
            current = {"workdir": base["workdir"], "env": dict(base["env"])}
            if len(words) == 3 and words[1].upper() == "AS":
                stages[words[2]] = current
        elif keyword == "WORKDIR":
            current["workdir"] = str(Path(current["workdir"], rest))
        elif keyword == "ENV":
            words = shlex.split(rest)
            if words and "=" not in words[0]:  # the old form: ENV KEY VALUE...
                current["env"][words[0]] = " ".join(words[1:])
            else:
                current["env"].update(word.partition("=")[::2] for word in words)
    return Image(current["workdir"], dict(current["env"]))


def _map_strings(value: Any, replace: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, dict):
        return {key: _map_strings(item, replace) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_strings(item, replace) for item in value]
    return value


def _prefix_pattern(prefix: str) -> re.Pattern:
    """`prefix` as a whole path: gs://b/root matches gs://b/root/x, not gs://b/root2."""
    return re.compile(r"(?<![\w./-])" + re.escape(prefix.rstrip("/")) + r"(?=/|$|[^\w.-])")


def _executor(spec: dict, task: str) -> dict:
    component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    return spec["deploymentSpec"]["executors"][component["executorLabel"]].get("container", {})


def _google_steps(spec: dict) -> dict[str, str]:
    """Tasks that call Google APIs, with the reason."""
    reasons = {}
    for task in spec["root"]["dag"]["tasks"]:
        args = _executor(spec, task).get("args", [])
        executor = (
            args[args.index("--executor_class_path") + 1]
            if ("--executor_class_path" in args)
            else ""
        )
        if executor.startswith(GOOGLE_EXECUTOR_PREFIX):
            reasons[task] = f"calls Vertex AI ({executor.rpartition('.')[0]})"
        elif DATAFLOW_ARG in args:
            reasons[task] = "runs its Beam pipeline on Dataflow"
    return reasons


def _downstream(spec: dict, roots: set[str]) -> set[str]:
    """`roots` and every task that depends on one of them."""
    tasks = spec["root"]["dag"]["tasks"]
    found = set(roots)
    while True:
        more = {
            name
            for name, task in tasks.items()
            if name not in found and found & set(task.get("dependentTasks", []))
        }
        if not more:
            return found
        found |= more


@dataclass
class Plan:
    """The spec as it will run here, and the steps left out, each with the reason."""

    spec: dict[str, Any]
    steps: list[str]
    not_run: dict[str, str] = field(default_factory=dict)


def _check_form(path: Path, spec: Any) -> None:
    if not has_dag(spec):
        raise LocalRunError(
            f"{path}: not a compiled pipeline (no root DAG); write one with "
            "`cifar10-pipeline compile --output FILE.yaml`"
        )
    for name, task in spec["root"]["dag"]["tasks"].items():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            if "constantValue" in parameter.get("runtimeValue", {}):
                raise LocalRunError(
                    f"{path}: pipeline spec 2.0 ({name} has runtimeValue.constantValue), which "
                    "KFP's driver and kfp.local refuse; compile it again with this version"
                )


def _check_target(path: Path, target: str, google: dict[str, str]) -> None:
    if target == "kubeflow" and google:
        task, reason = next(iter(sorted(google.items())))
        raise LocalRunError(
            f"{path} was compiled for --target vertex ({task} {reason}); pass --target vertex "
            "to run the steps that need no Google API"
        )
    if target == "vertex" and not google:
        raise LocalRunError(
            f"{path} was compiled for --target kubeflow (no step calls Vertex AI); pass "
            "--target kubeflow"
        )


def make_plan(
    path: Path, target: str, output_dir: Path, data: Path | None, project_dir: Path, image: Image
) -> Plan:
    """Checks the file, leaves out the steps that need Google APIs (and those after them),
    and maps the cloud URIs and the image's paths to local ones. Raises LocalRunError."""
    try:
        spec = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise LocalRunError(f"{path}: not a readable pipeline YAML ({reason})") from err
    _check_form(path, spec)
    google = _google_steps(spec)
    _check_target(path, target, google)
    tasks = spec["root"]["dag"]["tasks"]
    left_out = _downstream(spec, set(google))
    not_run = {name: google[name] for name in sorted(google)}
    not_run.update(
        (name, "needs a step that cannot run here") for name in sorted(left_out - set(google))
    )
    for name in left_out:
        del tasks[name]

    mapping = {spec.get("defaultPipelineRoot", ""): str(output_dir)}
    for task in tasks.values():
        parameter = task.get("inputs", {}).get("parameters", {}).get(DATA_PARAMETER, {})
        uri = parameter.get("runtimeValue", {}).get("constant")
        if uri and data is not None:
            mapping[uri] = str(data)
    patterns = [(_prefix_pattern(old), new) for old, new in mapping.items() if old]
    patterns.append((_prefix_pattern(image.workdir), str(project_dir)))

    def replace(text: str) -> str:
        for pattern, new in patterns:
            text = pattern.sub(lambda _, new=new: new, text)
        return text

    spec = _map_strings(spec, replace)
    for name in tasks:
        text = json.dumps([spec["root"]["dag"]["tasks"][name], _executor(spec, name)])
        unmapped = CLOUD_URI.search(text)
        if unmapped:
            raise LocalRunError(
                f"{path}: {name} reads {unmapped.group(0)}, which this run cannot map"
                f"{' (no --data given)' if data is None else ''}: it maps the pipeline root "
                "to --output-dir and the data to --data"
            )
    return Plan(spec=spec, steps=sorted(spec["root"]["dag"]["tasks"]), not_run=not_run)


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

    def run(self, command: list[str], env: dict[str, str]) -> bool:
        invocation = json.loads(command[command.index("--json_serialized_invocation_args") + 1])
        output_file = Path(invocation["outputs"]["outputFile"])
        name = self.names.get(output_file.parent.name, output_file.parent.name)
        if command[0] in ("python", "python3"):
            command = [self.python, *command[1:]]
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
                env={**_host_environment(), **self.image.env, **env},
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


def summary(plan: Plan, done: list[Step], kfp_version: str) -> str:
    """What ran, how long each step took, and what came out (blessing, pushed version)."""
    lines = [f"kfp.local (kfp {kfp_version}, SubprocessRunner, each step a host process)"]
    for step in done:
        lines.append(
            f"  {step.name:<22} {'SUCCESS' if step.ok else 'FAILED':<8} {step.seconds:4.0f} s"
        )
    ran = {step.name for step in done}
    stopped = {name: "an earlier step failed" for name in plan.steps if name not in ran}
    for name, reason in {**stopped, **plan.not_run}.items():
        lines.append(f"  {name:<22} not run: {reason}")
    outputs = {key: meta for step in done for key, meta in step.outputs.items()}
    if "blessing" in outputs:
        lines.append(f"blessed        {'yes' if outputs['blessing'].get('blessed') else 'no'}")
    if outputs.get("pushed_model", {}).get("pushed"):
        lines.append(f"pushed         {outputs['pushed_model'].get('pushed_destination')}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kfp_local", description=__doc__)
    parser.add_argument("pipeline_file", type=Path)
    parser.add_argument("--target", choices=["kubeflow", "vertex"], default="kubeflow")
    parser.add_argument("--data", type=Path, help="local copy of the data the file names")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--python", required=True, help="the project's Python for the steps")
    parser.add_argument("--dockerfile", type=Path, required=True)
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from kfp import __version__ as kfp_version

    args = _parser().parse_args(argv)
    output_dir = args.output_dir.resolve()
    try:
        image = read_dockerfile(args.dockerfile)
        plan = make_plan(
            args.pipeline_file,
            args.target,
            output_dir,
            args.data.resolve() if args.data else None,
            args.dockerfile.resolve().parent,
            image,
        )
    except (LocalRunError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    log_dir = output_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    steps = HostSteps(
        python=args.python,
        image=image,
        workdir=args.dockerfile.resolve().parent,
        log_dir=log_dir,
        names=task_folders(plan),
        total=len(plan.steps),
        report=_progress,
    )
    for name, reason in plan.not_run.items():
        _progress(f"not run here: {name} ({reason})")
    start = time.monotonic()
    run_plan(plan, steps, output_dir, log_dir / "kfp.log")
    print(summary(plan, steps.done, kfp_version))
    print(f"took           {time.monotonic() - start:.0f} s; logs in {log_dir}")
    failed = [step for step in steps.done if not step.ok]
    if failed:
        print(
            f"error: step {failed[0].name} failed: {last_error(failed[0].log)} "
            f"(log {failed[0].log})",
            file=sys.stderr,
        )
        return exit_status.ERROR
    if len(steps.done) < len(plan.steps):
        print(f"error: kfp.local stopped early; see {log_dir / 'kfp.log'}", file=sys.stderr)
        return exit_status.ERROR
    blessing = next((s.outputs["blessing"] for s in steps.done if "blessing" in s.outputs), {})
    if blessing and not blessing.get("blessed"):
        return exit_status.NOT_BLESSED  # as `run`: the gate said no, nothing was pushed
    return exit_status.OK


if __name__ == "__main__":
    sys.exit(main())
