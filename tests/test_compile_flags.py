"""Flags that cannot silently fail later (issue 56, item 3): `compile` refuses every flag its
target cannot honour instead of dropping it, refuses a Cloud TPU pool without a TPU image on
either stack, and carries --beam-arg and --no-cache into the file for both targets. Each
refusal is one line naming the flag, exit status 2, nothing written, before TFX is imported.

Every flag is honoured or refused (issue 63): one table, FLAG_TABLE, has a row for each flag
of `compile` and `submit`, with what each target does with it: the value where it must land
in the compiled file, or the one-line refusal. A flag added to the parser without a row fails
`test_every_flag_has_a_row_for_both_targets`."""

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from components.checks.reference_images import MAX_CLASS_DROP
from components.night_report.message import NOTIFY_VARIABLE
from components.runtime import stack
from pipeline import cli
from pipeline.common import compiled_target, kfp_platform
from pipeline.common.compiled_target import pipeline_tasks
from pipeline.kfp_ir import UNCACHED_TASKS
from pipeline.kubeflow import submit as kubeflow_submit
from pipeline.vertex import pipeline_file as vertex_file
from pipeline.vertex import submit as vertex_submit
from pipeline.vertex.submit import WAIT_RETRY_SECONDS

from conftest import PIPELINE_NODES

V, K = compiled_target.VERTEX, compiled_target.KUBEFLOW
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
    tasks = pipeline_tasks(kubeflow_no_cache)
    assert set(tasks) == {*PIPELINE_NODES, "NightReport"} and set(UNCACHED_TASKS) <= set(tasks)
    caching = {
        name: task.get("cachingOptions", {}).get("enableCache", False)
        for name, task in tasks.items()
    }
    assert set(caching.values()) == {False}, caching


def test_vertex_honours_the_flags_it_shares(vertex_with_beam_arg):
    """The TPU image given, the TPU pool runs it; the pipeline's steps run the pipeline image."""
    custom = pipeline_tasks(vertex_with_beam_arg)["Trainer"]["inputs"]["parameters"]
    custom = json.loads(custom["custom_config"]["runtimeValue"]["constant"])
    [pool] = custom["ai_platform_training_args"]["job_spec"]["worker_pool_specs"]
    assert pool["container_spec"]["image_uri"] == TPU_IMAGE
    executors = vertex_with_beam_arg["deploymentSpec"]["executors"].values()
    assert {e["container"]["image"] for e in executors} == {IMAGE}


def test_both_targets_compile_the_gates_overrides(kubeflow_no_cache, vertex_with_beam_arg):
    """--accept-labels (and --accept-drift, not given) reach the gate's parameters."""
    for spec, accepted in ((kubeflow_no_cache, 1), (vertex_with_beam_arg, 0)):
        gate = pipeline_tasks(spec)["DataValidationGate"]["inputs"]["parameters"]
        assert gate["accept_labels"]["runtimeValue"]["constant"] == accepted
        assert gate["accept_drift"]["runtimeValue"]["constant"] == 0


def test_both_targets_compile_the_evaluators_class_margin(kubeflow_no_cache, vertex_with_beam_arg):
    """--max-class-drop (and its default) reach the Evaluator's parameters."""
    for spec, margin in ((kubeflow_no_cache, 0.3), (vertex_with_beam_arg, MAX_CLASS_DROP)):
        evaluator = pipeline_tasks(spec)["Evaluator"]["inputs"]["parameters"]
        assert evaluator["max_class_drop"]["runtimeValue"]["constant"] == margin


# --- submit reads the file's target (issue 63) ---

# Where nothing listens: a dry run, or a refusal, must not reach it.
NO_HOST = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def submit_files(tmp_path_factory) -> dict[str, Path]:
    """A file of each target and form: Vertex YAML and the older PipelineJob JSON, Kubeflow
    on gs:// (one YAML document) and on the KUBEFLOW store (two on s3://: the platform spec)."""
    folder = tmp_path_factory.mktemp("submit-files")
    gs = ["--pipeline-root", "gs://bucket-x/root", "--data", "gs://bucket-x/c.tar.gz"]
    files = {
        "vertex": (VERTEX, "vertex.yaml"),
        "vertex-json": (VERTEX, "vertex.json"),
        "kubeflow": (KUBEFLOW, "kubeflow.yaml"),
        "kubeflow-gs": ([*KUBEFLOW, *gs], "kubeflow-gs.yaml"),
    }
    for args, name in files.values():
        assert cli.main([*args, "--output", str(folder / name)]) == 0
    return {key: folder / name for key, (_, name) in files.items()}


