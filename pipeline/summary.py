"""The facts of a local run, read back from ML Metadata and the artifacts it records.

Works for cached executions too: a cache hit reuses the earlier artifacts, so the
summary still reports their record counts, accuracy and pushed version.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2
from tfx.orchestration import metadata

from components.trainer.run import HISTORY_FILE, TRAINING_SUMMARY_FILE

_STATE_NAMES = {v: k.lower() for k, v in metadata_store_pb2.Execution.State.items()}


def _latest_run_context(store: mlmd.MetadataStore) -> metadata_store_pb2.Context:
    runs = store.get_contexts_by_type("pipeline_run")
    if not runs:
        raise RuntimeError("the metadata store holds no pipeline run")
    return max(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def _node_id(store: mlmd.MetadataStore, execution_id: int, node_contexts) -> str:
    for context in store.get_contexts_by_execution(execution_id):
        if context.id in node_contexts:
            return node_contexts[context.id]
    return "unknown"


def _read_json(path: str) -> Any:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def _count_records(examples_uri: str, split: str) -> int:
    import tensorflow as tf

    files = tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*"))
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


def _outputs(store, execution_id: int) -> dict[str, metadata_store_pb2.Artifact]:
    events = [e for e in store.get_events_by_execution_ids([execution_id])
              if e.type == metadata_store_pb2.Event.OUTPUT]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    return {e.path.steps[0].key: artifacts[e.artifact_id] for e in events if e.path.steps}


def _prop(artifact: metadata_store_pb2.Artifact, key: str):
    value = artifact.custom_properties.get(key)
    if value is None:
        return None
    return value.WhichOneof("value") and getattr(value, value.WhichOneof("value"))


def collect(metadata_path: str) -> dict[str, Any]:
    """Summary of the latest run recorded in the SQLite store at `metadata_path`."""
    with metadata.Metadata(metadata.sqlite_metadata_connection_config(metadata_path)) as m:
        store = m.store
        run = _latest_run_context(store)
        node_contexts = {c.id: c.name.split(".", 1)[-1] for c in store.get_contexts_by_type("node")}
        executions = sorted(store.get_executions_by_context(run.id), key=lambda e: e.id)
        stages: dict[str, float] = {}
        states: dict[str, str] = {}
        outputs: dict[str, dict] = {}
        for execution in executions:
            node = _node_id(store, execution.id, node_contexts)
            seconds = (execution.last_update_time_since_epoch
                       - execution.create_time_since_epoch) / 1000.0
            stages[node] = round(seconds, 1)
            states[node] = _STATE_NAMES.get(execution.last_known_state, "unknown")
            outputs[node] = _outputs(store, execution.id)

    summary: dict[str, Any] = {"record_counts": {}, "stage_seconds": stages,
                               "stage_states": states, "run_id": run.name}
    examples = outputs.get("Cifar10ExampleGen", {}).get("examples")
    if examples is not None:
        summary["record_counts"] = {s: _count_records(examples.uri, s) for s in ("train", "eval")}
    artifact_uris = {"examples": ("Cifar10ExampleGen", "examples"),
                     "statistics": ("StatisticsGen", "statistics"),
                     "anomalies": ("ExampleValidator", "anomalies"),
                     "model": ("Trainer", "model")}
    summary["artifacts"] = {name: outputs[node][key].uri for name, (node, key)
                            in artifact_uris.items() if key in outputs.get(node, {})}
    model = outputs.get("Trainer", {}).get("model_run")
    if model is not None:
        training = _read_json(os.path.join(model.uri, TRAINING_SUMMARY_FILE)) or {}
        summary.update({k: training.get(k) for k in (
            "model", "strategy", "replicas", "per_replica_batch_size", "global_batch_size",
            "epochs", "resumed_from_epoch", "checkpoint_fallback", "precision",
            "precision_reason", "hardware", "load_seconds", "fit_seconds", "export_seconds",
            "trainer_seconds")})
        summary["history"] = _read_json(os.path.join(model.uri, HISTORY_FILE)) or []
        summary["model_run_dir"] = model.uri
    evaluation = outputs.get("Evaluator", {}).get("evaluation")
    blessing = outputs.get("Evaluator", {}).get("blessing")
    if evaluation is not None:
        summary.update(evaluation_facts(evaluation.uri))
    if blessing is not None:
        summary["blessed"] = bool(_prop(blessing, "blessed"))
    pushed = outputs.get("AtomicPusher", {}).get("pushed_model")
    if pushed is not None:
        summary["pushed"] = bool(_prop(pushed, "pushed"))
        summary["pushed_version_dir"] = _prop(pushed, "pushed_destination") or None
        summary["pushed_new_version"] = bool(_prop(pushed, "new_version"))
    return summary


def evaluation_facts(evaluation_uri: str) -> dict[str, Any]:
    """Overall and per-class accuracy, and why validation failed, from a TFMA output."""
    import tensorflow_model_analysis as tfma

    facts: dict[str, Any] = {"eval_accuracy": None, "baseline_accuracy": None,
                             "per_class_accuracy": {}, "gate_failures": []}
    result = tfma.load_eval_result(evaluation_uri)
    for slice_key, by_output in result.slicing_metrics:
        values = by_output.get("", {}).get("", {})
        accuracy = values.get("sparse_categorical_accuracy", {})
        if not slice_key:
            facts["eval_accuracy"] = accuracy.get("doubleValue")
            diff = values.get("sparse_categorical_accuracy_diff", {}).get("doubleValue")
            if diff is not None and facts["eval_accuracy"] is not None:
                facts["baseline_accuracy"] = facts["eval_accuracy"] - diff
        elif slice_key[0][0] == "label":
            facts["per_class_accuracy"][int(slice_key[0][1])] = accuracy.get("doubleValue")
    validation = tfma.load_validation_result(evaluation_uri)
    for per_slice in validation.metric_validations_per_slice:
        for failure in per_slice.failures:
            facts["gate_failures"].append(
                f"{failure.metric_key.name}{' vs baseline' if failure.metric_key.is_diff else ''}"
                f" = {failure.metric_value.double_value.value:.4f} fails {failure.message or ''}"
                f"{_threshold_text(failure.metric_threshold)}")
    return facts


def _threshold_text(threshold) -> str:
    if threshold.HasField("value_threshold"):
        bound = threshold.value_threshold.lower_bound.value
        return f"the accuracy gate (>= {bound:.4f})"
    if threshold.HasField("change_threshold"):
        allowed = threshold.change_threshold.absolute.value
        return f"the no-regression check (change >= {allowed:+.4f})"
    return "a threshold"
