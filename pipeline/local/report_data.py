"""The report's data section: records per split, sample images, TFDV's statistics and
anomalies, and the skew and drift comparisons (per-feature histograms of the train and eval
splits and of the served model's training data, each distance beside its threshold)."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from components.contract import (
    EVAL_SPLIT,
    IMAGE_SUMMARY_FEATURES,
    LABEL_NAMES,
    NUM_CLASSES,
    SERVED_STATISTICS_FILE,
    TRAIN_SPLIT,
)
from components.storage.tfx_files import anomalies_file, statistics_file
from pipeline.local.summary import RunSummary

SAMPLES_PER_CLASS = 8
SUSPECTS_SHOWN = 30


class ArtifactError(ValueError):
    """A file or folder of the run that the report cannot read; the message names it."""


@contextlib.contextmanager
def reading(path: str, what: str) -> Iterator[None]:
    """Reading `path`, the run's `what`: a file that is not there, damaged or unreadable
    (OSError, a proto that does not parse, TensorFlow's DataLossError and the like) is an
    `ArtifactError` naming it, in words rather than TensorFlow's op names."""
    from google.protobuf.message import DecodeError

    try:
        yield
    except Exception as err:
        tf = sys.modules.get("tensorflow")  # imported by now, if the reading needed it
        read_errors = (OSError, ValueError, DecodeError) + ((tf.errors.OpError,) if tf else ())
        if isinstance(err, ArtifactError) or not isinstance(err, read_errors):
            raise
        reason = getattr(err, "message", None) or getattr(err, "strerror", None) or str(err)
        if isinstance(err, DecodeError):  # protobuf names its message type, not the problem
            reason = "damaged: it does not parse"
        reason = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:.*", "", reason, flags=re.DOTALL)
        reason = (reason.strip().splitlines() or [type(err).__name__])[0]
        raise ArtifactError(f"{path}: cannot read the run's {what} ({reason})") from err


def png_of(figure, margins: dict[str, float]) -> str:
    """A matplotlib figure as a PNG data URI (the figure is closed), laid out by fixed
    `margins` (`Figure.subplots_adjust`'s fractions), drawn once: `tight_layout` and
    `bbox_inches="tight"` each draw the whole figure once more to measure its labels, more
    than half of the figures' time. The labels are the fixed class and
    feature names, so a figure's margins are set once for it."""
    import matplotlib.pyplot as plt

    figure.subplots_adjust(**margins)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return _png_data_uri(buffer.getvalue())


def _png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _tile(image: np.ndarray) -> str:
    """One image as a PNG data URI, encoded by Pillow: a grid of these renders in
    milliseconds, where a matplotlib axes per image took seconds per grid."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return _png_data_uri(buffer.getvalue())


def tiles(images: np.ndarray, captions: list[str]) -> list[tuple[str, str]]:
    """(PNG data URI, caption) per image, for the template's grid."""
    return [(_tile(image), caption) for image, caption in zip(images, captions)]


def data_section(summary: RunSummary, train) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    chart = ""
    if summary.evaluation and summary.evaluation.per_class_eval_records:
        per_class = summary.evaluation.per_class_eval_records
        figure, axis = plt.subplots(figsize=(8, 3))
        axis.bar(np.arange(NUM_CLASSES), [per_class.get(i, 0) for i in range(NUM_CLASSES)])
        axis.set_xticks(np.arange(NUM_CLASSES), LABEL_NAMES, rotation=30, fontsize=8)
        axis.set_ylabel("eval records")
        chart = png_of(figure, dict(left=0.08, right=0.98, top=0.95, bottom=0.22))
    images, labels, _ = train
    samples, captions = [], []
    for label in range(NUM_CLASSES):
        chosen = np.flatnonzero(labels == label)[:SAMPLES_PER_CLASS]
        samples.extend(images[chosen])
        captions.extend([LABEL_NAMES[label]] * len(chosen))
    statistics, anomalies = _statistics_rows(summary)
    return {
        "comparison": comparison_section(summary),
        "counts": ", ".join(f"{split} {count}" for split, count in summary.record_counts.items()),
        "source": str(summary.source),
        "spans": ", ".join(f"span-{n}" for n in summary.spans if n),
        "chart": chart,
        "tiles": tiles(np.array(samples), captions) if samples else [],
        "columns": SAMPLES_PER_CLASS,
        "statistics": statistics,
        "anomalies": anomalies,
    }


def _statistics_rows(summary: RunSummary) -> tuple[list[list[Any]], list[list[Any]]]:
    """One row per split and feature from StatisticsGen, one per anomaly found."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2

    artifacts = summary.artifacts
    rows, anomalies = [], []
    for split in (TRAIN_SPLIT, EVAL_SPLIT):
        path = statistics_file(artifacts.get("statistics", ""), split)
        if os.path.exists(path):
            with reading(path, "statistics"):
                stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
                    Path(path).read_bytes()
                )
            for dataset in stats.datasets:
                for feature in dataset.features:
                    name = ".".join(feature.path.step)
                    common = (
                        feature.num_stats.common_stats
                        if feature.HasField("num_stats")
                        else feature.string_stats.common_stats
                        if feature.HasField("string_stats")
                        else feature.bytes_stats.common_stats
                    )
                    detail = ""
                    if feature.HasField("bytes_stats"):
                        detail = (
                            f"{feature.bytes_stats.min_num_bytes:g}-"
                            f"{feature.bytes_stats.max_num_bytes:g} bytes"
                        )
                    elif feature.HasField("string_stats"):
                        detail = f"{feature.string_stats.unique} distinct values"
                    rows.append([split, name, dataset.num_examples, common.num_missing, detail])
        path = anomalies_file(artifacts.get("anomalies", ""), split)
        if os.path.exists(path):
            with reading(path, "anomalies"):
                found = anomalies_pb2.Anomalies.FromString(Path(path).read_bytes())
            anomalies += [
                [split, name, info.short_description or info.description]
                for name, info in found.anomaly_info.items()
            ]
    return rows, anomalies


def _read_statistics(path: str):
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if not path or not os.path.exists(path):
        return None
    with reading(path, "statistics"):
        return statistics_pb2.DatasetFeatureStatisticsList.FromString(Path(path).read_bytes())


def _histogram(stats, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(bucket edges, share of records per bucket) of a numeric feature's standard histogram."""
    for feature in stats.datasets[0].features if stats and stats.datasets else []:
        if ".".join(feature.path.step) == name and feature.num_stats.histograms:
            buckets = feature.num_stats.histograms[0].buckets
            counts = np.array([b.sample_count for b in buckets])
            edges = np.array([buckets[0].low_value] + [b.high_value for b in buckets])
            return edges, counts / max(counts.sum(), 1e-9)
    return None


def _histograms_figure(named_stats: dict[str, Any]) -> str:
    """One panel per image summary: the share of records per bucket, one line per data set."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 4, figsize=(12, 5))
    for axis, name in zip(axes.flat, IMAGE_SUMMARY_FEATURES):
        for label, stats in named_stats.items():
            histogram = _histogram(stats, name)
            if histogram is not None:
                edges, shares = histogram
                axis.stairs(shares, edges, label=label)
        axis.set_title(name.removeprefix("image_").replace("_", " "), fontsize=9)
        axis.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    return png_of(
        figure, dict(left=0.05, right=0.99, top=0.94, bottom=0.06, wspace=0.28, hspace=0.3)
    )


def _embedded_text(embedded: dict | None) -> str:
    """The copies the served model's embeddings found in the scored sample, for the
    duplicates line ('' when it scored none)."""
    if not embedded:
        return ""
    if embedded["skipped"]:
        return f" (copies by embeddings not judged: {embedded['skipped']})"
    sampled = f", {embedded['found']:,} in a 1-in-{embedded['every']} sample" * (
        embedded["every"] > 1
    )
    return f", {embedded['copies']:,} by the served model's embeddings{sampled}"


def duplicates_text(comparison: dict) -> str:
    """The gate's duplicates finding in one line ('' when it made none): exact copies among
    the run's images and what the ExampleGen dropped from eval, or whether the served
    version's index could be checked, and how many of the new spans' train images the
    served version was trained on (comparison.json's `duplicates`)."""
    copies = comparison.get("duplicates")
    if not copies:
        return ""
    near = copies.get("near_copies")  # absent from a gate that did not look for them
    text = (
        f"{copies['copies']:,} exact copies"
        + ("" if near is None else f" and {near:,} near")
        + _embedded_text(copies.get("embedding_copies"))
        + f" among {copies['images']:,} images"
    )
    dropped = copies.get("eval_dropped")
    if dropped is None:  # an ExampleGen that dropped nothing
        text += f" ({copies['eval_in_train']:,} eval images also in train)"
    else:
        text += f"; eval: {dropped['copies_of_train']:,} copies of train images dropped"
        text += (
            f"; eval images the served model trained on: not checked, {dropped['not_checked']}"
            if dropped["not_checked"]
            else f", {dropped['seen_by_served']:,} images the served model trained on dropped"
        )
        if dropped.get("train_seen_by_served") is not None:  # from an ExampleGen that counts
            text += (
                f"; train: {dropped['train_seen_by_served']:,} of "
                f"{dropped['new_train_records']:,} new images the served model trained on"
            )
    if comparison.get("duplicates_accepted"):
        text += ", ACCEPTED with --accept-duplicates"
    return text


def comparison_section(summary: RunSummary) -> dict[str, Any] | None:
    """Skew and drift: what was compared with what, each distance beside its threshold, the
    verdict, and the per-feature histograms of the data sets compared. None where the gate
    wrote no comparison (it failed, or the run predates it)."""
    comparison = summary.data_comparison
    if not comparison:
        return None
    statistics = summary.artifacts.get("statistics", "")
    named = {
        "train": _read_statistics(statistics_file(statistics, TRAIN_SPLIT)),
        "eval": _read_statistics(statistics_file(statistics, EVAL_SPLIT)),
    }
    served = _read_statistics(
        os.path.join(summary.artifacts.get("comparison", ""), SERVED_STATISTICS_FILE)
    )
    if served is not None:
        named["served model's training data"] = served
    rows, notes = [], []
    for kind in ("skew", "drift"):
        found = comparison[kind]
        if found["skipped"]:
            notes.append(f"{kind}: {found['skipped']}")
            continue
        notes.append(f"{kind}: {found['new']} against {found['old']}")
        notes += [
            f"{kind}: {f} missing from {side}" for f, side in found.get("missing", {}).items()
        ]
        notes += [
            f"{kind}: {f} not compared, {why}" for f, why in found.get("not_compared", {}).items()
        ]
        for d in found["distances"]:
            verdict = "beyond" if d["over"] else "within"
            rows.append(
                [kind, d["feature"], d["measure"], f"{d['value']:.4f}", d["threshold"], verdict]
            )
    if (comparison.get("labels") or {}).get("skipped"):
        notes.append(f"labels: {comparison['labels']['skipped']}")
    if duplicates_text(comparison):
        notes.append(f"duplicates: {duplicates_text(comparison)}")
    return {
        "notes": notes,
        "rows": rows,
        "suspects": suspect_tiles(summary, comparison),
        "accepted": comparison["drift_accepted"],
        "figure": _histograms_figure(named) if named["train"] is not None else "",
    }


def suspect_tiles(summary: RunSummary, comparison: dict) -> list[tuple[str, str]]:
    """Thumbnails of the images whose label the served model believed least (the gate's
    label check, most suspect first), captioned with the label and the model's guess."""
    from pipeline.local.examples import read_by_id

    suspects = (comparison.get("labels") or {}).get("suspects", [])[:SUSPECTS_SHOWN]
    examples = summary.artifacts.get("examples")
    if not suspects or not examples:
        return []
    with reading(examples, "examples"):
        images = read_by_id(examples, TRAIN_SPLIT, [s["record_id"] for s in suspects])
    shown = [s for s in suspects if s["record_id"] in images]
    captions = [f"{s['given']}? model: {s['predicted']} {s['confidence']:.0%}" for s in shown]
    return tiles(np.array([images[s["record_id"]] for s in shown]), captions) if shown else []
