"""`make bench` (e): what the model-aware checks of a next night cost, each timed on a bench
run's own artifacts with the run's version as the served model, and how far they raise a
process's peak memory."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.local.summary import RunSummary


def _memory_kib(field: str) -> int | None:
    """This process's VmRSS or VmHWM (its peak since the last reset), KiB; None off Linux."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_memory() -> int | None:
    """Resets VmHWM to the current RSS (Linux's clear_refs 5) and returns that RSS, KiB."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return None
    return _memory_kib("VmRSS")


def model_checks(serving_dir: Path, summary: RunSummary, scratch: Path) -> dict:
    """(e): each model-aware check, timed, on the run's artifacts, as the next run's gate
    and Evaluator would run them with this run's version served."""
    from tfx.types import artifact_utils, standard_artifacts

    from components.checks.reference_images import MAX_CLASS_DROP
    from components.served_state import class_check
    from components.served_state import executor as served_state
    from components.validation_gate import labels, records

    examples = standard_artifacts.Examples()
    examples.uri = summary.artifacts["examples"]
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    served = standard_artifacts.Model()
    served.uri = str(scratch / "served")
    serving = {"serving_model_dir": str(serving_dir)}
    served_state.Executor().Do({}, {"served_model": [served]}, serving)
    before = _reset_peak_memory()  # what the checks add to a process's peak, at most
    started = time.time()
    judgement, why = labels.check_labels(
        [examples], [served], summary.record_counts.get("train", 0), None, str(scratch)
    )
    label_seconds = time.time() - started
    started = time.time()
    copies = records.duplicates(
        *(records.image_hashes(artifact_utils.get_split_uri([examples], split))
          for split in ("train", "eval"))
    )  # fmt: skip
    copy_seconds = time.time() - started
    candidate = standard_artifacts.Model()
    candidate.uri = summary.artifacts["model"]
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(scratch / "evaluation"), str(scratch / "blessing")
    started = time.time()
    class_check.check_reference_classes(
        {"model": [candidate], "baseline_model": [served]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        MAX_CLASS_DROP,
    )
    reference_seconds = time.time() - started
    peak = _memory_kib("VmHWM") if before is not None else None
    return {
        "peak_growth_mb": None if peak is None else (peak - before) / 1024,
        "images": copies["images"],
        "scored": judgement.scored if judgement else 0,
        "labels_not_judged": why,
        "label_seconds": label_seconds,
        "copy_seconds": copy_seconds,
        "reference_seconds": reference_seconds,
        "total_seconds": label_seconds + copy_seconds + reference_seconds,
    }
