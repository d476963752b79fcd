"""The facts of a local run as one typed record, `RunSummary`, read once from ML
Metadata and the artifacts it records, written to `run_summary.json`, and read back
(strictly: a missing or unknown field is an error) by the console summary, the
report, the benchmark and the tests.

Works for cached executions too: a cache hit reuses the earlier artifacts, so the
summary still reports their record counts, accuracy and pushed version. Nothing here
reads the data again: record counts come from the statistics artifact, accuracy,
per-class figures and the confusion matrix from TFMA's output.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.contract import (
    COMPARISON_FILE,
    EVAL_SPLIT,
    EVALUATOR_NODE,
    EXAMPLE_GEN_NODE,
    EXAMPLE_VALIDATOR_NODE,
    HISTORY_FILE,
    LABEL_NAMES,
    NO_NEW_SPAN_PROPERTY,
    NUM_CLASSES,
    PUSHER_NODE,
    REFERENCE_CHECK_FILE,
    SERVED_SPANS_FILE,
    STATISTICS_NODE,
    TRAIN_SPLIT,
    TRAINER_NODE,
    TRAINING_SUMMARY_FILE,
    VALIDATION_GATE_NODE,
)
from components.tfx_files import statistics_file
from components.trainer.training_summary import TrainingSummary, strict_from_json
from pipeline.common.files import write_atomically

SUMMARY_FILE = "run_summary.json"
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


@dataclass(frozen=True)
class Push:
    pushed: bool
    pushed_version_dir: str | None
    pushed_new_version: bool


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    record_counts: dict[str, int]  # split -> records, from the statistics artifact
    stage_seconds: dict[str, float]  # node id -> seconds, in execution order
    stage_states: dict[str, str]  # node id -> complete, cached, failed, ...
    artifacts: dict[str, str]  # examples, statistics, anomalies, model -> URI
    training: TrainingSummary | None = None
    history: list[dict[str, float]] = field(default_factory=list)  # one entry per epoch
    model_run_dir: str | None = None
    evaluation: Evaluation | None = None
    blessed: bool | None = None
    push: Push | None = None
    # Filled in by the runner once the pipeline has stopped.
    total_seconds: float | None = None
    log_file: str | None = None
    failed: str | None = None  # "ErrorType: message" of a failed run
    source: str | None = None
    accuracy_gate: float | None = None
    # DataValidationGate's comparison.json: skew and drift, every distance with its threshold,
    # and whether drift was accepted (--accept-drift). None where the gate did not pass.
    data_comparison: dict[str, Any] | None = None
    # The span numbers ingested (0: a plain source), the served version folder the Trainer
    # warm-started from (None: from scratch), and how the run ended: pushed, not_blessed,
    # data_invalid, drift, no_new_span, or error.
    spans: list[int] = field(default_factory=list)
    warm_start_from: str | None = None
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Flat JSON, record counts and stage times first; the training and evaluation
        fields sit at the top level, and are absent when that step did not run."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        flat: dict[str, Any] = {
            "record_counts": values.pop("record_counts"),
            "stage_seconds": values.pop("stage_seconds"),
        }
        for name in ("training", "evaluation", "push"):
            part = values.pop(name)
            if part is not None:
                flat.update(dataclasses.asdict(part))
        flat.update(values)
        return flat

    @classmethod
    def from_json(cls, values: dict[str, Any], where: str = SUMMARY_FILE) -> RunSummary:
        values = dict(values)
        parts: dict[str, Any] = {}
        for name, part_type in (
            ("training", TrainingSummary),
            ("evaluation", Evaluation),
            ("push", Push),
        ):
            names = [f.name for f in dataclasses.fields(part_type)]
            present = [n for n in names if n in values]
            if present:
                parts[name] = strict_from_json(
                    part_type, {n: values.pop(n) for n in present}, f"{where} ({name})"
                )
        if "evaluation" in parts:
            evaluation = parts["evaluation"]
            parts["evaluation"] = dataclasses.replace(
                evaluation,  # JSON object keys are strings
                per_class_accuracy={int(k): v for k, v in evaluation.per_class_accuracy.items()},
                per_class_eval_records={
                    int(k): v for k, v in evaluation.per_class_eval_records.items()
                },
            )
        return strict_from_json(cls, {**values, **parts}, where)

    def write(self, output_dir: Path) -> Path:
        """Writes `<output_dir>/run_summary.json` atomically."""
        return write_atomically(
            output_dir / SUMMARY_FILE, json.dumps(self.to_json(), indent=1, default=str)
        )

    @classmethod
    def load(cls, output_dir: Path) -> RunSummary:
        path = output_dir / SUMMARY_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path}: no run summary; run the pipeline first")
        return cls.from_json(json.loads(path.read_text()), str(path))


def _read_json(path: str) -> Any:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def record_counts(statistics_uri: str) -> dict[str, int]:
    """Records per split, as StatisticsGen counted them."""
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import statistics_pb2

    counts = {}
    for split in (TRAIN_SPLIT, EVAL_SPLIT):
        path = statistics_file(statistics_uri, split)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path, "rb") as handle:
                stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(handle.read())
            counts[split] = sum(int(d.num_examples) for d in stats.datasets)
    return counts


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
    found = _read_json(os.path.join(evaluation_uri, REFERENCE_CHECK_FILE))
    if found is None:
        return None, []
    if "not_checked" in found:
        return f"not checked: {found['not_checked']}", []
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


@dataclass
class _RecordedRun:
    """What ML Metadata holds of one pipeline run, per node."""

    run_id: str
    stage_seconds: dict[str, float]
    stage_states: dict[str, str]
    outputs: dict[str, dict[str, Any]]

    def output(self, node: str, key: str):
        return self.outputs.get(node, {}).get(key)


def _latest_run_context(store):
    runs = store.get_contexts_by_type("pipeline_run")
    if not runs:
        raise RuntimeError("the metadata store holds no pipeline run")
    return max(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def _outputs_of(store, execution_id: int) -> dict[str, Any]:
    from ml_metadata.proto import metadata_store_pb2

    events = [
        e
        for e in store.get_events_by_execution_ids([execution_id])
        if e.type == metadata_store_pb2.Event.OUTPUT
    ]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    return {e.path.steps[0].key: artifacts[e.artifact_id] for e in events if e.path.steps}


def _recorded_run(metadata_path: str) -> _RecordedRun:
    """The latest run in the SQLite store at `metadata_path`: each node's duration, final
    state and output artifacts."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration import metadata

    state_names = {v: k.lower() for k, v in metadata_store_pb2.Execution.State.items()}
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(metadata_path)) as m:
        store = m.store
        run = _latest_run_context(store)
        node_contexts = {c.id: c.name.split(".", 1)[-1] for c in store.get_contexts_by_type("node")}
        recorded = _RecordedRun(run.name, {}, {}, {})
        for execution in sorted(store.get_executions_by_context(run.id), key=lambda e: e.id):
            node = next(
                (
                    node_contexts[c.id]
                    for c in store.get_contexts_by_execution(execution.id)
                    if c.id in node_contexts
                ),
                "unknown",
            )
            recorded.stage_seconds[node] = round(
                (execution.last_update_time_since_epoch - execution.create_time_since_epoch)
                / 1000.0,
                1,
            )
            recorded.stage_states[node] = state_names.get(execution.last_known_state, "unknown")
            recorded.outputs[node] = _outputs_of(store, execution.id)
    return recorded


