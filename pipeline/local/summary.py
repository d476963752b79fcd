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
import types
import typing
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
    NO_NEW_SPAN_PROPERTY,
    PUSHER_NODE,
    SERVED_SPANS_FILE,
    STATISTICS_NODE,
    TRAIN_SPLIT,
    TRAINER_NODE,
    TRAINING_SUMMARY_FILE,
    VALIDATION_GATE_NODE,
)
from components.storage.tfx_files import statistics_file
from components.trainer.training_summary import TrainingSummary, strict_from_json
from pipeline.common.files import write_atomically
from pipeline.local.evaluation import Evaluation, evaluation_facts, read_json

SUMMARY_FILE = "run_summary.json"


@dataclass(frozen=True)
class Push:
    pushed: bool
    pushed_version_dir: str | None
    pushed_new_version: bool
    # Why nothing was pushed when another version was served meanwhile (outcome
    # served_changed), else None.
    served_changed: str | None = None
    # How the staged version's load test went (components/serving/load_test.py):
    # "passed: ... in N s", "skipped: ..."; None when nothing was staged.
    load_test: str | None = None


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
    # data_invalid, drift, labels, duplicates, served_changed, load_test_failed, no_new_span,
    # or failed (in `failed_step`). `notification`: whether the night's report reached
    # --notify's webhook.
    spans: list[int] = field(default_factory=list)
    warm_start_from: str | None = None
    outcome: str | None = None
    failed_step: str | None = None
    notification: str | None = None

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
        """Strict: a missing, unknown or wrongly typed field is a `SummaryError` naming it."""
        if not isinstance(values, dict):
            raise SummaryError(f"{where}: not a run summary (a JSON {type(values).__name__})")
        required = _required_fields(cls)
        if not required & set(values):
            raise SummaryError(
                f"{where}: not a run summary (none of {', '.join(sorted(required))})"
            )
        values = dict(values)
        parts: dict[str, Any] = {}
        for name, part_type in (
            ("training", TrainingSummary),
            ("evaluation", Evaluation),
            ("push", Push),
        ):
            names = [f.name for f in dataclasses.fields(part_type)]
            present = {n: values.pop(n) for n in names if n in values}
            if present:
                parts[name] = _strictly(part_type, present, f"{where} ({name})")
        if "evaluation" in parts:
            evaluation = parts["evaluation"]
            parts["evaluation"] = dataclasses.replace(
                evaluation,  # JSON object keys are strings
                per_class_accuracy={int(k): v for k, v in evaluation.per_class_accuracy.items()},
                per_class_eval_records={
                    int(k): v for k, v in evaluation.per_class_eval_records.items()
                },
            )
        return _strictly(cls, {**values, **parts}, where)

    def write(self, output_dir: Path) -> Path:
        """Writes `<output_dir>/run_summary.json` atomically."""
        return write_atomically(
            output_dir / SUMMARY_FILE, json.dumps(self.to_json(), indent=1, default=str)
        )

    @classmethod
    def load(cls, output_dir: Path) -> RunSummary:
        """FileNotFoundError where the folder holds no summary, SummaryError where it holds
        one that cannot be read: each names the folder or file and the problem."""
        path = output_dir / SUMMARY_FILE
        if output_dir.exists() and not output_dir.is_dir():
            raise SummaryError(f"{output_dir}: not a folder")
        if not path.exists():
            raise FileNotFoundError(f"{path}: no run summary; run the pipeline first")
        try:
            values = json.loads(path.read_bytes())
        except OSError as err:
            raise SummaryError(f"{path}: cannot read it ({err.strerror or err})") from None
        except ValueError as err:  # JSONDecodeError, or bytes that are not UTF-8 text
            where = f", line {err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
            raise SummaryError(f"{path}: damaged, not JSON{where}") from None
        return cls.from_json(values, str(path))


class SummaryError(ValueError):
    """A run summary that cannot be read: outdated, damaged or not one at all."""


def _required_fields(cls: type) -> set[str]:
    return {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }


def _strictly(cls: type, values: dict[str, Any], where: str):
    """`cls(**values)` after every field is checked: present, known, and of the kind of
    JSON value this version writes there."""
    try:
        record = strict_from_json(cls, values, where)
    except ValueError as err:
        raise SummaryError(
            f"{err}: written by another version of the pipeline; `cifar10-pipeline run` "
            "writes a new one"
        ) from None
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if not _fits(value, hints[name]):
            shown = json.dumps(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise SummaryError(f"{where}: damaged: {name} cannot be {shown}")
    return record


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of the kind `hint` declares: numbers for int and float, and
    so on into lists and objects (whose keys are text, digits for int keys); a dataclass
    is checked on its own."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if origin is dict:
        return isinstance(value, dict) and all(
            (args[0] is not int or str(key).lstrip("-").isdigit()) and _fits(item, args[1])
            for key, item in value.items()
        )
    if origin in (list, tuple):
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if hint in (int, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    return True  # Any, and the parts (dataclasses)


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
    written = read_json(path)
    training = TrainingSummary.from_json(written, path) if written is not None else None
    history = read_json(os.path.join(model_run.uri, HISTORY_FILE)) or []
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
        data_comparison=read_json(os.path.join(artifact_uris["comparison"], COMPARISON_FILE))
        if "comparison" in artifact_uris
        else None,
        spans=(read_json(os.path.join(artifact_uris["examples"], SERVED_SPANS_FILE)) or {}).get(
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
            served_changed=prop(pushed, "served_changed") or None,
            load_test=prop(pushed, "load_test") or None,
        ),
        outcome="no_new_span" if nothing_new else None,
    )
