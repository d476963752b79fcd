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


def executor(spec: dict[str, Any], task: str) -> dict[str, Any]:
    """The container a task of the root DAG runs ({} if it names none)."""
    component_name = spec["root"]["dag"]["tasks"][task].get("componentRef", {}).get("name", "")
    label = spec.get("components", {}).get(component_name, {}).get("executorLabel", "")
    return spec["deploymentSpec"].get("executors", {}).get(label, {}).get("container", {})


def google_steps(spec: dict[str, Any]) -> dict[str, str]:
    """Tasks that call Google APIs, with the reason."""
    reasons = {}
    for task in spec["root"]["dag"]["tasks"]:
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
