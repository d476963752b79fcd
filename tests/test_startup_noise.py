"""TensorFlow's start-up lines ("Unable to register cuFFT factory", cuDNN, cuBLAS, oneDNN,
the CPU-feature notice), written by its C++ to file descriptor 2 when it is imported, reach
neither the console nor a log: a command that had nothing else to log leaves no log."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.common import library_log
from pipeline.local.summary import RunSummary

import cifar_fixtures as fx

REPO_ROOT = Path(__file__).resolve().parents[1]
NOISE = (
    "Unable to register",
    "cuFFT",
    "cuDNN",
    "cuBLAS",
    "oneDNN",
    "cpu_feature_guard",
    "TF-TRT",
    "cuda drivers",
    "absl::InitializeLog",
)
# TensorFlow's C++ log format: "2026-01-01 00:00:00.000000: E file.cc:12] message"
# or absl's: "I0000 00:00:1796442664.035167   29925 port.cc:153] message"
CPP_LOG_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ )",
    re.MULTILINE,
)
SAMPLE_NOISE = (
    "2026-12-05 00:11:55.195288: I tensorflow/core/util/port.cc:113] oneDNN custom operations "
    "are on. You may see slightly different numerical results.\n"
    "2026-12-05 00:11:55.196141: I external/local_tsl/tsl/cuda/cudart_stub.cc:32] Could not "
    "find cuda drivers on your machine, GPU will not be used.\n"
    "2026-12-05 00:11:55.208600: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479]"
    " Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when "
    "one has already been registered\n"
    "2026-12-05 00:11:55.237683: I tensorflow/core/platform/cpu_feature_guard.cc:210] This "
    "TensorFlow binary is optimized to use available CPU instructions in performance-critical "
    "operations.\nTo enable the following instructions: AVX2 FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.\n"
    "2026-12-05 00:11:56.058757: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] "
    "TF-TRT Warning: Could not find TensorRT\n"
)


# The same lines from TensorFlow 2.21 (the current stack), in absl's format, where a machine
# with no CUDA device also gets cuInit's error.
SAMPLE_NOISE_CURRENT = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1796442664.035167   29925 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors.\n"
    "I0000 00:00:1796442664.035595   29925 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n"
    "E0000 00:00:1796442666.028245   29925 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
)


def _quiet(text: str) -> bool:
    return not CPP_LOG_LINE.search(text) and not any(marker in text for marker in NOISE)


def _command(state: Path, *args) -> subprocess.CompletedProcess:
    """`python -m pipeline.cli ARGS` CPU-only, its logs under `state`, this checkout's code."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "XDG_STATE_HOME": str(state)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def _logs(state: Path) -> list[Path]:
    return sorted((state / "cifar10-pipeline" / "logs").glob("*.log"))


@pytest.mark.parametrize("noise", [SAMPLE_NOISE, SAMPLE_NOISE_CURRENT], ids=["tf2.16", "tf2.21"])
def test_a_log_that_holds_only_the_start_up_lines_is_removed(tmp_path, noise):
    log = tmp_path / "logs" / "x.log"
    with library_log.to_file(log):
        os.write(2, noise.encode())
    assert not log.exists()


def test_a_cuda_error_that_is_not_the_start_up_one_stays(tmp_path):
    log = tmp_path / "x.log"
    real = "E0000 00:00:1796442666.1   29925 cuda_executor.cc:9] CUDA error: out of memory\n"
    with library_log.to_file(log):
        os.write(2, (SAMPLE_NOISE_CURRENT + real).encode())
    assert log.read_text() == real


def test_the_start_up_lines_leave_the_log_and_the_rest_stays(tmp_path):
    """Only what this command appended is filtered: an earlier command's lines in the same
    --log-file stay as they were."""
    log = tmp_path / "x.log"
    log.write_text("earlier command\n")
    with library_log.to_file(log):
        os.write(2, SAMPLE_NOISE.encode() + b"E something real went wrong\n")
        os.write(2, SAMPLE_NOISE.encode())
    assert log.read_text() == "earlier command\nE something real went wrong\n"
    with library_log.to_file(log):
        os.write(2, SAMPLE_NOISE.encode())
    assert log.read_text() == "earlier command\nE something real went wrong\n"


def test_report_prints_no_start_up_lines_and_leaves_no_log(tmp_path):
    run_dir = tmp_path / "run"
    RunSummary("r1", {}, {}, {}, {}).write(run_dir)
    done = _command(tmp_path / "state", "report", run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    assert _logs(tmp_path / "state") == []


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("noise-run")
    fx.tiny_served_model(run_dir)
    return run_dir


def test_predict_prints_no_start_up_lines_and_leaves_no_log(tiny_run, tmp_path):
    image = fx.write_png(tmp_path / "a.png")
    model_dir = tiny_run / "serving" / "cifar10"
    done = _command(tmp_path / "state", "predict", "--model-dir", model_dir, image)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == f"Model: {model_dir / '1'}\n"
    assert _logs(tmp_path / "state") == []


def test_compile_keeps_the_start_up_lines_out_of_the_console_and_its_log(tmp_path):
    output = tmp_path / "p.yaml"
    done = _command(
        tmp_path / "state",
        *("compile", "--target", "kubeflow", "--pipeline-root", "gs://b/root", "--image", "i"),
        *("--data", "gs://b/d.tar.gz", "--output", output),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    (log,) = _logs(tmp_path / "state")
    text = log.read_text()
    assert "INFO" in text and _quiet(text), text[:3000]


@pytest.mark.parametrize("command", ["rollback", "status"])
def test_the_operations_commands_print_no_start_up_lines_and_leave_no_log(tmp_path, command):
    base = tmp_path / "serving"
    for version in ("100", "200"):
        fx.served_version(base, version)
    extra = ["--reason", "test"] if command == "rollback" else []
    done = _command(tmp_path / "state", command, "--model-dir", base, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "" and _quiet(done.stdout)
    assert _logs(tmp_path / "state") == []


def test_client_library_lines_reach_the_log_after_a_google_client_was_made(tmp_path, monkeypatch):
    """google-api-core stops the "google" logger propagating when it makes its first client
    (a Vertex endpoint's, a PipelineJob's); inside `to_file` its lines still reach the log."""
    import logging

    from google.api_core import client_logging

    google = logging.getLogger("google")
    monkeypatch.setattr(client_logging, "_LOGGING_INITIALIZED", False)
    monkeypatch.setattr(google, "propagate", True)
    monkeypatch.setattr(google, "level", logging.NOTSET)
    monkeypatch.setattr(google, "handlers", [])  # a logger no one configured
    client_logging.initialize_logging()  # what the first client does
    assert google.propagate is False
    log = tmp_path / "cli.log"
    with library_log.to_file(log):
        logging.getLogger("google.cloud.aiplatform").info("a line of the client library")
    assert "a line of the client library" in log.read_text()
    assert (google.propagate, google.level) == (False, logging.NOTSET)  # as it was
