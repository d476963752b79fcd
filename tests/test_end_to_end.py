"""The whole local pipeline through the CLI on a tiny generated archive: a blessed push,
predict in a fresh CPU-only process, a rerun on the served data that trains nothing, reruns
that reuse what a config change leaves valid, an undertrained model that the gate refuses,
data that fails validation, and a corrupt archive."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.local.summary import RunSummary

import cifar_fixtures as fx
from conftest import FAST_TRAINING as FAST
from conftest import PIPELINE_NODES, cli, versions

pytestmark = pytest.mark.integration  # full pipeline runs in subprocesses


def test_run_blesses_and_pushes_with_a_full_summary(first_run):
    out, summary, done = first_run
    assert list(summary)[:2] == ["record_counts", "stage_seconds"]
    assert summary["record_counts"] == {"train": 1080, "eval": 120}
    assert set(PIPELINE_NODES) <= set(summary["stage_seconds"])
    assert summary["strategy"] == "default" and summary["replicas"] == 1
    assert summary["global_batch_size"] == 64 and summary["epochs"] == 3
    assert summary["eval_accuracy"] >= 0.5  # the gate it was blessed at
    confusion = np.array(summary["confusion_matrix"])
    assert summary["eval_accuracy"] == pytest.approx(
        np.trace(confusion) / confusion.sum(), abs=1e-3
    )
    assert len(summary["per_class_accuracy"]) == 10
    # read off the confusion matrix, weighted by class they give TFMA's own overall accuracy
    weighted = sum(
        summary["per_class_accuracy"][c] * summary["per_class_eval_records"][c]
        for c in summary["per_class_accuracy"]
    )
    assert weighted / 120 == pytest.approx(summary["eval_accuracy"], abs=1e-6)
    assert summary["blessed"] is True
    pushed = Path(summary["pushed_version_dir"])
    assert pushed.parent == out / "serving" / "cifar10" and (pushed / "saved_model.pb").exists()
    assert (pushed / "assets.extra" / "reference_images.npz").exists()  # its eval images
    assert "BLESSED" in done.stdout and str(pushed) in done.stdout
    # the console has the per-component lines; TensorFlow's own INFO lines go to the log file
    assert "INFO:tensorflow" not in done.stderr
    assert "Unable to register" not in done.stderr  # TensorFlow's C++ start-up errors too
    typed = RunSummary.load(out)  # strict: every field the run wrote is known and present
    assert typed.training.training_flops > 0
    assert typed.training.precision == "float32"  # pinned by FAST_TRAINING
    assert sum(typed.evaluation.per_class_eval_records.values()) == 120
    assert sum(map(sum, typed.evaluation.confusion_matrix)) == 120


def test_the_bench_times_the_model_aware_checks_of_a_next_night(first_run, tmp_path):
    """`make bench`'s (e) on a real run: the gate's label and copy checks and the
    Evaluator's reference check, with the run's version served."""
    from benchmarks.model_checks import model_checks

    out, _, _ = first_run
    checks = model_checks(out / "serving" / "cifar10", RunSummary.load(out), tmp_path)
    assert checks["images"] == 1200 and checks["scored"] == 1080
    assert checks["labels_not_judged"] == ""
    assert checks["total_seconds"] == pytest.approx(
        checks["label_seconds"] + checks["copy_seconds"] + checks["reference_seconds"]
    )
    # Scoring 1,080 images in batches of 512 holds some MB; not the whole process's size.
    assert 1 < checks["peak_growth_mb"] < 1024
    found = json.loads((tmp_path / "evaluation" / "reference_classes.json").read_text())
    assert found["images"] == 120  # the version's own eval split: the candidate is the same model
    assert found["problems"] == []


def test_predict_in_a_fresh_cpu_process_matches_the_trainer_model(first_run, tmp_path):
    import tensorflow as tf
    from PIL import Image

    out, summary, _ = first_run
    labels = fx.balanced_labels(2, seed=5)
    images = fx.make_images(labels, seed=5)
    files = []
    for i, image in enumerate(images):
        files.append(tmp_path / f"img{i}.png")
        Image.fromarray(image).save(files[-1])
    (tmp_path / "notes.png").write_text("not an image")
    done = cli(
        "predict",
        "--model-dir",
        out / "serving" / "cifar10",
        "--json",
        "--top",
        "1",
        *files,
        tmp_path / "notes.png",
    )
    assert done.returncode == 2  # one file failed, the others were classified
    assert "notes.png: not a PNG or JPEG image" in done.stderr
    # only the project's lines: TensorFlow's start-up errors and logging are in the log file
    assert all(line.startswith(("Model: ", "error: ")) for line in done.stderr.splitlines())
    predicted = [json.loads(line)["top"][0]["class"] for line in done.stdout.splitlines()]
    assert len(predicted) == len(files)

    [model_dir] = (out / "artifacts" / "Trainer" / "model").glob("*/Format-Serving")
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_examples"]
    examples = fx.serialized_examples(images)
    in_process = [c.decode() for c in serve(examples=tf.constant(examples))["classes"].numpy()]
    assert predicted == in_process


@pytest.fixture(scope="module")
def scenario(tiny_archive, tmp_path_factory):
    """One blessed run directory that the tests below all rerun in. Each asserts only what
    holds whatever the others did before it: the cache keeps every earlier execution, and
    a served version exists from this first run on."""
    out = tmp_path_factory.mktemp("scenario")
    done = cli("run", *scenario_args(tiny_archive, out))
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def scenario_args(archive, out) -> list:
    """The scenario's run. Any regression against the served model is allowed, so whether
    a rerun is blessed depends only on the absolute gate, not on which of the tests below
    pushed the model being served."""
    return [
        "--data", archive, "--output-dir", out, "--accuracy-gate", "0.5",
        "--max-regression", "1", *FAST,
    ]  # fmt: skip


def test_a_rerun_on_the_served_data_trains_nothing(scenario, tiny_archive):
    """The served version was trained on exactly this archive: nothing new, decided before
    TFX loads (exit 0, outcome no_new_span); another archive would be new data."""
    out = scenario
    before = versions(out)
    done = cli("run", *scenario_args(tiny_archive, out))
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = done.stdout.strip().splitlines()
    assert line.startswith(f"no new data: served version {before[-1]} was trained on this source")
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["outcome"] == "no_new_span" and summary["stage_seconds"] == {}
    assert versions(out) == before


def not_blessed_args(archive, out) -> list:
    return [*scenario_args(archive, out), "--learning-rate", "1e-7", "--accuracy-gate", "0.8"]


@pytest.fixture(scope="module")
def not_blessed(tiny_archive, tmp_path_factory):
    """A run directory whose first run was not blessed (a learning rate too small to learn
    anything, and a gate of 0.8): nothing is served, so the served state stays as it was
    and every rerun reuses what it can."""
    out = tmp_path_factory.mktemp("not-blessed")
    done = cli("run", *not_blessed_args(tiny_archive, out))
    assert done.returncode == 4, done.stderr[-4000:]
    return out


@pytest.mark.parametrize(
    "change, reran, reused",
    [
        (
            ["--accuracy-gate", "0.9"],
            {"Evaluator"},
            {"ServedState", "Cifar10ExampleGen", "StatisticsGen", "Trainer"},
        ),
        (
            ["--epochs", "2"],
            {"Trainer", "Evaluator"},
            {"ServedState", "Cifar10ExampleGen", "StatisticsGen", "ExampleValidator"},
        ),
    ],
)
def test_config_change_invalidates_only_what_depends_on_it(
    not_blessed, tiny_archive, change, reran, reused
):
    out = not_blessed
    # Never blessed, so nothing is pushed and the served state (the first step's input to
    # every later one) stays the same between these reruns.
    done = cli("run", *not_blessed_args(tiny_archive, out), *change)
    assert done.returncode == 4, done.stderr[-3000:]
    states = json.loads((out / "run_summary.json").read_text())["stage_states"]
    assert {s for s in reran if states[s] == "complete"} == reran, states
    assert {s for s in reused if states[s] == "cached"} == reused, states
    if "Trainer" in reused:
        assert "Trainer reused its model" in done.stdout


def test_undertrained_model_is_not_blessed_and_nothing_is_pushed(scenario, tiny_archive):
    out = scenario
    before = versions(out)
    served = (out / "serving" / "cifar10" / before[-1] / "saved_model.pb").read_bytes()
    done = cli(
        "run",
        "--data",
        tiny_archive,
        "--output-dir",
        out,
        "--accuracy-gate",
        "0.8",
        "--epochs",
        "1",
        "--learning-rate",
        "1e-7",
        "--per-replica-batch-size",
        "64",
        "--precision",
        "float32",
        "--force",  # the served version was trained on this archive
    )
    assert done.returncode == 4, done.stderr[-4000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["blessed"] is False and summary["pushed"] is False
    assert summary["eval_accuracy"] < 0.8
    assert any("accuracy gate" in failure for failure in summary["gate_failures"])
    assert "NOT BLESSED" in done.stdout and "the previously served version stays" in done.stdout
    assert versions(out) == before
    assert (out / "serving" / "cifar10" / before[-1] / "saved_model.pb").read_bytes() == served


def test_data_that_fails_validation_stops_before_training(tmp_path):
    root = fx.image_folder(tmp_path / "images", per_class=2)
    for picture in (root / "test" / "frog").iterdir():
        picture.unlink()
    (root / "test" / "frog").rmdir()
    done = cli("run", "--data", root, "--output-dir", tmp_path / "out", *FAST)
    assert done.returncode == 3, done.stderr[-4000:]
    assert "split 'eval', feature 'label': classes [6] are absent" in done.stderr
    summary = json.loads((tmp_path / "out" / "run_summary.json").read_text())
    assert "Trainer" not in summary["stage_seconds"]


def test_corrupt_archive_fails_cleanly_and_registers_nothing(tiny_archive, tmp_path):
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(tiny_archive.read_bytes()[:100_000])
    done = cli("run", "--data", broken, "--output-dir", tmp_path / "out", *FAST)
    assert done.returncode == 2
    assert f"error: {broken}: corrupt or truncated archive" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_offline_download_names_the_url_and_the_option(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("CIFAR10_DATA", None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pipeline.settings import data_source as d; d.OFFICIAL_URL = 'http://127.0.0.1:9/c.tar.gz';"
            "import sys; from pipeline.cli import main; sys.exit(main(['run', '--output-dir', "
            f"'{tmp_path}/out']))",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2
    assert "could not download http://127.0.0.1:9/c.tar.gz" in done.stderr
    assert "--data" in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("*.part"))


def test_training_progress_is_one_line_per_epoch_when_not_a_terminal(first_run):
    out, _, done = first_run
    epochs = [line for line in done.stderr.splitlines() if "Trainer: epoch" in line]
    assert [line.split("Trainer: epoch ")[1].split(" done in ")[0] for line in epochs] == [
        "1/3",
        "2/3",
        "3/3",
    ]
    assert all("images/s" in line and "left" in line for line in epochs)
    assert "\r" not in done.stderr  # live updates only on a terminal
    [log] = (out / "logs").glob("run-*.log")
    assert log.read_text().count("Trainer: epoch ") == 3  # the log keeps the lasting lines


def test_run_splits_the_cpu_into_replicas_after_the_steps_before_the_trainer(
    tiny_archive, tmp_path
):
    """`--cpu-replicas` through the CLI, end to end: the steps before the Trainer run in the
    same process (the gate reads records with eager TensorFlow), and none of them may fix the
    process's devices before the Trainer splits the CPU (a StrategyError at dd83add)."""
    out = tmp_path / "out"
    done = cli("run", "--data", tiny_archive, "--output-dir", out, "--accuracy-gate", "0",
               "--strategy", "mirrored", "--cpu-replicas", "2", *FAST)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "run_summary.json").read_text())
    assert (summary["strategy"], summary["replicas"]) == ("mirrored", 2)
    assert summary["global_batch_size"] == 2 * 64
    assert summary["outcome"] == "pushed"
