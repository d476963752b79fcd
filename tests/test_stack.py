"""The two stacks (components.runtime.stack): which lock a host gets, what differs between them, and
the pure parts of `make test-current-stack` (the chroot run itself is that target's job)."""

import json
import re
import sys
from pathlib import Path

import pytest

from components.runtime import stack
from pipeline import topology
from pipeline.local import runner as local_runner
from pipeline.local import stack_check
from pipeline.settings.config import TrainingConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "glibc, expected",
    [
        ("2.36", stack.LEGACY),  # Debian 12, this project's machines
        ("glibc 2.38", stack.LEGACY),
        ("2.39", stack.CURRENT),  # the oldest TFDV 1.21 installs on
        ("2.41", stack.CURRENT),  # Debian 13
        ("3.0", stack.CURRENT),
    ],
)
def test_the_lock_follows_the_hosts_glibc(glibc, expected):
    chosen, reason = stack.stack_for_glibc(glibc)
    assert chosen is expected
    assert reason.startswith(f"stack: {expected.name} (") and expected.lock in reason
    assert "\n" not in reason


def test_a_named_stack_wins_and_nonsense_is_refused_by_name(capsys):
    assert stack.choose("legacy")[0] is stack.LEGACY
    assert stack.choose("current")[0] is stack.CURRENT
    assert stack.main(["current"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == ["current", "requirements-current.lock", "3.13"]
    assert "STACK=current" in err
    assert stack.main(["newest"]) == 1
    assert "'newest'" in capsys.readouterr().err


def _pins(lock: str) -> dict[str, str]:
    text = (REPO_ROOT / lock).read_text()
    return dict(re.findall(r"^([a-z0-9_.\-]+)(?:\[[^\]]*\])?==(\S+)", text, re.MULTILINE))


def test_each_lock_pins_its_stack():
    legacy, current = _pins(stack.LEGACY.lock), _pins(stack.CURRENT.lock)
    assert (legacy["tfx"], legacy["tensorflow"], legacy["protobuf"][:2]) == (
        "1.16.0",
        "2.16.2",
        "3.",
    )
    assert (current["tfx"], current["tensorflow"], current["protobuf"][:2]) == (
        "1.21.0",
        "2.21.0",
        "6.",
    )
    assert current["kfp"].startswith("2.16.") and current["tf-keras"].startswith("2.21.")
    header = (REPO_ROOT / stack.CURRENT.lock).read_text()
    assert "--python-version 3.13" in header and "x86_64-manylinux_2_39" in header


def test_kfp_local_shares_the_environment_only_on_the_current_stack(monkeypatch):
    monkeypatch.setattr(stack, "running_stack", lambda: stack.LEGACY)
    assert stack.kfp_local_python(REPO_ROOT) == REPO_ROOT / ".venv-kfp" / "bin" / "python"
    monkeypatch.setattr(stack, "running_stack", lambda: stack.CURRENT)
    assert stack.kfp_local_python(REPO_ROOT) == Path(sys.executable)


def test_the_eval_config_builds_from_the_protos_both_tfma_releases_have():
    config = topology.eval_config(0.8, 0.01)
    assert type(config) is stack.tfma_config().EvalConfig
    (threshold,) = config.metrics_specs[0].metrics[0].per_slice_thresholds
    assert threshold.threshold.value_threshold.lower_bound.value == pytest.approx(0.8)


def test_the_evaluator_is_told_the_model_type_instead_of_loading_the_model_to_guess(
    monkeypatch,
):
    from tensorflow_model_analysis.utils import model_util

    loaded = []
    monkeypatch.setattr(model_util.tf.keras.models, "load_model", lambda *a, **k: loaded.append(a))
    spec = topology.eval_config(0.8, 0.01).model_specs[0]
    assert model_util.get_model_type(spec, "/models/candidate/Format-Serving") == "tf_generic"
    assert loaded == []


def test_a_run_that_fails_before_any_component_reports_its_own_error(tmp_path, monkeypatch):
    """Under TFX 1.21 create_pipeline failed, and the empty metadata store's 'holds no
    pipeline run' was all the user saw."""

    def broken(config):
        raise AttributeError("module 'tfma' has no attribute 'PerSliceMetricThreshold'")

    monkeypatch.setattr(topology, "create_pipeline", broken)
    config = local_runner.local_config(tmp_path, "/data/c.tar.gz", "f", TrainingConfig())
    with pytest.raises(AttributeError, match="PerSliceMetricThreshold"):
        local_runner.run(config, tmp_path)


def test_the_image_installs_through_the_script_the_check_runs():
    dockerfile = (REPO_ROOT / "Dockerfile.current").read_text()
    assert re.search(r"^FROM debian:trixie", dockerfile, re.MULTILINE)
    assert "stack/install.sh python3 /opt/venv requirements-current.lock" in dockerfile
    check = (REPO_ROOT / "stack" / "debian13-check.sh").read_text()
    assert "stack/install.sh python3 /opt/venv requirements-current.lock" in check
    (apt,) = re.findall(r"--no-install-recommends \\\s+([^\\&]+)", dockerfile)
    (packages,) = re.findall(r"^PACKAGES=(\S+)", check, re.MULTILINE)
    assert sorted(apt.split()) == sorted(packages.split(","))


def _summary(**changes) -> dict:
    summary = {
        "failed": None,
        "pushed": True,
        "stage_states": dict.fromkeys(stack_check.EXPECTED_NODES, "complete"),
    }
    return {**summary, **changes}


def test_the_check_wants_every_component_complete_and_a_push():
    assert stack_check.run_problems(_summary()) == []
    states = {**_summary()["stage_states"], "Evaluator": "failed"}
    states.pop("Trainer")
    problems = stack_check.run_problems(_summary(stage_states=states, pushed=False))
    assert problems == [
        "Trainer is missing, not complete",
        "Evaluator is failed, not complete",
        "no model was pushed",
    ]
    assert stack_check.run_problems(_summary(failed="RuntimeError: x")) == [
        "the run failed: RuntimeError: x"
    ]


def _answers(folder: str, probabilities: list[float]) -> list[str]:
    return [
        json.dumps({"file": f"{folder}/{i}.png", "top": [{"class": "cat", "probability": p}]})
        for i, p in enumerate(probabilities)
    ]


def test_the_check_wants_the_host_to_serve_the_same_answers(tmp_path):
    current = _answers("/tmp/check/images", [0.5, 0.9])
    assert stack_check.serving_problems(current, _answers("/var/root/images", [0.5002, 0.9])) == []
    (problem,) = stack_check.serving_problems(current, _answers("/x", [0.5, 0.8]))
    assert problem.startswith("1.png: other stack")
    assert stack_check.serving_problems(current, _answers("/x", [0.5])) == [
        "1.png: the other stack gave no answer"
    ]
    assert stack_check.serving_problems([], []) == ["its own stack classified no image"]
    paths = [tmp_path / name for name in ("summary.json", "current.jsonl", "host.jsonl")]
    paths[0].write_text(json.dumps(_summary(pushed_version_dir="/s/1")))
    paths[1].write_text("\n".join(current))
    paths[2].write_text("\n".join(_answers("/y", [0.5, 0.9])))
    assert stack_check.main([str(p) for p in paths]) == 0
    paths[0].write_text("{")
    assert stack_check.main([str(p) for p in paths]) == 1


def test_both_stacks_need_a_tpu_image_named():
    """The pipeline image's TensorFlow is the CPU build on either stack."""
    for running in (stack.LEGACY, stack.CURRENT):
        assert stack.tpu_image_problem(running, "r/cifar10-tpu:1") == ""
        assert stack.tpu_image_problem(running, "", "v3-8").startswith(
            "--tpu-type v3-8 trains on a Cloud TPU, which needs the TPU trainer image: "
            "add --tpu-image IMAGE"
        )
    assert "Dockerfile target tpu-trainer" in stack.tpu_image_problem(stack.LEGACY, "")
    assert "compile on the legacy stack" in stack.tpu_image_problem(stack.CURRENT, "")


def test_compile_on_the_current_stack_refuses_tpu_training_without_a_tpu_image(
    monkeypatch, tmp_path, capsys
):
    from pipeline import cli

    monkeypatch.setattr(stack, "running_stack", lambda: stack.CURRENT)
    args = [
        "compile", "--target", "vertex", "--project", "p", "--region", "us-central1",
        "--pipeline-root", "gs://b/r", "--image", "r/cifar10:1", "--data", "gs://b/c.tar.gz",
    ]  # fmt: skip
    assert cli.main([*args, "--output", str(tmp_path / "tpu.json")]) == 2
    assert "add --tpu-image IMAGE" in capsys.readouterr().err
    assert not (tmp_path / "tpu.json").exists()
    cpu = ["--worker-machine-type", "n1-standard-8", "--output", str(tmp_path / "cpu.json")]
    assert cli.main([*args, *cpu]) == 0  # CPU workers need no TPU image
    named = ["--tpu-image", "r/cifar10-tpu:1", "--output", str(tmp_path / "named.json")]
    assert cli.main([*args, *named]) == 0


@pytest.mark.parametrize("data", ["", "/no/such/archive.tar.gz"])
def test_the_current_stack_bench_refuses_to_start_without_its_data(tmp_path, data):
    """`make bench-current-stack` trains on $CIFAR10_DATA: without it, one line before
    anything is built, copied or mounted."""
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "CIFAR10_DATA": data}
    done = subprocess.run(
        [str(REPO_ROOT / "stack" / "debian13-check.sh"), str(tmp_path / "root"), "--bench"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: --bench needs CIFAR10_DATA, the archive to train on (make sets it)"
    )
    assert not (tmp_path / "root").exists()
