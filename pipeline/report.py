"""`<output-dir>/report.html`: data, training and verdict of a run on one self-contained
page (plots from matplotlib, images inlined as PNG data URIs, no network needed)."""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from components.contract import LABEL_NAMES

REPORT_FILE = "report.html"
SAMPLES_PER_CLASS = 8
MISTAKES_SHOWN = 24


def _png(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{html.escape(alt)}">'


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def read_split(examples_uri: str, split: str) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    import tensorflow as tf

    from components.trainer import data

    files = tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*"))
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
    if not serialized:
        return np.zeros((0, 32, 32, 3), np.uint8), np.zeros(0, np.int64), []
    images, labels = data.decode_examples(tf.constant(serialized))
    return images.numpy(), labels.numpy(), serialized


def _grid(images: np.ndarray, columns: int, captions: list[str] | None = None, scale=1.0):
    import matplotlib.pyplot as plt

    rows = max(1, int(np.ceil(len(images) / columns)))
    figure, axes = plt.subplots(rows, columns, figsize=(columns * scale, rows * scale * 1.15))
    for index, axis in enumerate(np.atleast_1d(axes).ravel()):
        axis.axis("off")
        if index < len(images):
            axis.imshow(images[index])
            if captions:
                axis.set_title(captions[index], fontsize=6)
    return figure


def data_section(facts: dict, train, evals) -> str:
    import matplotlib.pyplot as plt

    counts = {split: np.bincount(labels, minlength=10) for split, (_, labels, _) in
              (("train", train), ("eval", evals))}
    figure, axis = plt.subplots(figsize=(8, 3))
    x = np.arange(10)
    for offset, (split, values) in zip((-0.2, 0.2), counts.items()):
        axis.bar(x + offset, values, width=0.4, label=f"{split} ({values.sum()})")
    axis.set_xticks(x, LABEL_NAMES, rotation=30, fontsize=8)
    axis.set_ylabel("records")
    axis.legend()
    chart = _png(figure)
    images, labels, _ = train
    samples, captions = [], []
    for label in range(10):
        chosen = np.flatnonzero(labels == label)[:SAMPLES_PER_CLASS]
        samples.extend(images[chosen])
        captions.extend([LABEL_NAMES[label]] * len(chosen))
    grid = _png(_grid(np.array(samples), SAMPLES_PER_CLASS, captions)) if samples else ""
    stats = _statistics_table(facts)
    return (f"<h2>Data</h2><p>Records per split: train {counts['train'].sum()}, "
            f"eval {counts['eval'].sum()} (source {html.escape(str(facts.get('source', '')))})</p>"
            f"{_img(chart, 'records per class')}<h3>Sample images per class (train)</h3>"
            f"{_img(grid, 'sample grid') if grid else '<p>no images</p>'}"
            f"<h3>TFDV statistics and anomalies</h3>{stats}")


def _statistics_table(facts: dict) -> str:
    from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2

    artifacts = facts.get("artifacts", {})
    rows, anomalies = [], []
    for split in ("train", "eval"):
        path = os.path.join(artifacts.get("statistics", ""), f"Split-{split}", "FeatureStats.pb")
        if os.path.exists(path):
            stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(Path(path).read_bytes())
            for dataset in stats.datasets:
                for feature in dataset.features:
                    name = ".".join(feature.path.step)
                    common = (feature.num_stats.common_stats if feature.HasField("num_stats")
                              else feature.string_stats.common_stats
                              if feature.HasField("string_stats") else feature.bytes_stats.common_stats)
                    detail = ""
                    if feature.HasField("bytes_stats"):
                        detail = (f"{feature.bytes_stats.min_num_bytes:g}-"
                                  f"{feature.bytes_stats.max_num_bytes:g} bytes")
                    elif feature.HasField("string_stats"):
                        detail = f"{feature.string_stats.unique} distinct values"
                    rows.append([split, name, dataset.num_examples, common.num_missing, detail])
        path = os.path.join(artifacts.get("anomalies", ""), f"Split-{split}", "SchemaDiff.pb")
        if os.path.exists(path):
            found = anomalies_pb2.Anomalies.FromString(Path(path).read_bytes())
            anomalies += [[split, name, info.short_description or info.description]
                          for name, info in found.anomaly_info.items()]
    table = _table(["split", "feature", "examples", "missing", "values"], rows)
    listed = (_table(["split", "feature", "anomaly"], anomalies) if anomalies
              else "<p class='ok'>No anomalies against the curated schema.</p>")
    return table + listed


def training_section(facts: dict) -> str:
    import matplotlib.pyplot as plt

    history = facts.get("history", [])
    if not history:
        return "<h2>Training</h2><p>The Trainer did not run.</p>"
    epochs = [e["epoch"] for e in history]
    figure, (loss_axis, acc_axis, lr_axis) = plt.subplots(1, 3, figsize=(12, 3))
    for key, label in (("loss", "train"), ("val_loss", "eval")):
        loss_axis.plot(epochs, [e.get(key) for e in history], marker="o", label=label)
    for key, label in (("accuracy", "train"), ("val_accuracy", "eval")):
        acc_axis.plot(epochs, [e.get(key) for e in history], marker="o", label=label)
    lr_axis.plot(epochs, [e.get("learning_rate") for e in history], marker="o")
    for axis, title in ((loss_axis, "loss"), (acc_axis, "accuracy"),
                        (lr_axis, "learning rate at epoch end")):
        axis.set_title(title)
        axis.set_xlabel("epoch")
    loss_axis.legend()
    acc_axis.legend()
    rows = [[e["epoch"], f"{e['seconds']:.1f}", f"{e.get('loss', 0):.4f}",
             f"{e.get('accuracy', 0):.4f}", f"{e.get('val_accuracy', 0):.4f}",
             f"{e.get('learning_rate', 0):.4g}"] for e in history]
    setup = _table(["model", "strategy", "replicas", "per-replica batch", "global batch",
                    "epochs", "precision", "fit seconds", "resumed from epoch"],
                   [[facts.get(k) for k in ("model", "strategy", "replicas",
                                            "per_replica_batch_size", "global_batch_size",
                                            "epochs", "precision", "fit_seconds",
                                            "resumed_from_epoch")]])
    return (f"<h2>Training</h2>{setup}{_img(_png(figure), 'training curves')}"
            + _table(["epoch", "seconds", "loss", "accuracy", "eval accuracy",
                      "learning rate"], rows))


def evaluation_section(facts: dict, evals) -> str:
    import matplotlib.pyplot as plt
    import tensorflow as tf

    accuracy, gate = facts.get("eval_accuracy"), facts.get("accuracy_gate")
    header = (f"<h2>Evaluation</h2><p>Overall accuracy (TFMA, eval split): "
              f"<b>{'n/a' if accuracy is None else f'{100 * accuracy:.2f}%'}</b>"
              f" against the gate of {'n/a' if gate is None else f'{100 * gate:.0f}%'}</p>")
    model_dir = os.path.join(facts.get("artifacts", {}).get("model", ""), "Format-Serving")
    images, labels, serialized = evals
    if not os.path.exists(model_dir) or not serialized:
        return header + "<p>No trained model to evaluate.</p>"
    serve = tf.saved_model.load(model_dir).signatures["serving_examples"]
    probabilities = np.concatenate([serve(examples=tf.constant(serialized[i:i + 512]))
                                    ["probabilities"].numpy()
                                    for i in range(0, len(serialized), 512)])
    predicted = probabilities.argmax(1)
    confusion = np.zeros((10, 10), np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    per_class = confusion.diagonal() / np.maximum(confusion.sum(1), 1)
    figure, (bars, matrix) = plt.subplots(1, 2, figsize=(12, 4.5))
    bars.barh(LABEL_NAMES, per_class)
    bars.set_xlim(0, 1)
    bars.set_title("per-class accuracy")
    shown = matrix.imshow(confusion, cmap="Blues")
    matrix.set_xticks(range(10), LABEL_NAMES, rotation=60, fontsize=7)
    matrix.set_yticks(range(10), LABEL_NAMES, fontsize=7)
    matrix.set_xlabel("predicted")
    matrix.set_ylabel("true")
    matrix.set_title("confusion matrix")
    for (row, column), value in np.ndenumerate(confusion):
        matrix.text(column, row, str(value), ha="center", va="center", fontsize=6)
    figure.colorbar(shown, ax=matrix)
    wrong = np.flatnonzero(predicted != labels)
    worst = wrong[np.argsort(-probabilities[wrong].max(1))][:MISTAKES_SHOWN]
    captions = [f"{LABEL_NAMES[labels[i]]}->{LABEL_NAMES[predicted[i]]} "
                f"{100 * probabilities[i].max():.0f}%" for i in worst]
    mistakes = (_img(_png(_grid(images[worst], 8, captions, scale=1.3)), "confident mistakes")
                if len(worst) else "<p>No mistakes.</p>")
    rows = [[LABEL_NAMES[i], int(confusion[i].sum()), f"{100 * per_class[i]:.2f}%"]
            for i in range(10)]
    return (header + _img(_png(figure), "per-class accuracy and confusion matrix")
            + _table(["class", "eval records", "accuracy"], rows)
            + "<h3>Most confident mistakes</h3>" + mistakes)


def outcome_section(facts: dict) -> str:
    blessed = facts.get("blessed")
    verdict = ("BLESSED" if blessed else "NOT BLESSED") if blessed is not None else "not evaluated"
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in facts.get("gate_failures", []))
    pushed = facts.get("pushed_version_dir") if facts.get("pushed") else None
    stages = [[stage, f"{seconds:.1f}", facts.get("stage_states", {}).get(stage, "")]
              for stage, seconds in facts.get("stage_seconds", {}).items()]
    return (f"<h2>Outcome</h2><p class='{'ok' if blessed else 'bad'}'>{verdict}</p>"
            f"{f'<ul>{reasons}</ul>' if reasons else ''}"
            f"<p>Pushed: {html.escape(pushed) if pushed else 'nothing'}</p>"
            f"<p>Total: {facts.get('total_seconds', 'n/a')} s</p>"
            + _table(["stage", "seconds", "state"], stages))


STYLE = """body{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
font-size:13px}img{max-width:100%}.ok{color:#161}.bad{color:#a11;font-weight:bold}"""


def build_report(run_dir: Path) -> Path:
    """Writes `<run_dir>/report.html` from `run_summary.json` and the run's artifacts."""
    import matplotlib

    matplotlib.use("Agg")
    summary_path = run_dir / "run_summary.json"
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path}: no run summary; run the pipeline first")
    facts = json.loads(summary_path.read_text())
    examples = facts.get("artifacts", {}).get("examples")
    train = read_split(examples, "train") if examples else (np.zeros((0, 32, 32, 3)), np.zeros(0, int), [])
    evals = read_split(examples, "eval") if examples else (np.zeros((0, 32, 32, 3)), np.zeros(0, int), [])
    body = [outcome_section(facts), data_section(facts, train, evals), training_section(facts),
            evaluation_section(facts, evals)]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>CIFAR-10 run "
            f"{html.escape(str(facts.get('run_id', '')))}</title><style>{STYLE}</style></head>"
            f"<body><h1>CIFAR-10 pipeline run {html.escape(str(facts.get('run_id', '')))}</h1>"
            + "".join(body) + "</body></html>")
    target = run_dir / REPORT_FILE
    partial = target.with_suffix(".html.part")
    partial.write_text(page)
    partial.replace(target)
    return target