@pytest.mark.parametrize(
    "file, flags, compiled",
    [
        ("kubeflow-gs", ["--project", "proj-x", "--region", "us-central1"], K),
        ("kubeflow", [], K),  # two YAML documents on s3://
        ("vertex", ["--target", K, "--host", NO_HOST], V),
        ("vertex-json", ["--target", K, "--host", NO_HOST], V),
    ],
)
def test_submit_refuses_a_file_compiled_for_the_other_target(
    submit_files, file, flags, compiled, capsys
):
    """The file says which target it is for (local-kfp's check, compiled_target): given with
    the other --target, one line names the one to pass, before any network."""
    path = submit_files[file]
    capsys.readouterr()
    assert cli.main(["submit", str(path), *flags, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {path} was compiled for --target {compiled} ("), err
    assert err.strip().endswith(f"; pass --target {compiled}"), err


@pytest.mark.parametrize("file", ["vertex", "vertex-json", "kubeflow", "kubeflow-gs"])
def test_submit_takes_a_file_with_its_own_target(submit_files, file, capsys):
    target = V if file.startswith(V) else K
    flags = ["--target", K, "--host", NO_HOST] if target == K else []
    assert cli.main(["submit", str(submit_files[file]), *flags, "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith({V: "would submit PipelineJob", K: "would create run"}[target])


# --- every flag honoured or refused (issue 63) ---


@dataclass(frozen=True)
class Lands:
    """Given `args`, the command succeeds and `where` finds `expected` in what it made (the
    compiled file, for compile)."""

    args: tuple[str, ...]
    where: Callable[[Any], Any]
    expected: Any


@dataclass(frozen=True)
class Refused:
    """Given `args`, the command exits 2 with one line naming `names`; nothing is written."""

    args: tuple[str, ...]
    names: str


def lands(where: Callable[[Any], Any], expected: Any, *args: str) -> Lands:
    return Lands(args, where, expected)


def given(flag: str, value: Any, where: Callable[[Any], Any]) -> Lands:
    """`flag value` lands as `value` (a number parsed, a string as given)."""
    return Lands((flag, str(value)), where, value)


def only(target: str, refused: tuple[str, ...], *cases) -> dict[str, tuple]:
    """A flag of one target: its cases there; refused with the other, naming the target."""
    other = K if target == V else V
    return {target: cases, other: (Refused(refused, f"{refused[0]} is for --target {target}; "),)}


def both(*cases) -> dict[str, tuple]:
    return {V: cases, K: cases}


class Compiled(NamedTuple):
    spec: dict
    platform: dict
    path: Path
    tmp: Path


def _param(task: str, name: str) -> Callable[[Compiled], Any]:
    return lambda c: (pipeline_tasks(c.spec)[task]["inputs"]["parameters"][name]["runtimeValue"])[
        "constant"
    ]


def _custom(c: Compiled) -> dict:
    return json.loads(_param("Trainer", "custom_config")(c))


def _train(key: str) -> Callable[[Compiled], Any]:
    return lambda c: _custom(c)["training"][key]


def _job(c: Compiled) -> dict:
    return _custom(c)[vertex_file.TRAINING_ARGS_KEY]


def _job_key(*keys: str) -> Callable[[Compiled], Any]:
    def value(c: Compiled) -> Any:
        found = _job(c)
        for key in keys:
            found = found[key]
        return found

    return value


def _serving(c: Compiled) -> dict:
    return json.loads(_param("AtomicPusher", "vertex_serving")(c))


def _replicas(c: Compiled) -> list[int]:
    return [pool["replica_count"] for pool in _pools(c)]


def _pools(c: Compiled) -> list[dict]:
    return _job(c)["job_spec"]["worker_pool_specs"]


def _machine(key: str) -> Callable[[Compiled], Any]:
    return lambda c: _pools(c)[0]["machine_spec"][key]


def _container(step: str) -> Callable[[Compiled], dict]:
    return lambda c: c.spec["deploymentSpec"]["executors"][f"{step}_executor"]["container"]


def _pod(key: str) -> Callable[[Compiled], Any]:
    return lambda c: _container("Trainer")(c)["resources"][key]


def _beam(prefix: str) -> Callable[[Compiled], list[str]]:
    """The StatisticsGen's Beam options starting with `prefix` (every Beam step has the same)."""
    return lambda c: [a for a in _container("StatisticsGen")(c)["args"] if a.startswith(prefix)]


def _accuracy(key: str) -> Callable[[Compiled], Any]:
    """The Evaluator's accuracy threshold `key` (value_threshold, change_threshold)."""

    def threshold(c: Compiled) -> Any:
        metrics = json.loads(_param("Evaluator", "eval_config")(c))["metrics_specs"][0]["metrics"]
        [accuracy] = [m for m in metrics if m["class_name"] == "SparseCategoricalAccuracy"]
        return accuracy["per_slice_thresholds"][0]["threshold"][key]

    return threshold


def _caching(c: Compiled) -> set:
    tasks = pipeline_tasks(c.spec).values()
    return {t.get("cachingOptions", {}).get("enableCache", False) for t in tasks}


def _images(c: Compiled) -> set:
    return {e["container"]["image"] for e in c.spec["deploymentSpec"]["executors"].values()}


def _env(c: Compiled) -> dict:
    return {e["name"]: e["value"] for e in _container("Trainer")(c).get("env", [])}


def _secrets(c: Compiled) -> dict:
    return kfp_platform.secret_variables(c.platform, "Trainer_executor")


def _store_uri(flag: str, path: str, where: Callable[[Compiled], Any]) -> dict[str, tuple]:
    """A URI flag of both targets: gs:// on Vertex, the store of KUBEFLOW on Kubeflow."""
    return {V: (given(flag, f"gs://{path}", where),), K: (given(flag, f"{STORE}://{path}", where),)}


def _target(c: Compiled) -> str:
    return compiled_target.compiled_for(c.spec)[0]


def _notify_env(c: Compiled) -> dict:
    """What the platform spec gives the exit handler's container from secrets."""
    task = pipeline_tasks(c.spec)["NightReport"]
    label = c.spec["components"][task["componentRef"]["name"]]["executorLabel"]
    found = kfp_platform.secret_variables(c.platform, label)
    return {NOTIFY_VARIABLE: found.get(NOTIFY_VARIABLE)}  # beside the store's keys, if any


_SM_SECRET = "projects/p-1/secrets/night-hook"
_HOOK = ("hooks", "token")
_ROOT = lambda c: c.spec["defaultPipelineRoot"]  # noqa: E731
_EXAMPLE_GEN, _GATE = "Cifar10ExampleGen", "DataValidationGate"
_REGRESSION = {"absolute": -0.013, "direction": "HIGHER_IS_BETTER"}
_WORKERS = ("--worker-machine-type", "n1-standard-8")
_T4 = (*_WORKERS, "--worker-gpus", "2", "--worker-gpu-type", "NVIDIA_TESLA_T4")
_DATAFLOW = ("--dataflow-region", "europe-west4", "--dataflow-temp-location", "gs://bucket-x/tmp")
_OTHER_IMAGE = "registry.example.com/ml/other:v2"
_STORE_URL = "http://store.example.com:9000"
_KEYS = {var: ("team-keys", key) for key, var in kfp_platform.SECRET_KEYS.items()}
# On the current stack, which refuses s3://, no file has an s3:// store: the flags are refused.
_ON_S3 = STORE == "s3"
_S3_ENDPOINT = ("--s3-endpoint", _STORE_URL)

# fmt: off
COMPILE_TABLE: dict[str, dict[str, tuple]] = {
    "--target": {V: (given("--target", V, _target),), K: (given("--target", K, _target),)},
    "--project": only(V, ("--project", "p"), given("--project", "p-2", _job_key("project"))),
    "--region": only(
        V, ("--region", "r"),
        given("--region", "europe-west4", lambda c: _custom(c)[vertex_file.VERTEX_REGION_KEY]),
    ),
    "--pipeline-root": _store_uri("--pipeline-root", "bucket-y/r", _ROOT),
    "--image": both(lands(_images, {_OTHER_IMAGE}, "--image", _OTHER_IMAGE)),
    "--data": _store_uri("--data", "bucket-y/d.tar.gz", _param(_EXAMPLE_GEN, "source_uri")),
    "--data-fingerprint": both(
        given("--data-fingerprint", "fp-7", _param(_EXAMPLE_GEN, "source_fingerprint"))
    ),
    "--tpu-type": only(
        V, ("--tpu-type", "v3-8"),
        lands(_machine("accelerator_type"), "TPU_V3", "--tpu-type", "v3-8"),
    ),
    "--tpu-image": only(
        V, ("--tpu-image", "t"),
        given("--tpu-image", "tpu:v9", lambda c: _pools(c)[0]["container_spec"]["image_uri"]),
    ),
    "--tpu-cores": only(
        V, ("--tpu-cores", "8"),
        lands(_machine("accelerator_count"), 8, "--tpu-type", "v3-8", "--tpu-cores", "8"),
        Refused(("--tpu-type", "v3-8", "--tpu-cores", "32"), "--tpu-cores 32 does not match"),
    ),
    "--dataflow-region": only(
        V, _DATAFLOW,
        lands(_beam("--region="), ["--region=europe-west4"], *_DATAFLOW),
        Refused(_DATAFLOW[:2], "--dataflow-temp-location gs://... is required"),
    ),
    "--dataflow-temp-location": only(
        V, _DATAFLOW[2:],
        lands(_beam("--temp_location="), ["--temp_location=gs://bucket-x/tmp"], *_DATAFLOW),
        Refused(_DATAFLOW[2:], "--dataflow-temp-location needs --dataflow-region"),
    ),
    "--endpoint": only(
        V, ("--endpoint", "e"),
        given("--endpoint", "ep-9", lambda c: _serving(c)["endpoint"]),
    ),
    "--endpoint-keep": only(
        V, ("--endpoint", "e", "--endpoint-keep", "3"),
        lands(lambda c: _serving(c)["keep"], 3, "--endpoint", "e", "--endpoint-keep", "3"),
        Refused(("--endpoint-keep", "3"), "--endpoint-keep needs --endpoint"),
        Refused(("--endpoint", "e", "--endpoint-keep", "-1"), "--endpoint-keep must be 0 or more"),
    ),
    "--worker-machine-type": only(
        V, _WORKERS, lands(_machine("machine_type"), _WORKERS[1], *_WORKERS)
    ),
    "--worker-gpus": only(V, ("--worker-gpus", "2"), lands(_machine("accelerator_count"), 2, *_T4)),
    "--worker-gpu-type": only(
        V, ("--worker-gpu-type", _T4[-1]), lands(_machine("accelerator_type"), _T4[-1], *_T4)
    ),
    "--service-account": only(
        V, ("--service-account", "sa@p.iam"),
        given("--service-account", "sa@p.iam", _job_key("job_spec", "service_account")),
    ),
    "--network": only(
        V, ("--network", "projects/1/global/networks/n"),
        given("--network", "projects/1/global/networks/n", _job_key("job_spec", "network")),
    ),
    "--label": only(
        V, ("--label", "a=b"), lands(_job_key("labels"), {"a": "b"}, "--label", "a=b")
    ),
    "--trainer-cpu": only(
        K, ("--trainer-cpu", "3"), given("--trainer-cpu", 3.0, _pod("cpuRequest"))
    ),
    "--trainer-memory-gb": only(
        K, ("--trainer-memory-gb", "7"), given("--trainer-memory-gb", 7.0, _pod("memoryRequest"))
    ),
    "--trainer-gpus": only(
        K, ("--trainer-gpus", "2"),
        lands(_pod("accelerator"), {"count": "2", "type": "nvidia.com/gpu"}, "--trainer-gpus", "2"),
    ),
    "--gpu-resource": only(
        K, ("--gpu-resource", "amd.com/gpu"),
        lands(
            _pod("accelerator"), {"count": "1", "type": "amd.com/gpu"},
            "--trainer-gpus", "1", "--gpu-resource", "amd.com/gpu",
        ),
        Refused(("--gpu-resource", "amd.com/gpu"), "--gpu-resource needs --trainer-gpus"),
        Refused(
            ("--trainer-gpus", "0", "--gpu-resource", "amd.com/gpu"),
            "--gpu-resource needs --trainer-gpus",
        ),
    ),
    "--s3-endpoint": only(
        K, _S3_ENDPOINT,
        lands(_env, {kfp_platform.ENDPOINT_VARIABLE: _STORE_URL}, *_S3_ENDPOINT) if _ON_S3
        else Refused(_S3_ENDPOINT, "--s3-endpoint is for an s3:// --pipeline-root"),
    ),
    "--s3-secret": only(
        K, ("--s3-secret", "k"),
        lands(_secrets, _KEYS, "--s3-secret", "team-keys") if _ON_S3
        else Refused(("--s3-secret", "k"), "--s3-secret is for an s3:// --pipeline-root"),
    ),
    "--output": both(
        lands(lambda c: c.path.relative_to(c.tmp), Path("o/p.yaml"), "--output", "{tmp}/o/p.yaml")
    ),
    "--log-file": both(
        lands(lambda c: (c.tmp / "log").stat().st_size > 0, True, "--log-file", "{tmp}/log")
    ),
    "--beam-arg": both(
        lands(_beam("--disk_size_gb"), ["--disk_size_gb=5"], "--beam-arg=--disk_size_gb=5")
    ),
    "--no-cache": both(lands(_caching, {False}, "--no-cache")),
    "--model": both(given("--model", "airbench94", _train("model"))),
    "--strategy": {
        V: (
            given("--strategy", "tpu", _train("strategy")),
            Refused(("--strategy", "mirrored"), "--strategy mirrored does not fit"),
        ),
        K: (given("--strategy", "mirrored", _train("strategy")),),
    },
    "--tpu": {
        V: (
            given("--tpu", "tpu-node-1", _train("tpu")),
            Refused((*_WORKERS, "--tpu", "tpu-node-1"), "--tpu and --worker-machine-type"),
        ),
        K: (given("--tpu", "tpu-node-1", _train("tpu")),),
    },
    "--cpu-replicas": {
        V: (Refused(("--cpu-replicas", "4"), "--cpu-replicas splits a local CPU"),),
        K: (given("--cpu-replicas", 4, _train("cpu_replicas")),),
    },
    "--workers": {
        V: (lands(_replicas, [1, 2], *_WORKERS, "--workers", "3"),),
        K: (
            Refused(("--workers", "2"), "--workers"),
            Refused(("--workers", "2", "--strategy", "mirrored"), "--workers 2 is not compiled"),
            Refused(("--workers", "0"), "--workers 0 is not compiled"),
        ),
    },
    "--epochs": both(given("--epochs", 7, _train("epochs"))),
    "--per-replica-batch-size": both(
        given("--per-replica-batch-size", 33, _train("per_replica_batch_size"))
    ),
    "--learning-rate": both(given("--learning-rate", 0.0123, _train("learning_rate"))),
    "--precision": both(given("--precision", "mixed_float16", _train("precision"))),
    "--seed": both(given("--seed", 4242, _train("seed"))),
    "--warm-start": both(lands(_train("warm_start"), True, "--warm-start")),
    "--eval-fraction": both(given("--eval-fraction", 0.17, _param(_EXAMPLE_GEN, "eval_fraction"))),
    "--accuracy-gate": both(
        lands(_accuracy("value_threshold"), {"lower_bound": 0.77}, "--accuracy-gate", "0.77")
    ),
    "--max-regression": both(
        lands(_accuracy("change_threshold"), _REGRESSION, "--max-regression", "0.013")
    ),
    "--max-class-drop": both(
        given("--max-class-drop", 0.31, _param("Evaluator", "max_class_drop"))
    ),
    "--accept-drift": both(lands(_param(_GATE, "accept_drift"), 1, "--accept-drift")),
    "--accept-labels": both(lands(_param(_GATE, "accept_labels"), 1, "--accept-labels")),
    "--accept-duplicates": both(
        lands(_param(_GATE, "accept_duplicates"), 1, "--accept-duplicates")
    ),
    "--keep-versions": both(
        given("--keep-versions", 4, _param("AtomicPusher", "keep_versions")),
        Refused(("--keep-versions", "1"), "--keep-versions: must be at least 2"),
    ),
    "--notify-secret": {
        V: (
            given("--notify-secret", _SM_SECRET, _param("NightReport", "notify_secret")),
            Refused(("--notify-secret", "hooks:url"), "name a Secret Manager secret"),
        ),
        K: (
            lands(_notify_env, {NOTIFY_VARIABLE: _HOOK}, "--notify-secret", "hooks:token"),
            Refused(("--notify-secret", "projects/p/secrets/s"), "name a Kubernetes secret"),
        ),
    },
}


class Submitted(NamedTuple):
    """What `submit` handed on: the stand-ins' calls (the submission, the Vertex API endpoint,
    the wait's poll and retry seconds) and what it printed."""

    calls: dict
    out: str
    tmp: Path


def _sent(attribute: str) -> Callable[[Submitted], Any]:
    """The submission's `attribute`, as the stand-in for aiplatform's PipelineJob or kfp's
    Client was given it."""
    return lambda c: getattr(c.calls["submission"], attribute)


def _sent_to(c: Submitted) -> str:
    return c.calls["target"]


STAND_IN_LOG = "a client library's line (stand-in)"


def _logged(c: Submitted) -> bool:
    """Whether the client library's log line went to the --log-file given."""
    return STAND_IN_LOG in (c.tmp / "log").read_text()


def _dry_run(c: Submitted) -> tuple:
    return c.calls, c.out.split(" ")[0]


_WAIT_DEFAULTS = (30.0, WAIT_RETRY_SECONDS)
_WAITS = "wait for the end, polling every {} s through up to {} s of network or server errors"


def _shown(field: str) -> Callable[[Submitted], list[str]]:
    """What a dry run printed in its `field` lines; nothing was handed on."""
    prefix = f"  {field:<10} "
    return lambda c: [
        line.removeprefix(prefix) for line in c.out.splitlines() if line.startswith(prefix)
    ] if not c.calls else ["(handed on)"]

SUBMIT_TABLE: dict[str, dict[str, tuple]] = {
    "--target": {
        V: (given("--target", V, _sent_to), Refused(("--target", K), "; pass --target vertex")),
        K: (given("--target", K, _sent_to), Refused(("--target", V), "; pass --target kubeflow")),
    },
    "--project": only(
        V, ("--project", "proj-x"),
        given("--project", "proj-x", _sent("project")),
        Refused(("--project", "proj-y"), "was compiled for project 'proj-x', not 'proj-y'"),
    ),
    "--region": only(
        V, ("--region", "us-central1"),
        given("--region", "us-central1", _sent("region")),
        Refused(("--region", "europe-west4"), "was compiled for region 'us-central1'"),
    ),
    "--service-account": only(
        V, ("--service-account", "sa@p.iam"),
        given("--service-account", "sa@p.iam", _sent("service_account")),
    ),
    "--network": only(
        V, ("--network", "projects/1/global/networks/n"),
        given("--network", "projects/1/global/networks/n", _sent("network")),
    ),
    "--label": only(
        V, ("--label", "run=nightly"),
        lands(lambda c: dict(_sent("labels")(c)), {"run": "nightly"}, "--label", "run=nightly"),
    ),
    "--cache": only(V, ("--cache",), lands(_sent("enable_caching"), True, "--cache")),
    "--no-cache": only(V, ("--no-cache",), lands(_sent("enable_caching"), False, "--no-cache")),
    "--wait": only(
        V, ("--wait",),
        lands(lambda c: c.calls["wait"], _WAIT_DEFAULTS, "--wait"),
        lands(_shown("then"), [_WAITS.format(30, 600)], "--wait", "--dry-run"),
    ),
    "--poll-seconds": only(
        V, ("--poll-seconds", "5"),
        lands(lambda c: c.calls["wait"][0], 5.0, "--wait", "--poll-seconds", "5"),
        lands(
            _shown("then"), [_WAITS.format(5, 600)], "--wait", "--poll-seconds", "5", "--dry-run"
        ),
        Refused(("--poll-seconds", "5"), "--poll-seconds needs --wait"),
    ),
    "--wait-retry-seconds": only(
        V, ("--wait-retry-seconds", "60"),
        lands(lambda c: c.calls["wait"][1], 60.0, "--wait", "--wait-retry-seconds", "60"),
        lands(
            _shown("then"), [_WAITS.format(30, 60)],
            "--wait", "--wait-retry-seconds", "60", "--dry-run",
        ),
        Refused(("--wait-retry-seconds", "60"), "--wait-retry-seconds needs --wait"),
    ),
    "--api-endpoint": only(
        V, ("--api-endpoint", NO_HOST),
        given("--api-endpoint", NO_HOST, lambda c: c.calls["api_endpoint"]),
        lands(_shown("api"), [NO_HOST], "--api-endpoint", NO_HOST, "--dry-run"),
    ),
    "--host": only(
        K, ("--host", NO_HOST), given("--host", "http://kfp.example.com", _sent("host"))
    ),
    "--namespace": only(
        K, ("--namespace", "team-a"), given("--namespace", "team-a", _sent("namespace"))
    ),
    "--experiment": only(
        K, ("--experiment", "cifar"), given("--experiment", "cifar", _sent("experiment"))
    ),
    "--run-name": only(
        K, ("--run-name", "nightly-1"), given("--run-name", "nightly-1", _sent("run_name"))
    ),
    "--parameter": both(
        lands(lambda c: dict(_sent("parameters")(c)), {"span": 3}, "--parameter", "span=3")
    ),
    "--dry-run": both(lands(_dry_run, ({}, "would"), "--dry-run")),
    "--log-file": both(lands(_logged, True, "--log-file", "{tmp}/log")),
}
# fmt: on
FLAG_TABLE = {"compile": COMPILE_TABLE, "submit": SUBMIT_TABLE}


def parser_flags(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """Every long flag of `command` (but --help), as the parser has them."""
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    actions = commands.choices[command]._actions
    return {o for a in actions for o in a.option_strings if o.startswith("--")} - {"--help"}


def _names(flag: str, args: tuple[str, ...]) -> bool:
    return any(a == flag or a.startswith(f"{flag}=") for a in args)


def rows_missing(parser: argparse.ArgumentParser) -> list[str]:
    """Each flag of the parser's commands in FLAG_TABLE without cases for both targets, or
    with a case that does not give it; each row of a flag that the parser no longer has."""
    missing = []
    for command, table in FLAG_TABLE.items():
        flags = parser_flags(parser, command)
        missing += [f"{command} {flag}: no such flag" for flag in sorted(set(table) - flags)]
        for flag in sorted(flags):
            cases = table.get(flag, {})
            for target in (V, K):
                if not cases.get(target) or not all(_names(flag, c.args) for c in cases[target]):
                    missing.append(f"{command} {flag}: no row for --target {target}")
    return missing


def test_every_flag_has_a_row_for_both_targets():
    """A flag added without a row fails here: say what each target does with it."""
    assert rows_missing(cli.build_parser()) == []


@pytest.mark.parametrize("command", ["compile", "submit"])
def test_a_flag_without_a_row_is_found(command):
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands.choices[command].add_argument("--new-flag")
    assert rows_missing(parser) == [
        f"{command} --new-flag: no row for --target vertex",
        f"{command} --new-flag: no row for --target kubeflow",
    ]


def _cases() -> list:
    return [
        pytest.param(command, target, case, id=f"{command} {target} {' '.join(case.args)}")
        for command, table in FLAG_TABLE.items()
        for cases in table.values()
        for target, target_cases in cases.items()
        for case in target_cases
    ]


def _compile(target: str, case: Lands, tmp_path: Path, capsys) -> Compiled:
    args = [
        *{V: VERTEX, K: KUBEFLOW}[target],
        *(a.replace("{tmp}", str(tmp_path)) for a in case.args),
    ]
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out" / "pipeline.yaml")]
    status = cli.main(args)
    assert status == 0, capsys.readouterr().err
    path = Path(args[len(args) - args[::-1].index("--output")])
    return Compiled(*kfp_platform.read_pipeline_file(path), path, tmp_path)


class _Job:
    resource_name = "projects/proj-x/locations/us-central1/pipelineJobs/j1"


def _stand_ins(monkeypatch) -> dict:
    """aiplatform's PipelineJob (and its wait) and kfp's Client stand-ins: each records what
    `submit` gives it; nothing reaches a network."""
    calls: dict = {}

    def vertex(submission, api_endpoint=""):
        calls.update(target=V, submission=submission, api_endpoint=api_endpoint)
        logging.getLogger("google.cloud.aiplatform").info(STAND_IN_LOG)  # as aiplatform does
        return _Job()

    def wait(job, report, poll_seconds, retry_seconds):
        calls["wait"] = (poll_seconds, retry_seconds)
        return "PIPELINE_STATE_SUCCEEDED"

    def kubeflow(submission):
        calls.update(target=K, submission=submission)
        logging.getLogger("kfp").info(STAND_IN_LOG)
        return "run-1"

    monkeypatch.setattr(vertex_submit, "submit", vertex)
    monkeypatch.setattr(vertex_submit, "wait", wait)
    monkeypatch.setattr(kubeflow_submit, "submit", kubeflow)
    return calls


def _submit(target: str, case, files: dict, tmp_path: Path, monkeypatch, capsys):
    """`submit` of the file compiled for `target`, with `case.args`: its exit status, what it
    handed on and printed, and its error output."""
    base = ["submit", str(files[target])] + (
        ["--target", K, "--host", NO_HOST] if target == K else []
    )
    calls = _stand_ins(monkeypatch)
    capsys.readouterr()
    status = cli.main([*base, *(a.replace("{tmp}", str(tmp_path)) for a in case.args)])
    out, err = capsys.readouterr()
    return status, Submitted(calls, out, tmp_path), err


@pytest.mark.parametrize("command, target, case", _cases())
def test_each_flag_is_honoured_or_refused(
    command, target, case, request, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the libraries' log
    if command == "compile" and isinstance(case, Refused):
        _refused([*{V: VERTEX, K: KUBEFLOW}[target], *case.args], case.names, tmp_path, capsys)
    elif command == "compile":
        assert case.where(_compile(target, case, tmp_path, capsys)) == case.expected
    else:
        files = request.getfixturevalue("submit_files")
        status, made, err = _submit(target, case, files, tmp_path, monkeypatch, capsys)
        if isinstance(case, Refused):
            assert (status, made.calls, made.out) == (2, {}, ""), err
            assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
            assert case.names in err, err
        else:
            assert status == 0, err
            assert case.where(made) == case.expected


def _help_of(flag: str) -> str:
    [compile_parser] = [
        parser
        for name, parser in cli.build_parser()._subparsers._group_actions[0].choices.items()
        if name == "compile"
    ]
    [action] = [a for a in compile_parser._actions if flag in a.option_strings]
    return " ".join(action.help.split())


def test_the_endpoint_help_says_the_serving_folder_still_records_each_version():
    """An endpoint deploy is recorded as a version of the serving folder (vertex_endpoint.py):
    the help must not say it replaces the push."""
    text = _help_of("--endpoint")
    assert "instead of" not in text
    assert "<pipeline-root>/serving" in text and "also" in text


def test_the_data_fingerprint_help_promises_no_caching_the_compiled_file_does_not_do():
    """The compiled ExampleGen is never cached (it reads the served state and the spans on
    every run), so the fingerprint cannot make caching re-ingest anything."""
    assert "Cifar10ExampleGen" in UNCACHED_TASKS
    text = _help_of("--data-fingerprint")
    assert "re-ingest" not in text and "never cached" in text
