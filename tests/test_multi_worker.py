"""Multi-worker training: where a process stands in a cluster, each worker's shard, the
local worker group (restarts, giving up, nothing left running), and `run --workers 2` end
to end with real worker processes, one of them killed mid-training."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest
from PIL import Image

from components.contract import TRAINER_NODE
from components.trainer import local_workers
from components.trainer.strategy import StrategyError, Worker, worker_position

import cifar_fixtures as fx
from conftest import cli, versions


def test_worker_position_puts_the_chief_first():
    vertex = {"chief": ["c:1"], "worker": ["w:1", "w:2"]}  # as Vertex AI's pools set it
    assert worker_position(vertex, "chief", 0) == Worker(0, 3)
    assert worker_position(vertex, "worker", 1) == Worker(2, 3)
    loopback = {"worker": ["localhost:1", "localhost:2"]}  # `run --workers 2`
    assert worker_position(loopback, "worker", 0).is_chief
    assert not worker_position(loopback, "worker", 1).is_chief
    with pytest.raises(StrategyError, match="task type 'evaluator' does not train here"):
        worker_position({**vertex, "evaluator": ["e:1"]}, "evaluator", 0)


def test_tf_config_names_every_worker_and_this_one():
    ports = local_workers.free_ports(3)
    assert len(set(ports)) == 3
    config = json.loads(local_workers.tf_config(ports, 2))
    assert config["cluster"]["worker"] == [f"localhost:{p}" for p in ports]
    assert config["task"] == {"type": "worker", "index": 2}


def test_each_worker_keeps_only_its_own_records(tmp_path):
    from components.trainer import data

    labels = fx.balanced_labels(7, seed=3)  # 70 records: shards of 24, 23, 23
    images = fx.write_split(tmp_path / "train.gz", labels, seed=3)
    shards = [data.load_shard([str(tmp_path / "train.gz")], i, 3) for i in range(3)]
    assert [s.total for s in shards] == [70, 70, 70]
    assert [int(s.labels.shape[0]) for s in shards] == [24, 23, 23]
    for index, shard in enumerate(shards):
        np.testing.assert_array_equal(shard.images.numpy(), images[index::3])
    first = data.first_images([str(tmp_path / "train.gz")], 5)
    np.testing.assert_array_equal(first, images[:5])


def test_an_epoch_is_the_same_number_of_steps_on_every_worker():
    from components.trainer import data
    from components.trainer.keras import tf

    images = tf.zeros([23, 32, 32, 3], tf.uint8)
    labels = tf.zeros([23], tf.int64)
    dataset = data.training_dataset(images, labels, 4, batches_per_epoch=5)
    batches = list(dataset.take(10))
    assert len(batches) == 10 and all(int(b[1].shape[0]) == 4 for b in batches)
    with pytest.raises(ValueError, match="6 batches of 4 need 24 images, this shard has 23"):
        data.training_dataset(images, labels, 4, batches_per_epoch=6)


# Worker 1 fails on the first attempt only; worker 0 would wait for ever (as in a collective).
FLAKY_WORKER = textwrap.dedent("""
    import json, os, pathlib, sys, time
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    marker = pathlib.Path(sys.argv[1])
    print(f"pid {os.getpid()}", flush=True)
    if index == 1 and not marker.exists():
        marker.write_text("failed once")
        sys.exit(3)
    if index == 0 and not marker.exists():
        time.sleep(600)
    time.sleep(0.5 if index == 0 else 0)
