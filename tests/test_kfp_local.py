"""`local-kfp`: a compiled pipeline file run by KFP's own local orchestrator (kfp.local, from
the kfp SDK in .venv-kfp), each container step a host process of this environment with the
Dockerfile's ENV. Unit tests on the plan and the Dockerfile; the two kfp.local patches on a
two-step pipeline of plain scripts; end to end on the compiled Kubeflow and Vertex files."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.cifar10_example_gen.spec import SOURCE_URI_KEY
from components.contract import SERVED_STATISTICS_FILE, unpack_digests
from components.runtime import stack
from pipeline import cli
from pipeline.common import compiled_target
from pipeline.common.compiled_target import pipeline_tasks
from pipeline.kfp_local import plan as kfp_plan
from pipeline.local.examples import read_split
from pipeline.settings.config import CONTAINER_PROJECT_ROOT, CONTAINER_SCHEMA_PATH

import cifar_fixtures as fx
from conftest import PIPELINE_NODES, versions
from conftest import cli as run_cli

REPO_ROOT = Path(__file__).resolve().parents[1]
KFP_PYTHON = stack.kfp_local_python(REPO_ROOT)
IMAGE = "registry.example.com/ml/cifar10-pipeline:v1"
ROOT = "gs://bucket-x/root"
DATA = "gs://bucket-x/data/cifar-10-binary.tar.gz"
# Tiny and quick: one epoch, float32 whatever the CPU, a gate the tiny data clears.
FAST = [
    "--epochs",
    "1",
    "--per-replica-batch-size",
    "64",
    "--precision",
    "float32",
    "--accuracy-gate",
    "0.3",
]
TASKS = set(PIPELINE_NODES) | {compiled_target.NIGHT_REPORT_TASK}  # the exit handler too
BEFORE_TRAINING = {
    "Cifar10ExampleGen",
    "ServedState",
    "ImportSchemaGen",
    "StatisticsGen",
    "ExampleValidator",
    "DataValidationGate",
}


def compile_file(path: Path, target: str, data: str = DATA, *extra: str) -> Path:
    args = ["compile", "--target", target, "--pipeline-root", ROOT, "--image", IMAGE]
    if target == "vertex":
        args += ["--project", "proj-x", "--region", "us-central1", "--tpu-image", IMAGE]
    assert cli.main([*args, "--data", data, "--output", str(path), *FAST, *extra]) == 0
    return path


@pytest.fixture(scope="module")
def kubeflow_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kfp") / "cifar10.yaml"
    return compile_file(path, "kubeflow", DATA, "--warm-start")


@pytest.fixture(scope="module")
def vertex_file(tmp_path_factory):
    return compile_file(tmp_path_factory.mktemp("vertex") / "cifar10.yaml", "vertex")


def plan(path: Path, target: str = "kubeflow", data: Path | None = Path("/data/c.tar.gz")):
    image = kfp_plan.read_dockerfile(REPO_ROOT / "Dockerfile")
    return kfp_plan.make_plan(path, target, Path("/out"), data, REPO_ROOT, image)


# --- the Dockerfile and the plan (this environment, no kfp.local) ---


def test_read_dockerfile_follows_the_stages_to_the_default_one(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM python:3.10 AS base\n"
        "WORKDIR /app\n"
        "# a comment\n"
        "ENV FIRST=1 \\\n"
        '    SECOND="two words"\n'
        "FROM base AS other\n"
        "ENV ONLY_OTHER=1\n"
        "FROM base AS final\n"
        "WORKDIR sub\n"
        "ENV OLD_FORM kept as is\n"
        "ENV FIRST=again\n"
    )
    image = kfp_plan.read_dockerfile(dockerfile)
    assert image.workdir == "/app/sub"
    assert image.env == {"FIRST": "again", "SECOND": "two words", "OLD_FORM": "kept as is"}


def test_the_image_puts_the_project_where_compiled_files_expect_it():
    image = kfp_plan.read_dockerfile(REPO_ROOT / "Dockerfile")
    assert image.workdir == CONTAINER_PROJECT_ROOT
    assert image.env  # the Dockerfile's ENV line, whatever it holds


def test_the_data_parameter_is_the_example_gens():
    assert kfp_plan.DATA_PARAMETER == SOURCE_URI_KEY


def test_plan_maps_every_cloud_uri_and_the_image_paths(kubeflow_file):
    planned = plan(kubeflow_file)
    assert set(planned.steps) == TASKS and planned.not_run == {}
    text = json.dumps(planned.spec)
    assert kfp_plan.CLOUD_URI.search(text) is None
    tasks = pipeline_tasks(planned.spec)
    constant = lambda task, key: tasks[task]["inputs"]["parameters"][key]["runtimeValue"]  # noqa: E731
    assert constant("Cifar10ExampleGen", "source_uri")["constant"] == "/data/c.tar.gz"
    assert constant("ServedState", "serving_model_dir")["constant"] == "/out/serving/cifar10"
    schema = constant("ImportSchemaGen", "schema_file")["constant"]
    assert schema == CONTAINER_SCHEMA_PATH.replace(CONTAINER_PROJECT_ROOT, str(REPO_ROOT))
    assert Path(schema).is_file()
    custom = json.loads(constant("Trainer", "custom_config")["constant"])
    assert custom["checkpoint_root"] == "/out/Trainer/checkpoints"


def test_plan_of_a_vertex_file_leaves_out_training_and_what_follows(vertex_file):
    planned = plan(vertex_file, "vertex")
    assert set(planned.steps) == BEFORE_TRAINING | {compiled_target.NIGHT_REPORT_TASK}
    # ServedState runs first (every later step reads it)
    assert list(planned.not_run) == ["Trainer", "AtomicPusher", "Evaluator"]
    assert planned.not_run["Trainer"] == ("calls Vertex AI (components.trainer.vertex_trainer)")
    for name in ("Evaluator", "AtomicPusher"):
        assert planned.not_run[name] == "needs a step that cannot run here"
    assert set(pipeline_tasks(planned.spec)) == BEFORE_TRAINING | {"NightReport"}


def test_plan_names_the_endpoint_deploy_as_a_vertex_call(tmp_path):
    path = compile_file(tmp_path / "p.yaml", "vertex", DATA, "--endpoint", "cifar10-endpoint")
    planned = plan(path, "vertex")
    reason = planned.not_run["AtomicPusher"]
    assert reason == "calls Vertex AI (components.atomic_pusher.vertex_endpoint)", reason
    assert planned.not_run["Trainer"] == "calls Vertex AI (components.trainer.vertex_trainer)"
    assert set(planned.steps) == BEFORE_TRAINING | {compiled_target.NIGHT_REPORT_TASK}


def test_the_google_executors_named_for_kfp_local_are_the_real_ones():
    """kfp_local names the executors that call Google APIs without importing them (its
    environment has no TFX): each name must be a module that exists, defining an executor."""
    import importlib

    from tfx.dsl.components.base.base_executor import BaseExecutor

    for prefix in compiled_target.GOOGLE_EXECUTOR_PREFIXES:
        module = importlib.import_module(prefix.rstrip("."))
        if prefix.startswith("components."):
            assert any(
                isinstance(value, type) and issubclass(value, BaseExecutor)
                for value in vars(module).values()
            ), prefix


@pytest.mark.parametrize(
    "target, fixture, message",
    [
        ("kubeflow", "vertex_file", "was compiled for --target vertex (Trainer calls Vertex AI"),
        ("vertex", "kubeflow_file", "was compiled for --target kubeflow (no step calls Vertex AI)"),
    ],
)
def test_a_file_compiled_for_the_other_target_is_refused(request, target, fixture, message):
    with pytest.raises(kfp_plan.LocalRunError, match=re.escape(message)):
        plan(request.getfixturevalue(fixture), target)


def test_a_cloud_uri_without_a_local_counterpart_is_refused(kubeflow_file):
    with pytest.raises(kfp_plan.LocalRunError) as refused:
        plan(kubeflow_file, data=None)
    assert str(refused.value).endswith(
        f"Cifar10ExampleGen reads {DATA}, which this run cannot map (no --data given): it maps "
        "the pipeline root to --output-dir and the data to --data"
    )


def test_a_pipeline_spec_2_0_file_is_refused_before_running(kubeflow_file, tmp_path):
    spec = yaml.safe_load(kubeflow_file.read_text())
    parameter = pipeline_tasks(spec)["Trainer"]["inputs"]["parameters"]["run_fn"]
    parameter["runtimeValue"] = {"constantValue": {"stringValue": "x.run_fn"}}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(spec))
    with pytest.raises(kfp_plan.LocalRunError, match=r"pipeline spec 2\.0 \(Trainer has"):
        plan(old)


@pytest.mark.parametrize("content", ["root: [unclosed", "pipelineInfo: {name: x}\n"])
def test_a_file_that_is_no_pipeline_is_refused(tmp_path, content):
    bad = tmp_path / "p.yaml"
    bad.write_text(content)
    with pytest.raises(kfp_plan.LocalRunError, match="not a"):
        plan(bad)


def test_local_kfp_without_its_environment_is_one_line(kubeflow_file, tmp_path, capsys):
    missing = tmp_path / "none" / "python"
    assert cli.main(["local-kfp", str(kubeflow_file), "--kfp-python", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {missing} not found: run `make setup-kfp` (see docs/kubeflow.md)\n"


# --- kfp.local itself (.venv-kfp): two plain-script steps in a pipeline like TFX's ---

STEP = """
import json, os, sys
from pathlib import Path

