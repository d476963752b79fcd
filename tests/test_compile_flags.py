"""Flags that cannot silently fail later (issue 56, item 3): `compile` refuses every flag its
target cannot honour instead of dropping it, refuses a Cloud TPU pool without a TPU image on
either stack, and carries --beam-arg and --no-cache into the file for both targets. Each
refusal is one line naming the flag, exit status 2, nothing written, before TFX is imported."""

import json
import os
import subprocess
import sys

import pytest

from components import stack
from components.reference_images import MAX_CLASS_DROP
from pipeline import cli
from pipeline.common import kfp_platform
from pipeline.kfp_ir import UNCACHED_TASKS

from conftest import PIPELINE_NODES

IMAGE = "registry.example.com/ml/cifar10-pipeline:v1"
TPU_IMAGE = IMAGE + "-tpu"
# s3:// where tensorflow-io exists (the legacy stack); the current stack refuses it.
STORE = "s3" if stack.running_stack() is stack.LEGACY else "gs"
KUBEFLOW = ["compile", "--target", "kubeflow", "--pipeline-root", f"{STORE}://bucket-x/root"]
KUBEFLOW += ["--image", IMAGE, "--data", f"{STORE}://bucket-x/cifar-10-binary.tar.gz"]
VERTEX = ["compile", "--target", "vertex", "--project", "proj-x", "--region", "us-central1"]
VERTEX += ["--pipeline-root", "gs://bucket-x/root", "--image", IMAGE, "--tpu-image", TPU_IMAGE]
VERTEX += ["--data", "gs://bucket-x/cifar-10-binary.tar.gz"]
S3_ENDPOINT = "--s3_endpoint_url=http://127.0.0.1:8333"
# The steps whose executors run Beam pipelines.
BEAM_STEPS = ("Cifar10ExampleGen", "StatisticsGen", "ExampleValidator", "Evaluator")

# Flags only `--target vertex` honours, each with a value it would otherwise accept; some
# pass the parser's default explicitly, which is refused as well.
VERTEX_ONLY = [
    ["--project", "proj-x"],
    ["--region", "us-central1"],
    ["--tpu-type", "v2-8"],
    ["--tpu-image", TPU_IMAGE],
    ["--tpu-cores", "8"],
    ["--endpoint", "cifar10-endpoint"],
    ["--dataflow-region", "us-central1"],
    ["--dataflow-temp-location", "gs://bucket-x/tmp"],
    ["--service-account", "sa@proj-x.iam.gserviceaccount.com"],
    ["--network", "projects/1/global/networks/vpc-1"],
    ["--label", "team=vision"],
    ["--worker-machine-type", "n1-standard-8"],
    ["--worker-gpus", "1"],
    ["--worker-gpu-type", "NVIDIA_TESLA_T4"],
    ["--worker-gpus", "0"],  # the default, given
    ["--tpu-type", ""],  # the default, given
]
# Flags only `--target kubeflow` honours.
KUBEFLOW_ONLY = [
    ["--trainer-cpu", "4"],
    ["--trainer-memory-gb", "16"],
    ["--trainer-gpus", "1"],
    ["--gpu-resource", "amd.com/gpu"],
    ["--gpu-resource", "nvidia.com/gpu"],  # the default, given
    ["--trainer-cpu", "0"],  # the default, given
    ["--s3-endpoint", "http://store.example.com:9000"],
    ["--s3-secret", "team-store-keys"],
    ["--s3-secret", ""],  # none, given
]


