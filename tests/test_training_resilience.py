"""An unreadable epoch checkpoint never blocks the Trainer: it resumes from an older
readable one, or starts over, and says so in the training summary. Also how progress
reaches the console: live on a terminal, lasting lines everywhere."""

import io
import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from components.runtime.progress import PROGRESS_LOGGER, duration
from pipeline.local.runner import _ProgressPrinter

import cifar_fixtures as fx

# Dies (like a killed run) right after fit, before the export that would remove the
# checkpoints, unless argv[3] is "finish".
TRAIN = textwrap.dedent("""
    import json, os, sys
    from tfx.components.trainer.fn_args_utils import FnArgs
    from components.trainer import export
    from components.trainer.run import run_fn
    root = sys.argv[1]
    if sys.argv[3] != "finish":
        export.export_serving_model = lambda *args, **kwargs: os._exit(17)
    run_fn(FnArgs(train_files=[root + "/train.gz"], eval_files=[root + "/eval.gz"],
                  serving_model_dir=root + "/serving", model_run_dir=root + "/run/7",
                  custom_config=json.loads(sys.argv[2])))
""")
CONFIG = json.dumps(
    {
        "training": {
            "strategy": "default",
            "per_replica_batch_size": 32,
            "epochs": 3,
            "precision": "float32",
        }
    }
)


def _write_split(path, labels, seed):
    fx.write_split(path, labels, seed)


def _train(root, finish: bool):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, str(root), CONFIG, "finish" if finish else "die"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == (0 if finish else 17), done.stderr[-3000:]
    return done


@pytest.fixture
def killed_after_three_epochs(tmp_path):
    _write_split(tmp_path / "train.gz", fx.balanced_labels(10, seed=1), seed=1)
    _write_split(tmp_path / "eval.gz", fx.balanced_labels(2, seed=2), seed=2)
    _train(tmp_path, finish=False)
    checkpoints = sorted(tmp_path.rglob("ckpt-*.index"))
    assert [p.name for p in checkpoints] == ["ckpt-1.index", "ckpt-2.index", "ckpt-3.index"]
    return tmp_path, {
        p.name.split(".")[0]: p.with_suffix(".data-00000-of-00001") for p in checkpoints
    }


def _summary(root):
    return json.loads((root / "run" / "7" / "training_summary.json").read_text())


@pytest.mark.integration
def test_truncated_newest_checkpoint_resumes_from_the_one_before(killed_after_three_epochs):
    root, data_files = killed_after_three_epochs
    newest = data_files["ckpt-3"]
    newest.write_bytes(newest.read_bytes()[:100])  # as a full disk leaves it
    done = _train(root, finish=True)
    summary = _summary(root)
    assert summary["resumed_from_epoch"] == 2
    fallback = summary["checkpoint_fallback"]
    assert fallback["resumed_from_epoch"] == 2
    assert [s["checkpoint"] for s in fallback["skipped"]] == ["ckpt-3"]
    assert fallback["skipped"][0]["error"]
    history = json.loads((root / "run" / "7" / "history.json").read_text())
    assert [e["epoch"] for e in history] == [1, 2, 3]
    assert (root / "serving" / "saved_model.pb").exists()
    assert "ckpt-3" in done.stderr and "unreadable" in done.stderr


@pytest.mark.integration
def test_no_readable_checkpoint_starts_over(killed_after_three_epochs):
    root, data_files = killed_after_three_epochs
    for path in data_files.values():
        path.write_bytes(b"\xff" * path.stat().st_size)  # garbled in place
    _train(root, finish=True)
    summary = _summary(root)
    assert summary["resumed_from_epoch"] == 0
    assert [s["checkpoint"] for s in summary["checkpoint_fallback"]["skipped"]] == [
        "ckpt-3",
        "ckpt-2",
        "ckpt-1",
    ]
    history = json.loads((root / "run" / "7" / "history.json").read_text())
    assert [e["epoch"] for e in history] == [1, 2, 3]


class _Console(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self.terminal = terminal

    def isatty(self):
        return self.terminal


def _record(level, message, name=PROGRESS_LOGGER):
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_printer_shows_live_updates_only_on_a_terminal(terminal):
    console = _Console(terminal)
    printer = _ProgressPrinter(console)
    printer.emit(_record(logging.DEBUG, "Trainer: epoch 1/2, step 3/9"))
    printer.emit(_record(logging.DEBUG, "Trainer: epoch 1/2, step 6/9"))
    printer.emit(_record(logging.INFO, "Trainer: epoch 1/2 done"))
    printer.emit(_record(logging.INFO, "unrelated", name="tfx"))
    text = console.getvalue()
    lasting = [
        line.split("] ", 1)[1] for line in text.replace("\r\033[K", "\n").splitlines() if line
    ]
    if terminal:
        assert lasting == [
            "Trainer: epoch 1/2, step 3/9",
            "Trainer: epoch 1/2, step 6/9",
            "Trainer: epoch 1/2 done",
        ]
        assert text.count("\r\033[K") == 2 and text.endswith("done\n")
    else:
        assert lasting == ["Trainer: epoch 1/2 done"] and "\r" not in text


def test_durations_read_naturally():
    assert [duration(s) for s in (4.4, 190, 3720)] == ["4s", "3m10s", "1h02m"]
