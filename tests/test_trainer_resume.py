"""A retried Trainer resumes: the second execution has a different model run folder and
serving path (as a retried Vertex task has another job id in its paths), yet continues from
the first execution's last epoch checkpoint, kept under the pipeline's checkpoint root."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import cifar_fixtures as fx

pytestmark = pytest.mark.integration  # trains in subprocesses

# Runs run_fn in a fresh process (run_fn sets process-wide Keras state); with "die_after" it
# dies like a preempted worker at the end of that epoch, after the checkpoint was written.
RUN_TRAINER = textwrap.dedent("""
    import json, sys
    from tfx.components.trainer.fn_args_utils import FnArgs
    from components.trainer import run, train
    root, execution, die_after = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class Preempted(Exception):
        pass

    class DieAfter(train.EpochHistory):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch + 1 == die_after:
                raise Preempted(f"preempted after epoch {die_after}")

    if die_after:
        train.EpochHistory = DieAfter
    config = {"training": {"strategy": "default", "per_replica_batch_size": 20, "epochs": 3,
                           "precision": "float32"},
              "checkpoint_root": root + "/pipeline/checkpoints"}
    try:
        run.run_fn(FnArgs(train_files=[root + "/train.gz"], eval_files=[root + "/eval.gz"],
                          serving_model_dir=f"{root}/{execution}/serving",
                          model_run_dir=f"{root}/{execution}/model_run",
                          custom_config=config))
    except Preempted as err:
        print(err)
        sys.exit(17)
""")


def _write_split(path, labels, seed):
    fx.write_split(path, labels, seed)


def _train(root, execution, die_after):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-c", RUN_TRAINER, str(root), execution, str(die_after)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_second_execution_with_other_paths_resumes_from_the_last_epoch(tmp_path):
    _write_split(tmp_path / "train.gz", fx.balanced_labels(4, seed=1), seed=1)
    _write_split(tmp_path / "eval.gz", fx.balanced_labels(2, seed=2), seed=2)

    first = _train(tmp_path, "job-1/Trainer_1", die_after=2)
    assert first.returncode == 17, first.stderr[-3000:]
    checkpoints = tmp_path / "pipeline" / "checkpoints"
    [key] = os.listdir(checkpoints)
    assert json.loads((checkpoints / key / "history.json").read_text())[-1]["epoch"] == 2
    assert not (tmp_path / "job-1" / "Trainer_1" / "serving").exists()

    second = _train(tmp_path, "job-2/Trainer_9", die_after=0)
    assert second.returncode == 0, second.stderr[-3000:]
    run_dir = tmp_path / "job-2" / "Trainer_9" / "model_run"
    summary = json.loads((run_dir / "training_summary.json").read_text())
    assert summary["resumed_from_epoch"] == 2
    history = json.loads((run_dir / "history.json").read_text())
    assert [entry["epoch"] for entry in history] == [1, 2, 3]  # epochs 1-2 from the first run
    assert (tmp_path / "job-2" / "Trainer_9" / "serving" / "saved_model.pb").exists()
    assert not (checkpoints / key).exists()  # exported: nothing left to resume
