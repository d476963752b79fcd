"""A compiled run's night: its outcome and message from the run's final status (KFP's
PipelineTaskFinalStatus, JSON) and the facts its steps kept (components/night_report/facts.py),
the same fields `run` reports (components/night_report/message.py)."""

from __future__ import annotations

import json
from typing import Any

from components.night_report.message import message
from components.storage import night_facts

# What `cifar10-pipeline run` exits with for each outcome (pipeline/common/exit_status.py;
# tests/test_night_report.py keeps the two in step).
EXIT_STATUS = {
    "pushed": 0, "no_new_span": 0, "failed": 1, "data_invalid": 3, "drift": 3, "labels": 3,
    "duplicates": 3, "not_blessed": 4, "served_changed": 6, "load_test_failed": 9,
}  # fmt: skip
# A final status that is a success: Vertex's and kfp.local's word, and the open-source KFP
# backend's (2.14 and later: the exit-handler group's ML Metadata state).
SUCCEEDED_STATES = ("SUCCEEDED", "COMPLETE", "CACHED")
# How far a failed night got: the facts each step keeps as it finishes
# (components/storage/night_facts.py), in order, each with the steps that may have failed when it is
# the first after the last kept. KFP's final status names no step of the nested TFX group
# (the open-source backend's carries no error at all).
PROGRESS = (
    (night_facts.SERVED, "ServedState"),
    (night_facts.EXAMPLES, "Cifar10ExampleGen"),
    (night_facts.GATE, "StatisticsGen, ExampleValidator or DataValidationGate"),
    (night_facts.EVALUATION, "Trainer or Evaluator"),
)
# The gate's error class -> the night's outcome (components/validation_gate/checks.py).
GATE_OUTCOMES = {
    "DataDriftError": "drift",
    "LabelsError": "labels",
    "DuplicatesError": "duplicates",
    "DataValidationError": "data_invalid",
}


def final_status(text: Any) -> dict[str, Any]:
    """The final status as a dict, whichever form it came in (JSON text from KFP and Vertex,
    snake_case keys from kfp.local, as a protobuf Struct); an unreadable one reads as FAILED."""
    if hasattr(text, "fields"):  # kfp.local's dict reaches TFX's entrypoint as a Struct
        from google.protobuf import json_format

        text = json_format.MessageToDict(text)
    if isinstance(text, dict):
        status = text
    else:
        try:
            status = json.loads(text or "{}")
        except ValueError:
            status = {"state": "FAILED", "error": {"message": f"unreadable final status: {text}"}}
    error = status.get("error") or {}
    state = str(status.get("state", "FAILED")).upper()
    return {
        "state": "SUCCEEDED" if state in SUCCEEDED_STATES else state,
        "error": error.get("message") or None,
        "run": status.get("pipelineJobResourceName") or status.get("pipeline_job_resource_name"),
    }


def outcome(state: str, kept: dict[str, dict], served_before, served_after) -> tuple[str, str]:
    """(outcome, the step it came from or '')."""
    gate = kept.get(night_facts.GATE, {})
    if state != "SUCCEEDED":
        if gate.get("kind"):
            return GATE_OUTCOMES.get(gate["kind"], "data_invalid"), night_facts.GATE
        if kept.get(night_facts.PUSHER, {}).get("load_test_failed"):
            return "load_test_failed", night_facts.PUSHER
        reached = [i for i, (fact, _) in enumerate(PROGRESS) if fact in kept]
        after = reached[-1] + 1 if reached else 0  # the steps after the last that kept facts
        return "failed", PROGRESS[after][1] if after < len(PROGRESS) else night_facts.PUSHER
    if kept.get(night_facts.EXAMPLES, {}).get("no_new_span"):
        return "no_new_span", ""
    if kept.get(night_facts.EVALUATION, {}).get("blessed") is False:
        return "not_blessed", ""
    if kept.get(night_facts.PUSHER, {}).get("served_changed"):
        return "served_changed", ""
    if served_after is not None and served_after != served_before:
        return "pushed", ""
    return "failed", "AtomicPusher"


def compose(status_text: Any, kept: dict[str, dict], served_after, runner: str) -> dict:
    """The night's message of a compiled run."""
    status = final_status(status_text)
    served_before = kept.get(night_facts.SERVED, {}).get("served_before")
    result, step = outcome(status["state"], kept, served_before, served_after)
    gate = kept.get(night_facts.GATE, {})
    error = status["error"]
    if result == "failed" and status["state"] == "SUCCEEDED":
        error = "the run succeeded, blessed a model, and the served version did not change"
    elif result in ("served_changed", "load_test_failed"):
        error = kept[night_facts.PUSHER][result]
    elif gate.get("error"):
        error = gate["error"]
    summary = {
        "outcome": result,
        "failed_step": step or (None if status["state"] == "SUCCEEDED" else "unknown"),
        "run_id": status["run"],
        "spans": kept.get(night_facts.EXAMPLES, {}).get("spans", []),
        "eval_accuracy": kept.get(night_facts.EVALUATION, {}).get("eval_accuracy"),
        "failed": error,
    }
    night = message(
        summary, runner=runner, exit_status=EXIT_STATUS[result], served_before=served_before,
        served_after=served_after, report=None, state=status["state"],
    )  # fmt: skip
    if result == "no_new_span":
        night["no_new_span_reason"] = kept[night_facts.EXAMPLES].get("reason")
    return night
