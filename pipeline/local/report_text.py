"""The one-screen summary printed at the end of `cifar10-pipeline run`."""

from __future__ import annotations

from components.contract import LABEL_NAMES, TRAINER_NODE
from pipeline.local.report_data import duplicates_text
from pipeline.local.summary import RunSummary


def _pct(value: float | None) -> str:
    return "none" if value is None else f"{100 * value:.2f}%"


def comparison_lines(comparison: dict | None) -> list[str]:
    """Skew and drift in a line each: what was compared with what, and how it came out."""
    if not comparison:
        return []
    lines = []
    for kind in ("skew", "drift"):
        found = comparison[kind]
        label = f"{kind:<15}"
        if found["skipped"]:
            lines.append(f"{label}{found['skipped']}")
            continue
        over = [d for d in found["distances"] if d["over"]]
        verdict = f"{len(over)} of {len(found['distances'])} features beyond their thresholds"
        lines.append(f"{label}{found['new']} against {found['old']}: {verdict}")
        for feature, side in found.get("missing", {}).items():
            lines.append(f"  {feature}: missing from {side}, not compared")
        for feature, why in found.get("not_compared", {}).items():
            lines.append(f"  {feature}: not compared, {why}")
        if kind == "drift" and comparison["drift_accepted"]:
            names = ", ".join(d["feature"] for d in over)
            lines.append(f"  ACCEPTED with --accept-drift: {names}")
    lines += _label_lines(comparison)
    copies = duplicates_text(comparison)
    if copies:
        lines.append(f"{'duplicates':<15}{copies}")
    for split, features in comparison.get("out_of_domain", {}).items():
        for name, found in features.items():
            low, high = found["domain"]
            lines.append(
                f"out of domain  split '{split}', {name}: {found['count']:,} of "
                f"{found['records']:,} images outside [{low:g}, {high:g}] (tolerated)"
            )
    return lines


def _label_lines(comparison: dict) -> list[str]:
    """The served model's judgement of the labels in a line (and the pairs it found)."""
    labels = comparison.get("labels")
    if not labels:
        return []
    if labels.get("skipped"):
        return [f"{'labels':<15}{labels['skipped']}"]
    reference = labels["reference_noise_estimate"]
    against = f"{100 * reference:.1f}%" if reference is not None else "no reference"
    lines = [
        f"{'labels':<15}{labels['scored']:,} images scored by the served model: "
        f"{len(labels['exchanged'])} exchanged pairs, an estimated "
        f"{100 * labels['noise_estimate']:.1f}% wrong labels ({against} on its eval split)"
    ]
    for pair in labels["exchanged"]:
        lines.append(f"  exchanged: {' and '.join(pair['labels'])}")
    if labels.get("shift") is not None:
        lines.append(
            f"  the served model's view of the images: Kolmogorov-Smirnov {labels['shift']:.3f} "
            f"(threshold {labels['shift_threshold']:g}, class {labels['shift_class']})"
        )
    elif labels.get("shift_skipped"):
        lines.append(
            f"  the served model's view of the images: not compared, {labels['shift_skipped']}"
        )
    if labels.get("embedding_shift") is not None:
        lines.append(
            f"  the served model's embeddings: maximum mean discrepancy "
            f"{labels['embedding_shift']:.4f} (threshold {labels['embedding_threshold']:g}; "
            f"{labels['embedding_compared']})"
        )
    elif labels.get("embedding_skipped"):
        lines.append(
            f"  the served model's embeddings: not compared, {labels['embedding_skipped']}"
        )
    if comparison.get("labels_accepted"):
        lines.append("  ACCEPTED with --accept-labels")
    return lines


def render(summary: RunSummary) -> str:
    counts = summary.record_counts
    lines = [
        "",
        "== CIFAR-10 pipeline run ==",
        "records        " + ", ".join(f"{split} {count}" for split, count in counts.items()),
    ]
    for stage, seconds in summary.stage_seconds.items():
        cached = " (cached)" if summary.stage_states.get(stage) == "cached" else ""
        lines.append(f"  {stage:<32} {seconds:7.1f}s{cached}")
    if summary.spans and summary.spans != [0]:
        lines.append(f"spans          {', '.join(f'span-{n}' for n in summary.spans)}")
    lines += comparison_lines(summary.data_comparison)
    training = summary.training
    if training is not None:
        lines.append(
            f"training       {training.model} on {training.strategy} strategy, "
            f"{training.workers} worker(s), {training.replicas} replica(s), "
            f"global batch {training.global_batch_size} "
            f"({training.per_replica_batch_size} per replica), {training.epochs} epochs, "
            f"fit {training.fit_seconds}s, {training.training_flops:.2e} FLOPs"
        )
        lines.append(f"precision      {training.precision} ({training.precision_reason})")
        if training.warm_start_source:
            lines.append(f"warm start     from {training.warm_start_source}")
        elif training.warm_start_note:
            lines.append(f"warm start     none, from scratch: {training.warm_start_note}")
        if training.allreduce_seconds is not None:
            lines.append(
                f"scaling        {training.step_seconds}s a step, all-reduce "
                f"{training.allreduce_seconds * 1000:.1f} ms of {training.gradient_bytes:,} bytes"
            )
    evaluation = summary.evaluation
    if evaluation is not None:
        lines.append(
            f"eval accuracy  {_pct(evaluation.eval_accuracy)}"
            f" (baseline model: {_pct(evaluation.baseline_accuracy)})"
        )
        if evaluation.per_class_accuracy:
            lines.append(
                "  per class    "
                + ", ".join(
                    f"{LABEL_NAMES[label]} {_pct(value)}"
                    for label, value in sorted(evaluation.per_class_accuracy.items())
                )
            )
    if evaluation is not None and evaluation.reference:
        lines.append(f"reference      {evaluation.reference}")
    if summary.blessed is not None:
        lines.append(f"gate           {'BLESSED' if summary.blessed else 'NOT BLESSED'}")
        for failure in evaluation.gate_failures if evaluation else []:
            lines.append(f"  - {failure}")
    if summary.stage_states.get(TRAINER_NODE) == "cached":
        lines.append("cache          inputs and config unchanged: the Trainer reused its model")
    if summary.push is not None:
        if summary.push.pushed:
            note = "" if summary.push.pushed_new_version else " (already served; no new version)"
            lines.append(f"pushed         {summary.push.pushed_version_dir}{note}")
            if summary.push.load_test:
                lines.append(f"load test      {summary.push.load_test}")
        else:
            lines.append("pushed         nothing (the previously served version stays)")
    lines.append(f"outcome        {summary.outcome}")
    lines.append(f"total          {summary.total_seconds}s")
    return "\n".join(lines)