mode = sys.argv[1]
given = json.loads(sys.argv[sys.argv.index("--json_serialized_invocation_args") + 1])
if mode == "fail":
    raise ValueError("the data is bad")
[out] = next(iter(given["outputs"]["artifacts"].values()))["artifacts"]
Path(out["uri"]).mkdir(parents=True)
seen = {
    "python": sys.executable,
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "parameters": given["inputs"].get("parameterValues", {}),
    "input_types": {
        key: [artifact["type"] for artifact in artifacts["artifacts"]]
        for key, artifacts in given["inputs"].get("artifacts", {}).items()
    },
}
(Path(out["uri"]) / "seen.json").write_text(json.dumps(seen))
output = {"artifacts": {out["name"]: {"artifacts": [{**out, "metadata": {"blessed": 1.0}}]}}}
Path(given["outputs"]["outputFile"]).write_text(json.dumps(output))
"""
EXAMPLES = {"artifactType": {"instanceSchema": "title: tfx.Examples\ntype: object\n"}}


def two_step_spec(step: Path, second: str) -> dict:
    """Produce -> Consume, shaped like a TFX-compiled file: container executors running
    `python`, the executor input as --json_serialized_invocation_args, TFX artifact types."""

    def executor(mode: str) -> dict:
        return {
            "container": {
                "image": IMAGE,
                "command": ["python", str(step), mode],
                "args": ["--json_serialized_invocation_args", "{{$}}"],
            }
        }

    return {
        "pipelineInfo": {"name": "tiny"},
        "schemaVersion": "2.1.0",
        "defaultPipelineRoot": ROOT,
        "components": {
            "Produce": {
                "executorLabel": "Produce_executor",
                "inputDefinitions": {"parameters": {"where": {"parameterType": "STRING"}}},
                "outputDefinitions": {"artifacts": {"examples": EXAMPLES}},
            },
            "Consume": {
                "executorLabel": "Consume_executor",
                "inputDefinitions": {"artifacts": {"examples": EXAMPLES}},
                "outputDefinitions": {"artifacts": {"blessing": EXAMPLES}},
            },
        },
        "deploymentSpec": {
            "executors": {
                "Produce_executor": executor("record"),
                "Consume_executor": executor(second),
            }
        },
        "root": {
            "dag": {
                "tasks": {
                    "Produce": {
                        "componentRef": {"name": "Produce"},
                        "taskInfo": {"name": "Produce"},
                        "inputs": {
                            "parameters": {
                                "where": {"runtimeValue": {"constant": f"{ROOT}/serving"}}
                            }
                        },
                    },
                    "Consume": {
                        "componentRef": {"name": "Consume"},
                        "taskInfo": {"name": "Consume"},
                        "dependentTasks": ["Produce"],
                        "inputs": {
                            "artifacts": {
                                "examples": {
                                    "taskOutputArtifact": {
                                        "producerTask": "Produce",
                                        "outputArtifactKey": "examples",
                                    }
                                }
                            }
                        },
                    },
                }
            }
        },
    }


def run_two_steps(tmp_path: Path, second: str) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "step.py").write_text(STEP)
    (tmp_path / "Dockerfile").write_text("FROM python:3.10\nWORKDIR /app\nENV FROM_IMAGE=yes\n")
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(two_step_spec(tmp_path / "step.py", second)))
    out = tmp_path / "out"
    done = subprocess.run(
        [KFP_PYTHON, "-m", "pipeline.kfp_local", spec, "--output-dir", out]
        + ["--python", sys.executable, "--dockerfile", tmp_path / "Dockerfile"],
        capture_output=True,
        text=True,
        env={**os.environ, "NOT_IN_THE_IMAGE": "1"},
        timeout=300,
    )
    return done, out


def seen_by(out: Path, artifact: str) -> dict:
    [seen] = out.glob(f"tiny-*/*/{artifact}/seen.json")
    return json.loads(seen.read_text())


def test_container_steps_run_on_the_host_with_the_image_env_and_typed_inputs(tmp_path):
    done, out = run_two_steps(tmp_path, "record")
    assert done.returncode == 0, done.stderr
    produced = seen_by(out, "examples")
    assert produced["python"] == sys.executable and produced["cwd"] == str(tmp_path)
    assert produced["env"]["FROM_IMAGE"] == "yes" and "NOT_IN_THE_IMAGE" not in produced["env"]
    assert produced["parameters"] == {"where": f"{out}/serving"}
    # kfp.local alone hands the artifact on as system.Artifact; TFX needs its declared type.
    consumed = seen_by(out, "blessing")
    assert consumed["input_types"] == {"examples": [EXAMPLES["artifactType"]]}
    assert "[1/2] Produce: running" in done.stderr and "[2/2] Consume: SUCCESS" in done.stderr
    assert "  Produce " in done.stdout and "blessed        yes" in done.stdout


def test_a_failing_step_is_named_and_the_run_fails(tmp_path):
    done, out = run_two_steps(tmp_path, "fail")
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: step Consume failed: ValueError: the data is bad (log ")
    assert "[2/2] Consume: FAILED (exit status 1)" in done.stderr
    assert "  Consume                FAILED" in done.stdout


# --- end to end: the compiled files, the tiny archive, every step a TFX process ---


def _local_kfp(path: Path, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("local-kfp", path, "--data", data, "--output-dir", out, *extra)


@pytest.fixture(scope="module")
def kubeflow_push(kubeflow_file, tiny_archive, tmp_path_factory):
    """The compiled Kubeflow file run once under kfp.local on a span folder holding span-1
    (the tiny archive); returns the run, the pipeline root and the data folder."""
    data = tmp_path_factory.mktemp("kfp-spans") / "data"
    (data / "span-1").mkdir(parents=True)
    shutil.copy(tiny_archive, data / "span-1" / "cifar.tar.gz")
    out = tmp_path_factory.mktemp("kfp-push") / "out"
    return _local_kfp(kubeflow_file, data, out), out, data


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_the_kubeflow_file_runs_end_to_end_and_pushes(kubeflow_push):
    done, out, _ = kubeflow_push
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr.count(": SUCCESS in ") == len(TASKS)
    for name in TASKS:
        assert f"  {name:<22} SUCCESS" in done.stdout, done.stdout
    assert "blessed        yes" in done.stdout
    [version] = [out / "serving" / "cifar10" / v for v in versions(out)]
    assert (version / "saved_model.pb").is_file()
    assert f"pushed         {version}" in done.stdout
    # plain files in artifacts: the ExampleGen's training-image index reaches the version
    assert (version / "training_images.bin").stat().st_size > 0


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_the_next_run_reads_the_pushed_statistics_back(
    kubeflow_file, kubeflow_push, tiny_archive, tmp_path
):
    """The pushed version keeps its training statistics in the pipeline root; the same
    compiled file's next run there, on darker data, stops at the gate on drift from them."""
    _, pushed, _ = kubeflow_push
    out = tmp_path / "out"
    shutil.copytree(pushed, out)  # this test's own copy of the pipeline root
    [version] = [out / "serving" / "cifar10" / v for v in versions(out)]
    assert (version / SERVED_STATISTICS_FILE).stat().st_size > 0
    dark = fx.scaled_archive(tmp_path / "dark.tar.gz", 0.6, per_class=60)
    done = _local_kfp(kubeflow_file, dark, out)
    assert done.returncode == 1, done.stderr[-4000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: step DataValidationGate failed: "), error
    log = (out / "logs").glob("*/DataValidationGate.log")
    text = "\n".join(path.read_text() for path in log)
    assert "drift: feature 'image_brightness': Jensen-Shannon divergence " in text
    assert f"against the training data of served version {version.name})" in text
    assert "  Trainer                not run: an earlier step failed" in done.stdout
    assert versions(out) == [version.name]


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_the_vertex_file_runs_up_to_training(tmp_path):
    """A Vertex file compiled for a folder of images in a bucket: every step before
    training runs on the local folder mapped in its place."""
    images = fx.image_folder(tmp_path / "images", per_class=2)
    path = compile_file(tmp_path / "cifar10.yaml", "vertex", "gs://bucket-x/images")
    done = _local_kfp(path, images, tmp_path / "out", "--target", "vertex")
    assert done.returncode == 0, done.stderr[-4000:]
    for name in BEFORE_TRAINING:
        assert f"  {name:<22} SUCCESS" in done.stdout, done.stdout
    assert "  Trainer                not run: calls Vertex AI" in done.stdout
    assert "  AtomicPusher           not run: needs a step that cannot run here" in done.stdout
    # the bucket's folder was the local one: its 20 + 20 images, every class in each split
    [examples] = (tmp_path / "out").glob("*/*ExampleGen/examples")
    for split in ("train", "eval"):
        _, labels, _ = read_split(str(examples), split)
        assert sorted(labels) == sorted(fx.balanced_labels(2)), split


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_the_same_file_runs_nightly_over_a_span_folder(kubeflow_file, kubeflow_push, tmp_path):
    """Run 1 (span-1) pushed; span-2 arrives and run 2 warm-starts from the served model and
    pushes a second version; run 3 finds no new span and trains and pushes nothing."""
    from test_continuous_training import span_two

    _, pushed, data = kubeflow_push
    out, spans = tmp_path / "out", tmp_path / "data"
    shutil.copytree(pushed, out)
    shutil.copytree(data, spans)
    [first] = [out / "serving" / "cifar10" / v for v in versions(out)]
    span_two(spans / "span-2" / "cifar.tar.gz")
    second = _local_kfp(kubeflow_file, spans, out)
    assert second.returncode == 0, second.stderr[-4000:]
    served = versions(out)
    assert len(served) == 2 and served[0] == first.name
    [log] = sorted((out / "logs").glob("*/Trainer.log"))[-1:]
    assert f"Warm start from {first}" in log.read_text()
    # the warm-started version's image index is the union with the one it started from
    first_index, second_index = (
        unpack_digests((out / "serving" / "cifar10" / v / "training_images.bin").read_bytes())
        for v in served
    )
    assert first_index < second_index and len(second_index) == 2 * len(first_index)
    third = _local_kfp(kubeflow_file, spans, out)
    assert third.returncode == 0, third.stderr[-4000:]
    # every step succeeds and passes the night on: a green run that trained nothing
    assert third.stderr.count(": SUCCESS in ") == len(TASKS) and "FAILED" not in third.stdout
    served_now = f"served version {served[1]} was trained on spans [1, 2]"
    assert f"outcome        no_new_span: no new span: {served_now}" in third.stdout
    assert "blessed        no" in third.stdout and "pushed " not in third.stdout
    [trainer_log] = sorted((out / "logs").glob("*/Trainer.log"))[-1:]
    assert "Nothing trained: no new span" in trainer_log.read_text()
    assert versions(out) == served


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_the_vertex_file_on_a_night_with_nothing_new_succeeds(kubeflow_push, tmp_path):
    """The Vertex file's night 3, with a served version already in place under its pipeline
    root: the steps that run here succeed, the ExampleGen marks the night, and the run ends
    successful with outcome no_new_span (on Vertex the Trainer then starts no CustomJob:
    tests/test_nothing_new.py)."""
    _, pushed, data = kubeflow_push
    out = tmp_path / "out"
    shutil.copytree(pushed / "serving", out / "serving")  # the served version, trained on span-1
    path = compile_file(tmp_path / "cifar10.yaml", "vertex", "gs://bucket-x/nightly")
    done = _local_kfp(path, data, out, "--target", "vertex")
    assert done.returncode == 0, done.stderr[-4000:]
    for name in BEFORE_TRAINING:
        assert f"  {name:<22} SUCCESS" in done.stdout, done.stdout
    assert "outcome        no_new_span: no new span: served version " in done.stdout


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_two_nights_at_once_on_one_store_end_pushed_and_served_changed(
    kubeflow_file, tiny_archive, tmp_path
):
    """Issue 64: at dd83add the night that lost the race failed its AtomicPusher step (a red
    run). Both nights read "nothing served"; whichever commits first pushes, the other ends
    with outcome served_changed (exit 6), every step green, and the one version is whole."""
    import concurrent.futures
    import time

    data = tmp_path / "data"
    (data / "span-1").mkdir(parents=True)
    shutil.copy(tiny_archive, data / "span-1" / "cifar.tar.gz")
    out = tmp_path / "out"

    def night(delay: float) -> subprocess.CompletedProcess:
        time.sleep(delay)  # each night its own log folder (named by the second it starts)
        return _local_kfp(kubeflow_file, data, out)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        done = list(pool.map(night, (0.0, 2.0)))
    codes = sorted(d.returncode for d in done)
    assert codes == [0, 6], [d.stderr[-2000:] for d in done]
    lost = next(d for d in done if d.returncode == 6)
    assert "outcome        served_changed: served version changed during this run" in lost.stdout
    assert "FAILED" not in lost.stdout and "  AtomicPusher           SUCCESS" in lost.stdout
    [version] = [out / "serving" / "cifar10" / v for v in versions(out)]
    assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir()
