"""Trainer: strategy factory, an 8-replica MirroredStrategy run on CPU, and the export
round trip in a fresh CPU-only process."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from components.trainer import strategy as strategies
from components.trainer.keras import tf

import cifar_fixtures as fx


def test_default_and_auto_on_a_cpu_only_machine(monkeypatch):
    for name in strategies.TPU_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    assert strategies.strategy_kind(strategies.create_strategy("default")) == "default"
    auto = strategies.create_strategy("auto")
    assert strategies.strategy_kind(auto) == "default" and auto.num_replicas_in_sync == 1


def test_mirrored_on_one_cpu_device():
    mirrored = strategies.create_strategy("mirrored")
    assert strategies.strategy_kind(mirrored) == "mirrored"
    assert mirrored.num_replicas_in_sync == 1


def test_tpu_without_a_tpu_is_a_clear_error(monkeypatch):
    for name in strategies.TPU_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(strategies.StrategyError, match="strategy 'tpu' needs a TPU"):
        strategies.create_strategy("tpu")
    with pytest.raises(strategies.StrategyError, match="no TPU reachable at 'local'"):
        strategies.create_strategy("tpu", tpu="local")


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(strategies.StrategyError, match="TF_CONFIG"):
        strategies.create_strategy("multi_worker")


def test_explicit_precision_wins_and_cpu_strategies_run_on_cpu():
    default = tf.distribute.get_strategy()
    assert strategies.accelerator_of(default) == "cpu"
    choice = strategies.choose_precision("float32", default)
    assert choice.policy == "float32" and choice.reason == "--precision float32"


def _write_split(path, labels, seed):
    return fx.write_split(path, labels, seed), labels


TRAIN_IN_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    from tfx.components.trainer.fn_args_utils import FnArgs
    from components.trainer.run import run_fn
    root = sys.argv[1]
    run_fn(FnArgs(train_files=[root + "/train.gz"], eval_files=[root + "/eval.gz"],
                  serving_model_dir=root + "/serving", model_run_dir=root + "/run/7",
                  custom_config=json.loads(sys.argv[2])))
""")

ROUND_TRIP_IN_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    assert not tf.config.list_physical_devices("GPU")
    model = tf.saved_model.load(sys.argv[1])
    pngs = [open(p, "rb").read() for p in sys.argv[3:]]
    examples = open(sys.argv[2], "rb").read().split(b"@@SEP@@")
    by_image = model.signatures["serving_default"](images=tf.constant(pngs))
    by_example = model.signatures["serving_examples"](examples=tf.constant(examples))
    print(json.dumps({
        "images": by_image["probabilities"].numpy().tolist(),
        "examples": by_example["probabilities"].numpy().tolist(),
        "classes": [c.decode() for c in by_image["classes"].numpy()],
    }))