def _refused(args: list[str], flag: str, tmp_path, capsys) -> str:
    """Compiling with `args` exits 2 with one line naming `flag` and writes nothing."""
    output = tmp_path / "out" / "pipeline.yaml"
    assert cli.main([*args, "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and flag in err, err
    assert not output.exists() and not output.parent.exists()
    return err


@pytest.mark.parametrize("flags", VERTEX_ONLY, ids=" ".join)
def test_kubeflow_refuses_each_vertex_flag(flags, tmp_path, capsys):
    err = _refused(KUBEFLOW + flags, flags[0], tmp_path, capsys)
    assert err.startswith(f"error: {flags[0]} is for --target vertex; "), err


@pytest.mark.parametrize("flags", KUBEFLOW_ONLY, ids=" ".join)
def test_vertex_refuses_each_kubeflow_flag(flags, tmp_path, capsys):
    err = _refused(VERTEX + flags, flags[0], tmp_path, capsys)
    assert err.startswith(f"error: {flags[0]} is for --target kubeflow; "), err


def test_the_endpoint_refusal_says_why(tmp_path, capsys):
    err = _refused(KUBEFLOW + ["--endpoint", "e"], "--endpoint", tmp_path, capsys)
    assert err == (
        "error: --endpoint is for --target vertex; "
        "a Kubeflow file cannot deploy to a Vertex endpoint\n"
    )


def test_the_default_target_is_vertex_and_refuses_kubeflow_flags(tmp_path, capsys):
    args = [a for a in VERTEX if a not in ("--target", "vertex")]
    _refused(args + ["--trainer-gpus", "2"], "--trainer-gpus", tmp_path, capsys)


@pytest.mark.parametrize("running", [stack.LEGACY, stack.CURRENT], ids=lambda s: s.name)
@pytest.mark.parametrize("tpu_flags, tpu_type", [([], "v2-8"), (["--tpu-type", "v3-8"], "v3-8")])
def test_a_tpu_pool_without_a_tpu_image_is_refused_on_both_stacks(
    running, tpu_flags, tpu_type, monkeypatch, tmp_path, capsys
):
    """Without --tpu-image the TPU pool would run the CPU pipeline image: accepted at
    compile and submit, failing only on a paid TPU node."""
    monkeypatch.setattr(stack, "running_stack", lambda: running)
    args = [a for a in VERTEX if a not in ("--tpu-image", TPU_IMAGE)] + tpu_flags
    err = _refused(args, "--tpu-image", tmp_path, capsys)
    assert err.startswith(
        f"error: --tpu-type {tpu_type} trains on a Cloud TPU, which needs the TPU trainer "
        "image: add --tpu-image IMAGE"
    ), err
    assert "--worker-machine-type" in err


REFUSE_THEN_LIST_HEAVY_MODULES = """
import json, sys
from pipeline.cli import main
statuses = [main(args) for args in json.loads(sys.argv[1])]
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"tensorflow", "tfx", "apache_beam"})
print(json.dumps({"statuses": statuses, "heavy": heavy}))
"""


def test_refusals_come_before_tfx_is_imported(tmp_path):
    """One process, three refusals: a vertex flag on Kubeflow, a kubeflow flag on Vertex, a
    TPU pool without its image; none imports TensorFlow, TFX or Beam."""
    output = ["--output", str(tmp_path / "p.yaml")]
    cases = [
        [*KUBEFLOW, "--endpoint", "e", *output],
        [*VERTEX, "--trainer-cpu", "2", *output],
        [*(a for a in VERTEX if a not in ("--tpu-image", TPU_IMAGE)), *output],
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run(
        [sys.executable, "-c", REFUSE_THEN_LIST_HEAVY_MODULES, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply == {"statuses": [2, 2, 2], "heavy": []}, done.stderr[-3000:]
    assert not (tmp_path / "p.yaml").exists()


def _compiled(tmp_path_factory, name: str, args: list[str]) -> dict:
    path = tmp_path_factory.mktemp(name) / "pipeline.yaml"
    assert cli.main([*args, f"--beam-arg={S3_ENDPOINT}", "--output", str(path)]) == 0
    return kfp_platform.read_pipeline_file(path)[0]


@pytest.fixture(scope="module")
def kubeflow_no_cache(tmp_path_factory):
    return _compiled(
        tmp_path_factory,
        "kubeflow-flags",
        [*KUBEFLOW, "--no-cache", "--accept-labels", "--max-class-drop", "0.3"],
    )


@pytest.fixture(scope="module")
def vertex_with_beam_arg(tmp_path_factory):
    return _compiled(tmp_path_factory, "vertex-flags", VERTEX)


def _beam_args(spec: dict, step: str) -> list[str]:
    return spec["deploymentSpec"]["executors"][f"{step}_executor"]["container"]["args"]


@pytest.mark.parametrize("step", BEAM_STEPS)
def test_kubeflow_beam_steps_get_the_beam_arg(kubeflow_no_cache, step):
    assert S3_ENDPOINT in _beam_args(kubeflow_no_cache, step)


@pytest.mark.parametrize("step", BEAM_STEPS)
def test_vertex_beam_steps_get_the_beam_arg(vertex_with_beam_arg, step):
    assert S3_ENDPOINT in _beam_args(vertex_with_beam_arg, step)


def test_kubeflow_no_cache_turns_caching_off_in_every_task(kubeflow_no_cache):
    """Off is the proto's default: a task without cachingOptions runs uncached."""
    tasks = kubeflow_no_cache["root"]["dag"]["tasks"]
    assert set(tasks) == set(PIPELINE_NODES) and set(UNCACHED_TASKS) <= set(tasks)
    caching = {
        name: task.get("cachingOptions", {}).get("enableCache", False)
        for name, task in tasks.items()
    }
    assert set(caching.values()) == {False}, caching


def test_vertex_honours_the_flags_it_shares(vertex_with_beam_arg):
    """The TPU image given, the TPU pool runs it; the pipeline's steps run the pipeline image."""
    custom = vertex_with_beam_arg["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    custom = json.loads(custom["custom_config"]["runtimeValue"]["constant"])
    [pool] = custom["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert pool["container_spec"]["image_uri"] == TPU_IMAGE
    executors = vertex_with_beam_arg["deploymentSpec"]["executors"].values()
    assert {e["container"]["image"] for e in executors} == {IMAGE}


def test_both_targets_compile_the_gates_overrides(kubeflow_no_cache, vertex_with_beam_arg):
    """--accept-labels (and --accept-drift, not given) reach the gate's parameters."""
    for spec, accepted in ((kubeflow_no_cache, 1), (vertex_with_beam_arg, 0)):
        gate = spec["root"]["dag"]["tasks"]["DataValidationGate"]["inputs"]["parameters"]
        assert gate["accept_labels"]["runtimeValue"]["constant"] == accepted
        assert gate["accept_drift"]["runtimeValue"]["constant"] == 0


def test_both_targets_compile_the_evaluators_class_margin(kubeflow_no_cache, vertex_with_beam_arg):
    """--max-class-drop (and its default) reach the Evaluator's parameters."""
    for spec, margin in ((kubeflow_no_cache, 0.3), (vertex_with_beam_arg, MAX_CLASS_DROP)):
        evaluator = spec["root"]["dag"]["tasks"]["Evaluator"]["inputs"]["parameters"]
        assert evaluator["max_class_drop"]["runtimeValue"]["constant"] == margin
