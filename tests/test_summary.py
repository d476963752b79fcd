"""The run summary is one typed record: it round-trips through run_summary.json, and a
missing or unknown field is an error that names it, never a silent "n/a"."""

import json

import pytest

from components.trainer.training_summary import TrainingSummary
from pipeline.local.evaluation import (
    CONFUSION_PLOT,
    Evaluation,
    class_accuracy,
    confusion_matrix,
)
from pipeline.local.summary import Push, RunSummary

TRAINING = TrainingSummary(
    model="airbench",
    strategy="default",
    replicas=1,
    per_replica_batch_size=512,
    global_batch_size=512,
    epochs=12,
    resumed_from_epoch=0,
    checkpoint_fallback=None,
    learning_rate=0.4,
    precision="float32",
    precision_reason="CPU X: no native bf16",
    hardware={"cpu_flags": []},
    train_records=45022,
    eval_records=4978,
    forward_flops_per_image=40_034_114,
    training_images_seen=540_672,
    training_flops=64_935_000_000_000,
    load_seconds=3.1,
    fit_seconds=258.1,
    export_seconds=5.5,
    trainer_seconds=269.3,
    final_eval_accuracy_without_tta=0.85,
)
SUMMARY = RunSummary(
    run_id="2026-11-30T04:00:00",
    record_counts={"train": 45022, "eval": 4978},
    stage_seconds={"Cifar10ExampleGen": 32.5, "Trainer": 269.4},
    stage_states={"Cifar10ExampleGen": "complete", "Trainer": "complete"},
    artifacts={"examples": "/x/examples"},
    training=TRAINING,
    history=[{"epoch": 1, "seconds": 22.1, "val_accuracy": 0.5}],
    evaluation=Evaluation(
        0.8574, None, {0: 0.9, 1: 0.8}, {0: 498, 1: 497}, [[1] * 10 for _ in range(10)], []
    ),
    blessed=True,
    push=Push(True, "/x/serving/cifar10/1", True),
    total_seconds=359.0,
)


def test_round_trip_through_json_keeps_every_field(tmp_path):
    SUMMARY.write(tmp_path)
    written = json.loads((tmp_path / "run_summary.json").read_text())
    assert list(written)[:2] == ["record_counts", "stage_seconds"]
    # the keys users read stay at the top level
    assert written["eval_accuracy"] == 0.8574 and written["epochs"] == 12
    assert written["pushed_version_dir"] == "/x/serving/cifar10/1"
    assert RunSummary.load(tmp_path) == SUMMARY


def test_a_run_that_stopped_early_has_no_training_or_evaluation(tmp_path):
    stopped = RunSummary(
        run_id="r",
        record_counts={},
        stage_seconds={},
        stage_states={},
        artifacts={},
        failed="SourceError: bad archive",
    )
    stopped.write(tmp_path)
    written = json.loads((tmp_path / "run_summary.json").read_text())
    assert "eval_accuracy" not in written and "epochs" not in written
    assert RunSummary.load(tmp_path) == stopped


def test_missing_and_unknown_fields_are_errors_that_name_them(tmp_path):
    values = SUMMARY.to_json()
    del values["fit_seconds"]
    with pytest.raises(ValueError, match="missing fit_seconds"):
        RunSummary.from_json(values)
    values = {**SUMMARY.to_json(), "eval_acuracy": 0.9}
    with pytest.raises(ValueError, match="unknown eval_acuracy"):
        RunSummary.from_json(values)
    with pytest.raises(FileNotFoundError, match="no run summary"):
        RunSummary.load(tmp_path)


def test_the_console_summary_names_workers_and_the_all_reduce():
    import dataclasses

    from pipeline.local import report_text

    multi = dataclasses.replace(
        TRAINING,
        strategy="multi_worker",
        workers=2,
        replicas=2,
        step_seconds=0.46,
        allreduce_seconds=0.01,
        gradient_bytes=1_177_344,
    )
    text = report_text.render(dataclasses.replace(SUMMARY, training=multi))
    assert "multi_worker strategy, 2 worker(s), 2 replica(s)" in text
    assert "0.46s a step, all-reduce 10.0 ms of 1,177,344 bytes" in text
    assert "all-reduce" not in report_text.render(SUMMARY)  # one replica: nothing to reduce


def _plots(entries, sliced_entries=()):
    """EvalResult.plots as TFMA loads them: (slice key, output -> sub key -> plot JSON)."""

    def plot(found):
        return {"": {"": {CONFUSION_PLOT: {"matrices": [{"threshold": 0.0, "entries": found}]}}}}

    return [((), plot(entries)), ((("label", 3),), plot(list(sliced_entries)))]


def test_per_class_accuracy_is_read_off_the_confusion_matrix_rows():
    # proto3 JSON leaves out zero ids; -1 is TFMA's "no predicted class"
    entries = [
        {"numWeightedExamples": 3.0},  # class 0 -> 0
        {"predictedClassId": 2, "numWeightedExamples": 1.0},  # class 0 -> 2
        {"actualClassId": 2, "predictedClassId": 2, "numWeightedExamples": 2.0},
        {"actualClassId": 2, "numWeightedExamples": 6.0},  # class 2 -> 0
        {"actualClassId": 2, "predictedClassId": -1, "numWeightedExamples": 2.0},
    ]
    # a slice by label (older evaluations) must not be counted again
    confusion, records = confusion_matrix(_plots(entries, sliced_entries=entries))
    assert confusion[0] == [3, 0, 1] + [0] * 7 and confusion[2] == [6, 0, 2] + [0] * 7
    assert records[:3] == [4, 0, 10]
    accuracy, per_class_records = class_accuracy(confusion, records)
    assert accuracy == {0: 0.75, 2: 0.2}  # by row (true class), not by column
    assert per_class_records == {0: 4, 2: 10}  # classes without records are left out
