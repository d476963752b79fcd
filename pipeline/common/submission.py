"""What submitting a compiled pipeline file means on either target (Vertex AI, Kubeflow
Pipelines): the error it raises, how a run is named, which images it runs and what makes a
file a compiled pipeline. Imports no TFX, so `submit` starts fast."""

from __future__ import annotations

import re
import time
from typing import Any


class SubmitError(RuntimeError):
    """Submission failed; the message is one line that says why."""


def pipeline_name(spec: dict[str, Any]) -> str:
    """The compiled pipeline's name, cleaned to what run and job names accept."""
    return re.sub(r"[^a-z0-9-]", "-", spec.get("pipelineInfo", {}).get("name", "cifar10").lower())


def dated_name(name: str) -> str:
    """A run or job name that differs from the previous submission's."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def container_images(spec: dict[str, Any]) -> tuple[str, ...]:
    """The images the compiled pipeline's steps run, sorted."""
    executors = spec["deploymentSpec"].get("executors", {}).values()
    return tuple(sorted({e.get("container", {}).get("image", "") for e in executors} - {""}))


def has_dag(spec: Any) -> bool:
    """Whether a parsed file is a compiled pipeline: a root DAG with tasks, and executors."""
    return (
        isinstance(spec, dict)
        and bool(spec.get("root", {}).get("dag", {}).get("tasks"))
        and "deploymentSpec" in spec
    )


def listed_parameters(parameters: dict[str, Any]) -> str:
    """`span=3, force=1` for a submission's description; '(defaults)' when none is set."""
    return ", ".join(f"{key}={value}" for key, value in parameters.items()) or "(defaults)"


_PARAMETER_TYPES = {"NUMBER_INTEGER": int, "NUMBER_DOUBLE": float, "STRING": str}
_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string"}


def run_parameters(spec: dict[str, Any], given: list[str]) -> dict[str, Any]:
    """`--parameter KEY=VALUE` values checked against the compiled file's runtime parameters
    (the span choice: span, span_window, force) and converted to their types. Raises
    SubmitError naming the parameter."""
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    values = {}
    for item in given:
        key, sep, text = item.partition("=")
        if not sep or key not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise SubmitError(f"--parameter '{item}': not KEY=VALUE of a parameter ({known})")
        kind = _PARAMETER_TYPES.get(declared[key].get("parameterType", "STRING"), str)
        try:
            values[key] = kind(text)
        except ValueError as err:
            raise SubmitError(f"--parameter {key}: '{text}' is not {_TYPE_WORDS[kind]}") from err
    return values
