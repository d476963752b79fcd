"""`make bench` pieces that can break without anyone noticing until a long run:
the time-to-accuracy arithmetic and the throughput probe's input variants."""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import bench, recipe_trial
from components.trainer import model
from components.trainer.training_summary import TrainingSummary
from pipeline.local.evaluation import Evaluation
from pipeline.local.summary import RunSummary

REPO_ROOT = Path(__file__).resolve().parents[1]


def _summary(val_accuracies: list[float]) -> RunSummary:
    training = TrainingSummary(
        model="airbench",
        strategy="default",
        replicas=1,
        per_replica_batch_size=512,
        global_batch_size=512,
        epochs=len(val_accuracies),
        resumed_from_epoch=0,
        checkpoint_fallback=None,
        learning_rate=0.4,
        precision="float32",
        precision_reason="CPU X: no native bf16",
        hardware={},
        train_records=45000,
        eval_records=5000,
        forward_flops_per_image=40_000_000,
        training_images_seen=45_000,
        training_flops=5_400_000_000_000,
        load_seconds=4.0,
        fit_seconds=270.0,
        export_seconds=12.0,
        trainer_seconds=300.0,
        final_eval_accuracy_without_tta=val_accuracies[-1],
    )
    return RunSummary(
        run_id="run",
        record_counts={"train": 45000, "eval": 5000},
        stage_seconds={
            "Cifar10ExampleGen": 30.0,
            "ImportSchemaGen": 0.1,
            "StatisticsGen": 7.0,
            "ExampleValidator": 0.1,
            "DataValidationGate": 0.1,
            "Trainer": 300.0,
            "Evaluator": 10.0,
            "AtomicPusher": 0.0,
        },
        stage_states={},
        artifacts={},
        training=training,
        blessed=True,
        history=[
            {"epoch": i + 1, "seconds": 22.0, "val_accuracy": acc}
            for i, acc in enumerate(val_accuracies)
        ],
    )


def test_time_to_accuracy_is_stages_then_trainer_startup_then_epochs():
    summary = _summary([0.5, 0.79, 0.81, 0.85])
    # 37.3 s of stages before the Trainer, 18 s of Trainer startup (300 - 270 - 12), 3 epochs.
    assert bench.time_to_accuracy(summary, 0.80) == pytest.approx(37.3 + 18.0 + 66.0)
    assert bench.time_to_accuracy(summary, 0.90) is None


def test_training_flops_to_accuracy_counts_whole_epochs_and_the_evaluator_last():
    # 5.4e12 training FLOPs over 4 epochs: 1.35e12 each.
    assert bench.training_flops_to_accuracy(_summary([0.5, 0.79, 0.85, 0.86]), 0.84) == (
        pytest.approx(3 * 1.35e12)
    )
    below = _summary([0.5, 0.79, 0.81, 0.83])
    assert bench.training_flops_to_accuracy(below, 0.84) is None
    # The last epoch without test-time augmentation missed; the Evaluator's 84.1% reached it.
    evaluated = dataclasses.replace(below, evaluation=Evaluation(0.841, None, {}, {}, [], []))
    assert bench.training_flops_to_accuracy(evaluated, 0.84) == pytest.approx(5.4e12)


def test_render_reports_probe_and_pipeline_rows():
    summary = _summary([0.5, 0.81])
    run = {
        "summary": summary.to_json(),
        "wall_seconds": 400.0,
        "exit_status": 0,
        "time_to_80_seconds": bench.time_to_accuracy(summary, 0.80),
        "training_flops_to_84": None,
    }
    results = {
        "classic": {
            "epochs": 3,
            "images_per_epoch_measured": 45000,
            "median_seconds_per_epoch": 54.0,
            "seconds_per_50k_epoch": 60.0,
            "eval_accuracy": 0.33,
            "projected_full_run_seconds": 3000.0,
        },
        "probe": {
            "settings": {
                "default": {
                    "images_per_second": 2000.0,
                    "relative_to_default": 1.0,
                    "first_step_seconds": 1.0,
                }
            }
        },
        "pipeline": run,
        "peak": {
            "precision": "float32",
            "precision_reason": "CPU X: no native bf16",
            "hardware": {"cpu_model": "X", "cpu_flags": ["avx2"]},
            "conv3x3_gflops": 100.0,
            "matmul_gflops": 110.0,
            "training_flops_per_image": 120e6,
        },
        "recipe_serving": {"airbench94": "6 views\none image p50 9.00 ms"},
    }
    table = bench.render(results)
    assert "serving (CPU), recipe airbench94:\n6 views\none image p50 9.00 ms" in table
    assert "300.0 = 4.0 + 14.0 + 270.0 + 12.0" in table
    # 2,000 images/s x 120 MFLOP = 240 GFLOP/s against a 100 GFLOP/s conv.
    assert "240 = 120 MFLOP x 2000 img/s" in table and "2.40" in table
    # The pipeline's own fit: 5.4e12 FLOPs in 270 s = 20 GFLOP/s, 0.20 of the conv.
    assert "20 = 5.4e+12 / 270.0 s" in table
    assert re.search(r"pipeline fit / conv throughput \(goal >= 0.70\) +0.20\n", table)
    # 400 s against 60 s per epoch of 50,000 images.
    assert re.search(r"classic-recipe epochs of 50,000 images \(goal <= 5\) +6.7\n", table)
    assert "2000 (1.00x; 1.0)" in table
    assert re.search(r"training FLOPs to 84% eval accuracy +not reached\n", table)
    assert f"{(37.3 + 18.0 + 44.0) / 3000.0:.3f}" in table


