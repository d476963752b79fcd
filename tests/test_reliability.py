"""Fault injection on tiny data: SIGKILL during ingest, training and push, then rerun the
same command; the concurrent-run guard; config changes invalidate only what depends on them."""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from components.atomic_pusher.executor import STAGING_PREFIX
from components.atomic_pusher.lock import LOCK_NAME
from components.contract import SAVED_MODEL_FILE
from components.night_report.message import NIGHTS_DIR

from conftest import FAST_TRAINING, cli, versions

pytestmark = pytest.mark.integration  # full pipeline runs in subprocesses

KILL_AFTER_CALLS = textwrap.dedent("""
    import os, signal, sys, importlib
    module = importlib.import_module(sys.argv[1])
    name, limit, when, match = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    real, calls = getattr(module, name), [0]
    def dying(*args, **kwargs):
        if match not in repr(args):  # only the calls whose arguments mention `match`
            return real(*args, **kwargs)
        calls[0] += 1
        if calls[0] >= limit and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, like a power cut
        result = real(*args, **kwargs)
        if calls[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    setattr(module, name, dying)
    from pipeline.cli import main
    sys.exit(main(sys.argv[6:]))
""")


def run_and_die(module: str, function: str, call: int, when: str, *args, match: str = ""):
    """Runs the CLI with `module.function` patched to SIGKILL the process at its `call`-th
    call (counting only calls whose arguments mention `match`), `before` or `after` the
    real function runs."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CIFAR10_DATA", None)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            KILL_AFTER_CALLS,
            module,
            function,
            str(call),
            when,
            match,
            "run",
            *map(str, args),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def summary(out: Path) -> dict:
    return json.loads((out / "run_summary.json").read_text())


def assert_every_version_loads(out: Path):
    import tensorflow as tf

    served = versions(out)
    assert served, "nothing was pushed"
    for version in served:
        tf.saved_model.load(str(out / "serving" / "cifar10" / version))
    base = out / "serving" / "cifar10"
    # Nothing else but the push lock's file (on local disks a lock file is never removed) and
    # the nights' records, each whole (one JSON message a file, no partial one left).
    others = {p.name for p in base.iterdir() if not p.name.isdigit()}
    assert others <= {LOCK_NAME, NIGHTS_DIR}, others
    for record in (base / NIGHTS_DIR).iterdir() if NIGHTS_DIR in others else []:
        assert record.suffix == ".json" and json.loads(record.read_text())["outcome"]


def test_killed_during_ingest_then_rerun_completes(tiny_archive, tmp_path):
    args = [
        "--data",
        tiny_archive,
        "--output-dir",
        tmp_path,
        "--accuracy-gate",
        "0.5",
        *FAST_TRAINING,
    ]
    # The CLI's and the executor's checks parse the batch files without it; Beam's read
    # calls it once per batch file: die in the second, after the first file's records.
    died = run_and_die(
        "components.cifar10_example_gen.sources", "batch_file_records", 2, "before", *args
    )
    assert died.returncode == -signal.SIGKILL
    assert not (tmp_path / "run_summary.json").exists()
    done = cli("run", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary(tmp_path)["record_counts"] == {"train": 1080, "eval": 120}
    assert_every_version_loads(tmp_path)


# Where a push is killed: once the model is fully copied to staging, before any file moves
# into place; and inside the move (the first staged file has moved into the version folder,
# the rest, saved_model.pb among them and always last, have not).
PUSH_KILLS = [
    ("before-the-move", "components.atomic_pusher.executor", "copy_to_staging", ""),
    ("inside-the-move", "tfx.dsl.io.fileio", "rename", STAGING_PREFIX),
]


def test_killed_during_push_leaves_no_partial_version(tiny_archive, tmp_path):
    """Each kill in turn on one output folder (the second on a rerun that reuses the trained
    model), then the same command once more: one whole version, the half-moved folder gone."""
    args = [
        "--data",
        tiny_archive,
        "--output-dir",
        tmp_path,
        "--accuracy-gate",
        "0.5",
        *FAST_TRAINING,
    ]
    base = tmp_path / "serving" / "cifar10"
    for where, module, function, match in PUSH_KILLS:
        died = run_and_die(module, function, 1, "after", *args, match=match)
        assert died.returncode == -signal.SIGKILL, (where, died.stderr[-3000:])
        left = [p for p in base.iterdir() if p.name.isdigit()] if base.exists() else []
        if match:  # the kill really came inside the move: a version folder with some files
            assert [p.name for p in left] != [] and all(any(p.iterdir()) for p in left), where
        # Nothing servable: TF Serving loads a version only once its saved_model.pb exists.
        assert [p for p in left if (p / SAVED_MODEL_FILE).exists()] == [], where
    done = cli("run", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = summary(tmp_path)
    assert facts["stage_states"]["Trainer"] == "cached"  # finished work is reused
    assert facts["pushed"] is True
    assert len(versions(tmp_path)) == 1  # the half-moved folder was cleared, not kept
    assert_every_version_loads(tmp_path)


def test_killed_during_training_resumes_from_the_last_checkpoint(tiny_archive, tmp_path):
    args = [
        "run",
        "--data",
        tiny_archive,
        "--output-dir",
        tmp_path,
        "--accuracy-gate",
        "0.5",
        "--epochs",
        "8",
        "--per-replica-batch-size",
        "32",
        "--precision",
        "float32",
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    checkpoints = tmp_path / "artifacts" / "Trainer" / "checkpoints"
    try:
        epochs_done = kill_after_epochs(process, checkpoints, epochs=3, within_seconds=600)
    finally:  # never leave the pipeline running, whatever happened above
        if process.poll() is None:
            process.kill()
        process.wait()
    assert epochs_done >= 3, f"the run stopped or stalled after {epochs_done} epochs, unkilled"
    assert process.returncode == -signal.SIGKILL
    done = cli(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = summary(tmp_path)
    assert facts["resumed_from_epoch"] >= 3
    assert [e["epoch"] for e in facts["history"]] == list(range(1, 9))
    assert_every_version_loads(tmp_path)


def kill_after_epochs(
    process: subprocess.Popen, checkpoints: Path, epochs: int, within_seconds: float
) -> int:
    """SIGKILLs `process` once its checkpoint history holds `epochs` epochs; returns the
    epochs seen, fewer when the process ended or the time ran out first."""
    deadline = time.monotonic() + within_seconds
    epochs_done = 0
    while time.monotonic() < deadline and process.poll() is None:
        for history in checkpoints.glob("*/history.json"):
            with contextlib.suppress(ValueError):  # a history being written right now
                epochs_done = len(json.loads(history.read_text()))
        if epochs_done >= epochs:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.2)
    return epochs_done


def test_second_concurrent_run_is_refused(tiny_archive, tmp_path):
    """A run refused because another holds the folder has its own exit status (10, "try
    later", not 2, "bad input"); its night is kept on its own (`-busy.json`) and does not
    overwrite latest.json: the holder's night stands, and `status` still reports it."""
    nights = tmp_path / "serving" / "cifar10" / ".nights"
    nights.mkdir(parents=True)
    holder_night = json.dumps({"outcome": "pushed", "time": "2026-12-05T02:00:00+00:00"})
    (nights / "latest.json").write_text(holder_night)
    with open(tmp_path / ".run.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 12345")
        held.flush()
        done = cli("run", "--data", tiny_archive, "--output-dir", tmp_path, *FAST_TRAINING)
    assert done.returncode == 10, done.stderr[-2000:]
    assert "another run (pid 12345) is using this output directory" in done.stderr
    assert not (tmp_path / "metadata.sqlite").exists()
    assert not (tmp_path / "run_summary.json").exists()
    assert (nights / "latest.json").read_text() == holder_night
    [refusal] = nights.glob("*-busy.json")
    said = json.loads(refusal.read_text())
    assert said["outcome"] == "busy" and said["exit_status"] == 10
    assert "pid 12345" in said["error"]


def test_unwritable_output_dir_is_a_clear_error(tiny_archive, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = cli("run", "--data", tiny_archive, "--output-dir", blocker / "out", *FAST_TRAINING)
    assert done.returncode == 2
    assert f"error: cannot use output directory {blocker / 'out'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tiny_archive, tmp_path):
    """A real filesystem that fills up during the run (a 3 MB tmpfs, mounted here: root
    only): exit status 2, one line naming the output folder, no summary, report or served
    version written, and the libraries' logging errors kept off the console."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)])
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        out = small / "out"
        done = cli("run", "--data", tiny_archive, "--output-dir", out, *FAST_TRAINING)
        assert done.returncode == 2, done.stderr[-3000:]
        said = ("error", "warning", "---")
        [line] = [x for x in done.stderr.splitlines() if x.startswith(said)]
        assert line.startswith(f"error: no space left writing to {out} ("), line
        assert "Traceback" not in done.stderr
        assert not (out / "run_summary.json").exists() and not (out / "report.html").exists()
        assert not (out / "serving").exists()
    finally:
        subprocess.run(["umount", str(small)], check=True)
