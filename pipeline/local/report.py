"""`<output-dir>/report.html`: data, training and verdict of a run on one self-contained
page (plots from matplotlib, images inlined as PNG data URIs, no network needed).

Every figure comes from the typed run summary, which took it from the statistics
artifact and TFMA's output; the data is read again only for pictures, from a bounded
sample: sample images per class, and the most confident mistakes among the first
`MISTAKES_SAMPLE` eval records."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from components.contract import (
    EVAL_SPLIT,
    EXAMPLES_INPUT,
    EXAMPLES_SIGNATURE,
    IMAGE_SHAPE,
    LABEL_NAMES,
    NUM_CLASSES,
    PROBABILITIES_KEY,
    TRAIN_SPLIT,
)
from pipeline.common.files import write_atomically
from pipeline.local.examples import read_split
from pipeline.local.report_data import ArtifactError, data_section, png_of, reading, tiles
from pipeline.local.summary import RunSummary

REPORT_FILE = "report.html"
REPORT_TEMPLATE = "report.html"  # in pipeline/local/templates/
SAMPLE_RECORDS = 1000  # train records read for the sample grid
MISTAKES_SAMPLE = 400  # eval records the exported model classifies: ~65 mistakes to pick 24 from
MISTAKES_SHOWN = 24


def training_section(summary: RunSummary) -> dict[str, Any] | None:
    """None when the Trainer did not run."""
    import matplotlib.pyplot as plt

    history, training = summary.history, summary.training
    if not history:
        return None
    epochs = [e["epoch"] for e in history]
    figure, (loss_axis, acc_axis, lr_axis) = plt.subplots(1, 3, figsize=(12, 3))
    for key, label in (("loss", "train"), ("val_loss", "eval")):
        loss_axis.plot(epochs, [e.get(key) for e in history], marker="o", label=label)
    for key, label in (("accuracy", "train"), ("val_accuracy", "eval")):
        acc_axis.plot(epochs, [e.get(key) for e in history], marker="o", label=label)
    lr_axis.plot(epochs, [e.get("learning_rate") for e in history], marker="o")
    for axis, title in (
        (loss_axis, "loss"),
        (acc_axis, "accuracy"),
        (lr_axis, "learning rate at epoch end"),
    ):
        axis.set_title(title)
        axis.set_xlabel("epoch")
    loss_axis.legend()
    acc_axis.legend()
    rows = [
        [
            e["epoch"],
            f"{e['seconds']:.1f}",
            f"{e.get('loss', 0):.4f}",
            f"{e.get('accuracy', 0):.4f}",
            _eval_accuracy(e),
            f"{e.get('learning_rate', 0):.4g}",
        ]
        for e in history
    ]
    setup = (
        None
        if training is None
        else [
            training.model,
            training.strategy,
            training.replicas,
            training.per_replica_batch_size,
            training.global_batch_size,
            training.epochs,
            f"{training.precision} ({training.precision_reason})",
            f"{training.training_flops:.2e}",
            training.fit_seconds,
            training.resumed_from_epoch,
        ]
    )
    curves = png_of(figure, dict(left=0.06, right=0.99, top=0.9, bottom=0.17, wspace=0.25))
    return {"setup": setup, "curves": curves, "epochs": rows}


def _eval_accuracy(epoch: dict[str, Any]) -> str:
    """The epoch's validation accuracy, with the share of the eval split it was scored on
    when that was a part (epochs before the last: `callbacks.Validation`)."""
    text = f"{epoch.get('val_accuracy', 0):.4f}"
    fraction = epoch.get("val_fraction", 1.0)
    return text if fraction >= 1.0 else f"{text} (on {fraction:.0%} of it)"


def evaluation_section(summary: RunSummary) -> dict[str, Any] | None:
    """None when the Evaluator did not run; `mistakes` None when no model or records were
    there to classify."""
    import matplotlib.pyplot as plt
    import tensorflow as tf

    evaluation = summary.evaluation
    if evaluation is None or evaluation.eval_accuracy is None:
        return None
    gate = summary.accuracy_gate
    confusion = np.array(evaluation.confusion_matrix, np.int64)
    per_class = np.array([evaluation.per_class_accuracy.get(i, 0.0) for i in range(NUM_CLASSES)])
    figure, (bars, matrix) = plt.subplots(1, 2, figsize=(12, 4.5))
    bars.barh(LABEL_NAMES, per_class)
    bars.set_xlim(0, 1)
    bars.set_title("per-class accuracy")
    shown = matrix.imshow(confusion, cmap="Blues")
    matrix.set_xticks(range(NUM_CLASSES), LABEL_NAMES, rotation=60, fontsize=7)
    matrix.set_yticks(range(NUM_CLASSES), LABEL_NAMES, fontsize=7)
    matrix.set_xlabel("predicted")
    matrix.set_ylabel("true")
    matrix.set_title("confusion matrix")
    for (row, column), value in np.ndenumerate(confusion):
        matrix.text(column, row, str(value), ha="center", va="center", fontsize=6)
    figure.colorbar(shown, ax=matrix)
    rows = [
        [LABEL_NAMES[i], evaluation.per_class_eval_records.get(i, 0), f"{100 * per_class[i]:.2f}%"]
        for i in range(NUM_CLASSES)
    ]
    section = {
        "accuracy": f"{100 * evaluation.eval_accuracy:.2f}%",
        "gate": None if gate is None else f"{100 * gate:.0f}%",
        "figure": png_of(figure, dict(left=0.08, right=0.98, top=0.94, bottom=0.2, wspace=0.3)),
        "classes": rows,
        "mistakes": None,
    }
    model_dir = os.path.join(summary.artifacts.get("model", ""), "Format-Serving")
    images, labels, serialized = _records(summary, EVAL_SPLIT, MISTAKES_SAMPLE)
    if not os.path.exists(model_dir) or not serialized:
        return section
    with reading(model_dir, "model"):
        serve = tf.saved_model.load(model_dir).signatures[EXAMPLES_SIGNATURE]
        probabilities = np.concatenate(
            [
                serve(**{EXAMPLES_INPUT: tf.constant(serialized[i : i + 512])})[
                    PROBABILITIES_KEY
                ].numpy()
                for i in range(0, len(serialized), 512)
            ]
        )
    predicted = probabilities.argmax(1)
    wrong = np.flatnonzero(predicted != labels)
    worst = wrong[np.argsort(-probabilities[wrong].max(1))][:MISTAKES_SHOWN]
    captions = [
        f"{LABEL_NAMES[labels[i]]}->{LABEL_NAMES[predicted[i]]} {100 * probabilities[i].max():.0f}%"
        for i in worst
    ]
    return {
        **section,
        "mistakes": tiles(images[worst], captions),
        "records_classified": len(serialized),
    }


def outcome_section(summary: RunSummary) -> dict[str, Any]:
    blessed = summary.blessed
    verdict = ("BLESSED" if blessed else "NOT BLESSED") if blessed is not None else "not evaluated"
    failures = summary.evaluation.gate_failures if summary.evaluation else []
    if summary.failed:
        failures = [*failures, f"the run failed: {summary.failed}"]
    pushed = summary.push.pushed_version_dir if summary.push and summary.push.pushed else None
    stages = [
        [stage, f"{seconds:.1f}", summary.stage_states.get(stage, "")]
        for stage, seconds in summary.stage_seconds.items()
    ]
    return {
        "blessed": blessed,
        "verdict": verdict,
        "failures": failures,
        "pushed": pushed,
        "total_seconds": summary.total_seconds,
        "outcome": summary.outcome,
        "warm_start": summary.warm_start_from,
        "stages": stages,
    }


def _records(summary: RunSummary, split: str, limit: int):
    """The first `limit` records of a split of the run's examples (none without them)."""
    examples = summary.artifacts.get("examples")
    if not examples:
        return np.zeros((0, *IMAGE_SHAPE), np.uint8), np.zeros(0, np.int64), []
    with reading(examples, "examples"):
        return read_split(examples, split, limit)


def build_report(run_dir: Path) -> Path:
    """Writes `<run_dir>/report.html` from `run_summary.json` and the run's artifacts.
    Raises FileNotFoundError (no summary), `SummaryError` (one it cannot read) or
    `ArtifactError` (an artifact or the page it cannot read or write), each naming the
    file; the page is written whole or not at all."""
    import matplotlib

    matplotlib.use("Agg")
    summary = RunSummary.load(run_dir)
    page = _template().render(
        run_id=summary.run_id,
        outcome=outcome_section(summary),
        data=data_section(summary, _records(summary, TRAIN_SPLIT, SAMPLE_RECORDS)),
        training=training_section(summary),
        evaluation=evaluation_section(summary),
    )
    try:
        return write_atomically(run_dir / REPORT_FILE, page)
    except OSError as err:
        raise ArtifactError(
            f"{run_dir / REPORT_FILE}: cannot write the page ({err.strerror or err})"
        ) from None


def _template():
    """templates/report.html, from the installed package, with autoescaping: values from the
    run are always text, never markup."""
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("pipeline.local", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return environment.get_template(REPORT_TEMPLATE)