@pytest.mark.integration
@pytest.mark.parametrize("input_kind", ["cached", "fixed", "tfrecord"])
def test_throughput_probe_measures_each_input(tmp_path, input_kind):
    rng = np.random.default_rng(0)
    arrays = {
        "train": (
            rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8),
            rng.integers(0, 10, 64).astype(np.int64),
        )
    }
    npz, records = bench._write_probe_inputs(arrays, tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.throughput",
            "--arrays",
            str(npz),
            "--tfrecords",
            str(records),
            "--steps",
            "2",
            "--batch",
            "16",
            "--input",
            input_kind,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    # the one JSON line `make bench` reads, exactly these keys
    assert sorted(measured) == ["first_step_seconds", "images_per_second", "steps"]


@pytest.mark.integration
def test_peak_probe_reports_conv_and_matmul_throughput():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.peak", "--precision", "float32", "--min-seconds", "0.1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["precision"] == "float32"
    assert {"conv3x3_gflops", "matmul_gflops", "python_seconds"} <= set(measured)  # bench reads
    assert measured["python_seconds"] > 0


def test_recipe_validation_slice_is_class_balanced_and_fixed():
    labels = np.repeat(np.arange(10), 90)[np.random.default_rng(0).permutation(900)]
    mask = recipe_trial.validation_mask(labels)
    assert mask.sum() == 100
    assert all(np.sum(mask & (labels == c)) == 10 for c in range(10))
    np.testing.assert_array_equal(mask, recipe_trial.validation_mask(labels))


def test_trial_split_holds_out_the_slice_or_scores_the_eval_carve():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 90)
    images = rng.integers(0, 256, (900, 32, 32, 3), dtype=np.uint8)
    carve = (images[:20], labels[:20])
    arrays = {"train": (images, labels), "eval": carve}
    mask = recipe_trial.validation_mask(labels)
    (train, _), (scored, _) = recipe_trial.trial_split(arrays, False)
    np.testing.assert_array_equal(train, images[~mask])
    np.testing.assert_array_equal(scored, images[mask])
    assert len(scored) == 100
    (train, _), (scored, scored_labels) = recipe_trial.trial_split(arrays, True)
    assert len(train) == 900 and scored is carve[0] and scored_labels is carve[1]


def test_recipe_overrides_are_typed_and_unknown_fields_refused():
    recipe = model.RECIPES["airbench"]
    assert recipe_trial._parse_override(recipe, "widths=32,64,128") == ("widths", (32, 64, 128))
    assert recipe_trial._parse_override(recipe, "lookahead=false") == ("lookahead", False)
    assert recipe_trial._parse_override(recipe, "epochs=6") == ("epochs", 6)
    with pytest.raises(SystemExit, match="no recipe field 'depth'"):
        recipe_trial._parse_override(recipe, "depth=3")


def test_on_paper_tpu_efficiency_is_compute_over_compute_plus_ring_allreduce():
    from benchmarks import scaling

    tpu = scaling.Tpu("t", core_tflops=10.0, utilisation=0.5, link_gbytes=1.0, hop_microseconds=10)
    result = scaling.efficiency(
        tpu, 4, forward_flops=1e6, gradient_bytes=1_000_000, per_core_batch=100
    )
    compute = 3 * 1e6 * 100 / 5e12  # 0.06 ms
    allreduce = 6 / 4 * 1e6 / 1e9 + 6 * 10e-6  # 1.5 ms of bandwidth, 0.06 ms of hops
    assert result["compute_ms"] == round(compute * 1e3, 3)
    assert result["allreduce_ms"] == round(allreduce * 1e3, 3)
    assert result["efficiency"] == round(compute / (compute + allreduce), 3)
    assert scaling.efficiency(tpu, 32, 1e6, 1_000_000)["efficiency"] < result["efficiency"]