""")


def test_a_failed_worker_restarts_the_whole_group(tmp_path):
    command = [sys.executable, "-c", FLAKY_WORKER, str(tmp_path / "failed")]
    started = time.monotonic()
    local_workers.run_group(command, 2, tmp_path / "logs", restarts=1)
    assert time.monotonic() - started < 60  # the waiting worker 0 was stopped, not waited for
    logs = [(tmp_path / "logs" / f"worker-{i}.log").read_text() for i in (0, 1)]
    for log in logs:
        assert "--- attempt 1," in log and "--- attempt 2," in log
    first_pid = int(logs[0].split("pid ")[1].split()[0])
    assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == "zombie"


def test_a_worker_that_keeps_failing_is_named_with_its_log(tmp_path):
    command = [sys.executable, "-c", "import sys; sys.exit(5)"]
    with pytest.raises(local_workers.WorkerGroupError) as err:
        local_workers.run_group(command, 2, tmp_path / "logs", restarts=1)
    assert "exited with status 5" in str(err.value)
    assert "worker-0.log" in str(err.value) or "worker-1.log" in str(err.value)
    assert "gave up after 1 restart(s)" in str(err.value)


def test_run_refuses_workers_with_another_strategy(tiny_archive, tmp_path):
    done = cli(
        "run", "--data", tiny_archive, "--output-dir", tmp_path, "--workers", "2",
        "--strategy", "mirrored", timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "2 local workers train with strategy multi_worker, not 'mirrored'" in done.stderr


def test_kubeflow_compile_refuses_workers(tmp_path, capsys):
    from pipeline import cli as pipeline_cli

    args = ["compile", "--target", "kubeflow", "--pipeline-root", "gs://b/r", "--image", "i"]
    args += ["--data", "gs://b/d.tar.gz", "--workers", "2", "--output", str(tmp_path / "k.yaml")]
    assert pipeline_cli.main(args) == 2
    assert "not compiled for Kubeflow Pipelines" in capsys.readouterr().err
    assert not (tmp_path / "k.yaml").exists()


def _worker_process(run: subprocess.Popen, index: int) -> psutil.Process | None:
    """The `run` process's training worker `index`, found by its TF_CONFIG."""
    for child in psutil.Process(run.pid).children(recursive=True):
        try:
            config = json.loads(child.environ().get("TF_CONFIG", "{}"))
        except (psutil.Error, ValueError):
            continue
        if config.get("task", {}).get("index") == index:
            return child
    return None


def _kill_worker_after_first_checkpoint(run: subprocess.Popen, out, deadline: float) -> bool:
    """SIGKILLs worker 1 once the chief's epoch-1 checkpoint exists; False if the run ended
    or the deadline passed first."""
    checkpoints = out / "artifacts" / TRAINER_NODE / "checkpoints"
    while time.monotonic() < deadline and run.poll() is None:
        if list(checkpoints.glob("*/ckpt-1.index")):
            worker = _worker_process(run, 1)
            if worker is not None:
                worker.send_signal(signal.SIGKILL)
                return True
        time.sleep(0.2)
    return False


@pytest.mark.integration
@pytest.mark.multi_worker
def test_two_workers_train_one_model_and_survive_a_killed_worker(tiny_archive, tmp_path):
    """`run --workers 2` on the tiny archive: worker 1 is killed during epoch 2; the group
    restarts, resumes from the last finished epoch, both workers end with the same weights,
    and one model is pushed, once, and loads."""
    out = tmp_path / "out"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CIFAR10_DATA", None)
    command = [sys.executable, "-m", "pipeline.cli", "run", "--data", str(tiny_archive)]
    command += ["--output-dir", str(out), "--workers", "2", "--accuracy-gate", "0.3"]
    command += ["--epochs", "4", "--per-replica-batch-size", "16", "--precision", "float32"]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        killed = _kill_worker_after_first_checkpoint(run, out, time.monotonic() + 600)
        stdout, stderr = run.communicate(timeout=900)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, stderr.decode()[-4000:]
    assert killed, "the run ended before worker 1 could be killed"
    training = json.loads((out / "run_summary.json").read_text())  # flat: training facts first
    assert (training["strategy"], training["workers"], training["replicas"]) == (
        "multi_worker",
        2,
        2,
    )
    assert training["global_batch_size"] == 32
    assert 1 <= training["resumed_from_epoch"] < 4
    assert training["step_seconds"] > 0 and training["allreduce_seconds"] > 0
    assert training["gradient_bytes"] > 0
    [model_run] = (out / "artifacts" / TRAINER_NODE / "model_run").iterdir()
    logs = [(model_run / "workers" / f"worker-{i}.log").read_text() for i in (0, 1)]
    assert all("--- attempt 2," in log for log in logs)
    digests = [log.split("final weights sha256 ")[-1].split()[0] for log in logs]
    assert digests[0] == digests[1] and len(digests[0]) == 64
    assert len(versions(out)) == 1  # pushed once
    assert not list((out / "artifacts" / TRAINER_NODE / "checkpoints").glob("*"))  # cleaned up
    from components.trainer.keras import tf

    [version] = versions(out)
    served = tf.saved_model.load(str(out / "serving" / "cifar10" / version))
    png = io.BytesIO()
    Image.fromarray(fx.make_images(np.array([3]), seed=5)[0]).save(png, format="PNG")
    probabilities = served.signatures["serving_default"](images=tf.constant([png.getvalue()]))
    assert probabilities["probabilities"].shape == (1, 10)
