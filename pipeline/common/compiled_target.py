"""Which target a compiled pipeline file was written for, read from its steps alone: a Vertex file
has steps that call Google APIs (the Vertex Trainer's CustomJob, an endpoint deploy, Beam on
Dataflow), a Kubeflow file has none. `submit` and `local-kfp` both refuse a file given with the
other --target through `mismatch`; local-kfp runs in the kfp SDK's environment, so this module
imports nothing (no TFX: the executors are named, not imported)."""

from __future__ import annotations

from typing import Any

VERTEX = "vertex"
KUBEFLOW = "kubeflow"
# Steps that call Google APIs whatever the data: the Vertex Trainer (a CustomJob) and the
# endpoint deploy, TFX's or this project's subclasses (tests/test_kfp_local.py checks the
# names), and Beam steps sent to Dataflow.
GOOGLE_EXECUTOR_PREFIXES = (
    "tfx.extensions.google_cloud_ai_platform.",
    "components.trainer.vertex_trainer.",
    "components.atomic_pusher.vertex_endpoint.",
)
DATAFLOW_ARG = "--runner=DataflowRunner"
# With an exit handler (every compiled file: pipeline/kfp_ir.py) TFX nests the pipeline's
# steps in this sub-DAG and puts the handler's task beside it in the root DAG.
TFX_DAG = "tfx-dag"
NIGHT_REPORT_TASK = "NightReport"


def pipeline_tasks(spec: dict[str, Any]) -> dict[str, Any]:
    """Every step of a compiled file by name: the root DAG's container tasks and those of the
    `tfx-dag` sub-DAG, the exit handler's included (the same dicts, not copies)."""
    found = {}
    for name, task in spec.get("root", {}).get("dag", {}).get("tasks", {}).items():
        if name == TFX_DAG:
            found.update(spec["components"][TFX_DAG]["dag"]["tasks"])
        else:
            found[name] = task
    return found


def exit_task(spec: dict[str, Any]) -> str:
    """The exit handler's task name, '' when the file has none."""
    for name, task in spec.get("root", {}).get("dag", {}).get("tasks", {}).items():
        if task.get("triggerPolicy", {}).get("strategy") == "ALL_UPSTREAM_TASKS_COMPLETED":
            return name
    return ""


def executor(spec: dict[str, Any], task: str) -> dict[str, Any]:
    """The container a step runs ({} if it names none)."""
    component_name = pipeline_tasks(spec)[task].get("componentRef", {}).get("name", "")
    label = spec.get("components", {}).get(component_name, {}).get("executorLabel", "")
    return spec["deploymentSpec"].get("executors", {}).get(label, {}).get("container", {})


def google_steps(spec: dict[str, Any]) -> dict[str, str]:
    """Tasks that call Google APIs, with the reason."""
    reasons = {}
    for task in pipeline_tasks(spec):
        args = executor(spec, task).get("args", [])
        path = (
            args[args.index("--executor_class_path") + 1] if "--executor_class_path" in args else ""
        )
        if path.startswith(GOOGLE_EXECUTOR_PREFIXES):
            reasons[task] = f"calls Vertex AI ({path.rpartition('.')[0]})"
        elif DATAFLOW_ARG in args:
            reasons[task] = "runs its Beam pipeline on Dataflow"
    return reasons


def compiled_for(spec: dict[str, Any]) -> tuple[str, str]:
    """(the target a compiled spec is for, the step that shows it)."""
    google = google_steps(spec)
    if google:
        task, reason = min(google.items())
        return VERTEX, f"{task} {reason}"
    return KUBEFLOW, "no step calls Vertex AI"


def mismatch(path: object, target: str, spec: dict[str, Any]) -> str:
    """One line naming --target when `spec` (a compiled pipeline spec) is not for `target`;
    '' when it is."""
    compiled, shown_by = compiled_for(spec)
    if compiled == target:
        return ""
    return f"{path} was compiled for --target {compiled} ({shown_by}); pass --target {compiled}"
