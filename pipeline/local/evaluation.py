"""What the Evaluator measured, as the run summary keeps it: TFMA's overall and per-class
accuracy, its confusion matrix and why validation failed, and the per-class check on the
served version's reference images (components/checks/reference_images.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from components.contract import LABEL_NAMES, NUM_CLASSES, REFERENCE_CHECK_FILE

ACCURACY_METRIC = "sparse_categorical_accuracy"
CONFUSION_PLOT = "multiClassConfusionMatrixAtThresholds"


@dataclass(frozen=True)
class Evaluation:
    """What TFMA measured on the eval split, and why the gate refused, if it did."""

    eval_accuracy: float | None
    baseline_accuracy: float | None  # the model compared against, when there was one
    per_class_accuracy: dict[int, float]
    per_class_eval_records: dict[int, int]
    confusion_matrix: list[list[int]]  # [true class][predicted class] -> eval records
    gate_failures: list[str]
    # The per-class check on the served version's reference images, in words (None: no
    # served model to compare with).
    reference: str | None = None


def read_json(path: str) -> Any:
    """The JSON file at `path` (local or remote), or None where there is none."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def evaluation_facts(evaluation_uri: str) -> Evaluation:
    """Overall and per-class accuracy, the confusion matrix, and why validation failed,
    from a TFMA output."""
    import tensorflow_model_analysis as tfma

    overall, baseline = None, None
    result = tfma.load_eval_result(evaluation_uri)
    for slice_key, by_output in result.slicing_metrics:
        if slice_key:  # an evaluation written with more slices than the overall one
            continue
        values = by_output.get("", {}).get("", {})
        overall = values.get(ACCURACY_METRIC, {}).get("doubleValue")
        diff = values.get(f"{ACCURACY_METRIC}_diff", {}).get("doubleValue")
        if diff is not None and overall is not None:
            baseline = overall - diff
    confusion, records = confusion_matrix(result.plots)
    per_class, per_class_records = class_accuracy(confusion, records)
    failures = []
    validation = tfma.load_validation_result(evaluation_uri)
    for per_slice in validation.metric_validations_per_slice:
        for failure in per_slice.failures:
            failures.append(
                f"{failure.metric_key.name}{' vs baseline' if failure.metric_key.is_diff else ''}"
                f" = {failure.metric_value.double_value.value:.4f} fails {failure.message or ''}"
                f"{_threshold_text(failure.metric_threshold)}"
            )
    reference, problems = reference_facts(evaluation_uri)
    return Evaluation(
        overall, baseline, per_class, per_class_records, confusion, failures + problems, reference
    )


def reference_facts(evaluation_uri: str) -> tuple[str | None, list[str]]:
    """(one line on the per-class check on the served version's reference images, the
    classes that fell too far) from the Evaluator's REFERENCE_CHECK_FILE."""
    found = read_json(os.path.join(evaluation_uri, REFERENCE_CHECK_FILE))
    if found is None:
        return None, []
    if "not_checked" in found:
        return f"not checked: {found['not_checked']}", list(found.get("problems", []))
    drops = [
        (served - candidate, label)
        for label, (served, candidate) in enumerate(zip(found["served"], found["candidate"]))
        if served is not None and candidate is not None
    ]
    if not drops:
        return f"no class with enough of the {found['images']:,} images", []
    drop, label = max(drops)
    where = f"on the served version's {found['images']:,} reference images"
    if drop <= 0:
        return f"no class below the served model {where}", []
    return (
        f"{LABEL_NAMES[label]} {drop * 100:.1f} points below the served model {where} "
        f"(blocks above {found['max_drop'] * 100:.0f})",
        list(found.get("problems", [])),
    )


def confusion_matrix(plots) -> tuple[list[list[int]], list[int]]:
    """([true class][predicted class] -> records, records per true class) from the overall
    slice of TFMA's MultiClassConfusionMatrixPlot (`EvalResult.plots`). A record TFMA left
    without a predicted class (its top score at or below the plot's threshold) counts for its
    class but in no column."""
    confusion = [[0] * NUM_CLASSES for _ in range(NUM_CLASSES)]
    records = [0] * NUM_CLASSES
    for slice_key, by_output in plots:
        if slice_key:
            continue
        matrices = by_output.get("", {}).get("", {}).get(CONFUSION_PLOT, {}).get("matrices", [])
        for entry in matrices[0].get("entries", []) if matrices else []:
            # proto3 JSON leaves out zeros: class 0 is an absent id
            actual, predicted = entry.get("actualClassId", 0), entry.get("predictedClassId", 0)
            count = int(entry.get("numWeightedExamples", 0))
            records[actual] += count
            if 0 <= predicted < NUM_CLASSES:
                confusion[actual][predicted] += count
    return confusion, records


def class_accuracy(
    confusion: list[list[int]], records: list[int]
) -> tuple[dict[int, float], dict[int, int]]:
    """Per-class accuracy and records, for the classes the eval split has: of the records of
    class c, the share predicted as c. SparseCategoricalAccuracy on the records labelled c
    takes the same argmax, so this is the figure TFMA's slices by label gave, without TFMA
    slicing the eval split a second time to compute it."""
    present = [c for c in range(NUM_CLASSES) if records[c]]
    return {c: confusion[c][c] / records[c] for c in present}, {c: records[c] for c in present}


def _threshold_text(threshold) -> str:
    if threshold.HasField("value_threshold"):
        bound = threshold.value_threshold.lower_bound.value
        return f"the accuracy gate (>= {bound:.4f})"
    if threshold.HasField("change_threshold"):
        allowed = threshold.change_threshold.absolute.value
        return f"the no-regression check (change >= {allowed:+.4f})"
    return "a threshold"