def _custom_property(artifact, key: str):
    value = artifact.custom_properties.get(key)
    if value is None:
        return None
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _training_facts(model_run) -> tuple[TrainingSummary | None, list, str | None]:
    """The Trainer's summary and history from its model_run folder, when it got that far."""
    if model_run is None:
        return None, [], None
    path = os.path.join(model_run.uri, TRAINING_SUMMARY_FILE)
    written = _read_json(path)
    training = TrainingSummary.from_json(written, path) if written is not None else None
    history = _read_json(os.path.join(model_run.uri, HISTORY_FILE)) or []
    return training, history, model_run.uri


def collect(metadata_path: str) -> RunSummary:
    """Summary of the latest run recorded in the SQLite store at `metadata_path`."""
    recorded = _recorded_run(metadata_path)
    output, prop = recorded.output, _custom_property
    artifact_uris = {
        name: output(node, key).uri
        for name, (node, key) in {
            "examples": (EXAMPLE_GEN_NODE, "examples"),
            "statistics": (STATISTICS_NODE, "statistics"),
            "anomalies": (EXAMPLE_VALIDATOR_NODE, "anomalies"),
            "model": (TRAINER_NODE, "model"),
            "comparison": (VALIDATION_GATE_NODE, "comparison"),
        }.items()
        if output(node, key) is not None
    }
    training, history, model_run_dir = _training_facts(output(TRAINER_NODE, "model_run"))
    evaluation = output(EVALUATOR_NODE, "evaluation")
    blessing = output(EVALUATOR_NODE, "blessing")
    pushed = output(PUSHER_NODE, "pushed_model")
    examples = output(EXAMPLE_GEN_NODE, "examples")
    nothing_new = examples is not None and bool(prop(examples, NO_NEW_SPAN_PROPERTY))
    return RunSummary(
        run_id=recorded.run_id,
        record_counts=record_counts(artifact_uris["statistics"])
        if "statistics" in artifact_uris
        else {},
        stage_seconds=recorded.stage_seconds,
        stage_states=recorded.stage_states,
        artifacts=artifact_uris,
        data_comparison=_read_json(os.path.join(artifact_uris["comparison"], COMPARISON_FILE))
        if "comparison" in artifact_uris
        else None,
        spans=(_read_json(os.path.join(artifact_uris["examples"], SERVED_SPANS_FILE)) or {}).get(
            "spans", []
        )
        if "examples" in artifact_uris
        else [],
        warm_start_from=training.warm_start_source if training else None,
        training=training,
        history=history,
        model_run_dir=model_run_dir,
        evaluation=evaluation_facts(evaluation.uri)
        if evaluation is not None and not nothing_new
        else None,
        blessed=bool(prop(blessing, "blessed")) if blessing is not None else None,
        push=None
        if pushed is None
        else Push(
            pushed=bool(prop(pushed, "pushed")),
            pushed_version_dir=prop(pushed, "pushed_destination") or None,
            pushed_new_version=bool(prop(pushed, "new_version")),
        ),
        outcome="no_new_span" if nothing_new else None,
    )