""")


def _run(code, *args, env_extra=None):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env_extra or {})}
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


PER_REPLICA_INPUT = textwrap.dedent("""
    import json
    import components
    from components.trainer import data, train
    from components.trainer.config import TrainingConfig
    from components.trainer.keras import tf
    run = train.plan(TrainingConfig(strategy="mirrored", cpu_replicas=8,
                                    per_replica_batch_size=16, precision="float32"))
    report = {"per_replica": train.per_replica_input(run), "pipelines": train.input_pipelines(run)}
    local = run.strategy.experimental_local_results

    def labels_of(batches, steps):
        iterator = iter(batches)
        return [[t.numpy().tolist() for t in local(next(iterator)[1])] for _ in range(steps)]

    for count in (40, 300):  # under one global batch of 128; two full ones and a short one
        images = tf.zeros([count, 32, 32, 3], tf.uint8)
        labels = tf.range(count, dtype=tf.int64)
        steps = -(-count // run.global_batch_size) + 1  # one pass, then the next begins
        ours = train.distributed_evaluation_data(run, images, labels)
        whole = data.evaluation_dataset(images, labels, run.global_batch_size).repeat()
        report[f"eval {count}"] = labels_of(ours, steps)
        report[f"tf.distribute {count}"] = labels_of(
            run.strategy.experimental_distribute_dataset(whole), steps)
    images, labels = tf.zeros([400, 32, 32, 3], tf.uint8), tf.range(400, dtype=tf.int64)
    steps = train._steps_per_epoch(run, 400, train.input_pipelines(run))
    report["train steps"] = steps
    training = train._distributed_training_data(run, images, labels, steps, 0)
    report["train"] = labels_of(training, steps)
    print(json.dumps(report))
""")


@pytest.mark.integration
def test_cpu_replicas_read_through_a_pipeline_each_what_tf_distribute_would_hand_them():
    """8 CPU replicas get an input pipeline each (not tf.distribute's MultiDeviceIterator,
    whose teardown waited 60-120 s on tf.data's autotuner): every step, each replica's
    slice of the eval split is the one tf.distribute's own split gives it, and an epoch
    of training hands out whole per-replica batches, no record twice."""
    report = json.loads(_run(PER_REPLICA_INPUT).strip().splitlines()[-1])
    assert report["per_replica"] is True and report["pipelines"] == 8
    for count in (40, 300):
        assert report[f"eval {count}"] == report[f"tf.distribute {count}"], count
        first_pass = report[f"eval {count}"][:-1]
        assert sorted(x for step in first_pass for part in step for x in part) == list(range(count))
    assert report["train steps"] == 3  # 400 records, 8 replicas x 16: 3 whole global batches
    seen = [x for step in report["train"] for part in step for x in part]
    assert all(len(part) == 16 for step in report["train"] for part in step)
    assert len(seen) == 3 * 128 and len(set(seen)) == len(seen)
    assert set(seen) <= set(range(400))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two epochs under MirroredStrategy with 8 logical CPU replicas, 16 images each."""
    root = tmp_path_factory.mktemp("trainer")
    _write_split(root / "train.gz", fx.balanced_labels(40, seed=1), seed=1)
    eval_images, eval_labels = _write_split(root / "eval.gz", fx.balanced_labels(4, seed=2), 2)
    config = {
        "strategy": "mirrored",
        "cpu_replicas": 8,
        "per_replica_batch_size": 16,
        "epochs": 3,
        "precision": "float32",  # the loss-must-fall check is set for float32
    }
    _run(TRAIN_IN_FRESH_PROCESS, root, json.dumps({"training": config}))
    return root, eval_images, eval_labels


@pytest.mark.integration
def test_eight_replica_mirrored_training(trained):
    root, _, _ = trained
    summary = json.loads((root / "run" / "7" / "training_summary.json").read_text())
    assert summary["strategy"] == "mirrored" and summary["replicas"] == 8
    assert summary["global_batch_size"] == 8 * 16
    # 400 training images make 3 whole batches of 128 per epoch, for 3 epochs.
    assert summary["training_images_seen"] == 3 * 3 * 128
    assert summary["training_flops"] == 3 * summary["forward_flops_per_image"] * 3 * 3 * 128
    history = json.loads((root / "run" / "7" / "history.json").read_text())
    assert [e["epoch"] for e in history] == [1, 2, 3]
    assert history[-1]["loss"] < history[0]["loss"]
    # validation ran through the persistent distributed iterator every epoch (the callback
    # adds these only when it ran), the last epoch on the whole eval split
    assert all({"val_loss", "val_accuracy", "val_fraction"} <= set(e) for e in history)
    assert history[-1]["val_fraction"] == 1.0
    assert (root / "run" / "7" / "logs").is_dir()  # TensorBoard


@pytest.mark.integration
def test_export_round_trip_in_a_cpu_only_process(trained, tmp_path):
    from PIL import Image

    root, images, labels = trained
    paths = []
    for i, image in enumerate(images[:6]):
        paths.append(tmp_path / f"{i}.png")
        Image.fromarray(image).save(paths[-1])
    examples = fx.serialized_examples(images[:6])
    (tmp_path / "examples.bin").write_bytes(b"@@SEP@@".join(examples))
    out = json.loads(
        _run(ROUND_TRIP_IN_FRESH_PROCESS, root / "serving", tmp_path / "examples.bin", *paths)
        .strip()
        .splitlines()[-1]
    )
    by_image, by_example = np.array(out["images"]), np.array(out["examples"])
    assert by_image.shape == (6, 10)
    np.testing.assert_allclose(by_image.sum(axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(by_image, by_example, atol=1e-5)
    assert out["classes"] == [fx.LABEL_NAMES[i] for i in by_image.argmax(axis=1)]


def test_training_config_round_trips_and_rejects_unknown_settings():
    from components.trainer.config import TrainingConfig

    config = TrainingConfig(model="seed_cnn", epochs=3, cpu_replicas=2)
    custom = {"training": config.to_custom_config(), "ai_platform_enable_vertex": True}
    assert TrainingConfig.from_trainer_custom_config(custom) == config
    with pytest.raises(ValueError, match="unknown training setting.*epoch_count"):
        TrainingConfig.from_custom_config({"epoch_count": 3})


def test_keras_3_is_refused_loudly():
    """With tf.keras resolved (to Keras 3) before `components` chose Keras 2, the trainer's
    Keras module refuses to load instead of training with the wrong library."""
    code = "import tensorflow as tf; tf.keras.Model; import components.trainer.keras"
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode != 0
    assert "tf.keras is Keras 3" in done.stderr


def test_process_settings_are_put_back_after_a_run():
    import random

    from components.trainer import train
    from components.trainer.keras import keras

    before = (
        keras.mixed_precision.global_policy().name,
        random.getstate(),
        np.random.get_state()[1].tolist(),
    )
    with train.process_settings("mixed_bfloat16", seed=7):
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        random.random()
        np.random.random()
    after = (
        keras.mixed_precision.global_policy().name,
        random.getstate(),
        np.random.get_state()[1].tolist(),
    )
    assert after == before
