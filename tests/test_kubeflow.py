"""Kubeflow Pipelines: compile the same topology to KFP v2 YAML (no resolver executors),
and submit it with kfp's Client against a local HTTP server that speaks the KFP v2beta1
REST API."""

import json
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from components.runtime import stack
from pipeline import cli, kfp_ir
from pipeline.common import kfp_platform
from pipeline.common.compiled_target import pipeline_tasks
from pipeline.kubeflow import compile as kubeflow_compile
from pipeline.local.runner import local_config
from pipeline.settings.config import CONTAINER_SCHEMA_PATH, TrainingConfig
from pipeline.topology import create_pipeline
from pipeline.vertex import pipeline_file as vertex_file

import http_stand_in
from conftest import PIPELINE_NODES, compiler_places, compiling_away_from_home

REPO_ROOT = Path(__file__).resolve().parents[1]

IMAGE = "registry.example.com/ml/cifar10-pipeline:v1"
# s3:// where tensorflow-io exists (the legacy stack); the current stack refuses it.
STORE = "s3" if stack.running_stack() is stack.LEGACY else "gs"
ROOT = f"{STORE}://bucket-x/pipeline-root"
DATA = f"{STORE}://bucket-x/cifar-10-binary.tar.gz"
COMPILE_ARGS = [
    "compile",
    "--target",
    "kubeflow",
    "--pipeline-root",
    ROOT,
    "--image",
    IMAGE,
    "--data",
    DATA,
    "--trainer-cpu",
    "6",
    "--trainer-memory-gb",
    "24",
    "--trainer-gpus",
    "2",
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("kubeflow") / "cifar10.yaml"
    with compiling_away_from_home(tmp_path_factory, "kubeflow"):
        assert cli.main(COMPILE_ARGS + ["--output", str(path)]) == 0
    return path, kfp_platform.read_pipeline_file(path)[0]


on_s3 = pytest.mark.skipif(STORE != "s3", reason="the current stack refuses s3:// (its own test)")
KEYS = {
    "AWS_ACCESS_KEY_ID": ("mlpipeline-minio-artifact", "accesskey"),
    "AWS_SECRET_ACCESS_KEY": ("mlpipeline-minio-artifact", "secretkey"),
}


@on_s3
def test_an_s3_file_gives_every_pod_the_stores_endpoint_and_the_secrets_keys(compiled):
    """On a cluster, the pods reach KFP's own store: its in-cluster endpoint in every
    container's env, the keys from the secret the installation creates through the Kubernetes
    platform spec (the file's second document), nothing secret in the file."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    path, spec = compiled
    _, platform = kfp_platform.read_pipeline_file(path)
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())  # kfp's own schema
    executors = spec["deploymentSpec"]["executors"]
    containers = {label for label, executor in executors.items() if "container" in executor}
    configs = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # every step and the exit handler (it keeps the night in the serving folder on the store)
    assert len(containers) == len(PIPELINE_NODES) + 1 and set(configs) == containers
    for label in containers:
        env = executors[label]["container"]["env"]
        assert env == [{"name": "AWS_ENDPOINT_URL", "value": "http://minio-service.kubeflow:9000"}]
        assert kfp_platform.secret_variables(platform, label) == KEYS
        [entry] = configs[label]["secretAsEnv"]
        assert entry["secretName"] == "mlpipeline-minio-artifact"  # read by KFP < 2.4


@on_s3
def test_the_store_endpoint_and_secret_can_be_named_or_left_out(tmp_path):
    path = tmp_path / "other.yaml"
    args = [*COMPILE_ARGS, "--output", str(path), "--s3-endpoint", "https://s3.example.com"]
    assert cli.main([*args, "--s3-secret", "team-keys"]) == 0
    spec, platform = kfp_platform.read_pipeline_file(path)
    for label, executor in spec["deploymentSpec"]["executors"].items():
        assert executor["container"]["env"][-1]["value"] == "https://s3.example.com"
        assert {s for s, _ in kfp_platform.secret_variables(platform, label).values()} == {
            "team-keys"
        }
    # AWS S3 with workload identity: no endpoint, no secret, a single document.
    assert (
        cli.main([*COMPILE_ARGS, "--output", str(path), "--s3-endpoint", "", "--s3-secret", ""])
        == 0
    )
    spec, platform = kfp_platform.read_pipeline_file(path)
    assert platform == {}
    assert all("env" not in e["container"] for e in spec["deploymentSpec"]["executors"].values())


@pytest.mark.parametrize("flag", ["--s3-endpoint", "--s3-secret"])
def test_store_flags_without_an_s3_store_are_refused(flag, tmp_path, capsys):
    gs = ["--pipeline-root", "gs://b/root", "--data", "gs://b/c.tar.gz", "--image", IMAGE]
    output = tmp_path / "p.yaml"
    args = ["compile", "--target", "kubeflow", *gs, flag, "x", "--output", str(output)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {flag} is for an s3:// --pipeline-root or --data; this file uses neither\n"
    )
    assert not output.exists()


def test_the_file_loads_with_the_kfp_sdk(compiled):
    from google.protobuf import json_format
    from kfp import components
    from kfp.pipeline_spec import pipeline_spec_pb2

    path, spec = compiled
    component = components.load_component_from_file(str(path))
    assert component.name == "cifar10"
    parsed = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert parsed.default_pipeline_root == ROOT
    executors = set(parsed.deployment_spec["executors"].keys())
    # the steps, nested in TFX's sub-DAG beside the exit handler (pipeline/kfp_ir.py)
    for name, task in pipeline_tasks(spec).items():
        label = parsed.components[task["componentRef"]["name"]].executor_label
        assert label in executors, name
    assert {"Trainer", "ServedState", "Evaluator"} <= set(pipeline_tasks(spec))


def test_the_file_is_pipeline_spec_2_1_which_the_kfp_backend_driver_runs(compiled):
    """KFP's driver resolves a task constant only as `runtimeValue.constant` and fills only
    `inputs.parameterValues`, which TFX's entrypoint reads when given the inputs spec."""
    _, spec = compiled
    assert spec["schemaVersion"] == "2.1.0"
    runtime = {"span": -1, "span_window": 1, "force": 0}  # the span choice, set per run
    for name, task in pipeline_tasks(spec).items():
        for key, parameter in task.get("inputs", {}).get("parameters", {}).items():
            if name == "Cifar10ExampleGen" and key in runtime:
                assert parameter == {"componentInputParameter": key}
                continue
            if name == "NightReport" and key == "final_status":  # the run's, when it ends
                assert parameter == {"taskFinalStatus": {"producerTask": "tfx-dag"}}
                continue
            assert set(parameter["runtimeValue"]) == {"constant"}, (name, key)
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert {key: value["defaultValue"] for key, value in defaults.items()} == runtime
    # the ExampleGen lists the span folders when it runs: never served from the cache
    assert pipeline_tasks(spec)["Cifar10ExampleGen"]["cachingOptions"] == {"enableCache": False}
    for name, executor in spec["deploymentSpec"]["executors"].items():
        assert "--json_serialized_inputs_spec_args" in executor["container"]["args"], name


def test_no_resolver_executors_only_containers(compiled):
    _, spec = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert kfp_ir.resolver_executors(spec) == []
    assert all(set(executor) == {"container"} for executor in executors.values()), executors
    assert {e["container"]["image"] for e in executors.values()} == {IMAGE}


def test_resolver_executors_are_detected():
    spec = {
        "deploymentSpec": {
            "executors": {
                "Trainer_executor": {"container": {"image": IMAGE}},
                "latest_blessed_model_resolver-model-resolver_executor": {"resolver": {}},
            }
        }
    }
    assert kfp_ir.resolver_executors(spec) == [
        "latest_blessed_model_resolver-model-resolver_executor"
    ]


def test_evaluator_baseline_is_the_served_model_step(compiled):
    _, spec = compiled
    tasks = pipeline_tasks(spec)
    baseline = tasks["Evaluator"]["inputs"]["artifacts"]["baseline_model"]["taskOutputArtifact"]
    assert baseline["producerTask"] == "ServedState"
    parameter = tasks["ServedState"]["inputs"]["parameters"]["serving_model_dir"]
    assert parameter["runtimeValue"]["constant"] == f"{ROOT}/serving/cifar10"
    executors = spec["deploymentSpec"]["executors"]
    assert (
        "components.served_state.executor.EvaluatorExecutor"
        in executors["Evaluator_executor"]["container"]["args"]
    )


def test_trainer_is_the_standard_trainer_with_pod_requests(compiled):
    _, spec = compiled
    container = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    # TFX's Trainer executor, passing a night with nothing new through
    assert "components.trainer.nothing_new.GenericExecutor" in container["args"]
    assert container["resources"] == {
        "cpuRequest": 6.0,
        "memoryRequest": 24.0,
        "accelerator": {"type": "nvidia.com/gpu", "count": "2"},
    }
    parameter = pipeline_tasks(spec)["Trainer"]["inputs"]["parameters"]["custom_config"]
    custom = json.loads(parameter["runtimeValue"]["constant"])
    assert custom["training"]["strategy"] == "auto" and "ai_platform_training_args" not in custom
    others = [
        name
        for name, e in spec["deploymentSpec"]["executors"].items()
        if "resources" in e["container"]
    ]
    assert others == ["Trainer_executor"]


def test_no_local_paths_in_the_compiled_file(compiled, tmp_path_factory):
    path, _ = compiled
    text = path.read_text()
    home, cwd = compiler_places(tmp_path_factory, "kubeflow")
    for local in (REPO_ROOT, home, cwd, tmp_path_factory.getbasetemp()):
        assert str(local) not in text, f"local path {local} leaked into the compiled pipeline"
    assert CONTAINER_SCHEMA_PATH in text


def test_local_and_kubeflow_pipelines_share_one_topology(tmp_path):
    training = TrainingConfig()
    local = create_pipeline(local_config(tmp_path, "/data/c.tar.gz", "f", training))
    kubeflow = create_pipeline(
        kubeflow_compile.kubeflow_config(
            pipeline_root=ROOT, image=IMAGE, source_uri=DATA, training=training
        )
    )

    def edges(pipeline):
        return {(c.id, tuple(sorted(u.id for u in c.upstream_nodes))) for c in pipeline.components}

    assert edges(local) == edges(kubeflow)
    assert ("Evaluator", ("Cifar10ExampleGen", "ServedState", "Trainer")) in edges(local)


def test_compiled_dag_edges_match_the_topology(compiled, tmp_path):
    _, spec = compiled
    local = create_pipeline(local_config(tmp_path, "/data/c.tar.gz", "f", TrainingConfig()))
    expected = {c.id: {u.id for u in c.upstream_nodes} for c in local.components}
    compiled_deps = {
        name: set(task.get("dependentTasks", []))
        for name, task in pipeline_tasks(spec).items()
        if name != "NightReport"  # the exit handler: after the whole sub-DAG
    }
    assert compiled_deps == expected


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--pipeline-root", "/home/me/root", "--pipeline-root must be a gs:// or s3:// URI"),
        ("--data", "./cifar.tar.gz", "--data must be a gs:// or s3:// URI"),
        (
            "--data",
            "minio://mlpipeline/c.tar.gz",
            "no minio:// filesystem; address the bucket as s3://mlpipeline/c.tar.gz",
        ),
        ("--output", "pipeline.json", "must end in .yaml"),
    ],
)
def test_compile_refuses_bad_input_with_one_line(tmp_path, capsys, flag, value, message):
    args = COMPILE_ARGS + ["--output", str(tmp_path / "p.yaml")]
    if flag == "--output":
        value = str(tmp_path / value)
    args[args.index(flag) + 1] = value
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_vertex_compiles_yaml_and_submit_accepts_it(tmp_path, capsys):
    path = tmp_path / "vertex.yaml"
    assert (
        cli.main(
            [
                "compile",
                "--target",
                "vertex",
                "--project",
                "proj-x",
                "--region",
                "us-central1",
                "--pipeline-root",
                "gs://b/root",
                "--image",
                IMAGE,
                "--data",
                "gs://b/c.tar.gz",
                "--tpu-image",
                IMAGE,
                "--output",
                str(path),
            ]
        )
        == 0
    )
    spec = yaml.safe_load(path.read_text())
    assert spec["defaultPipelineRoot"] == "gs://b/root"
    assert kfp_ir.resolver_executors(spec) == []
    submission = vertex_file.load_submission(path, "proj-x", "us-central1")
    assert submission.pipeline_root == "gs://b/root"
    assert set(submission.tasks) == set(pipeline_tasks(spec))
    capsys.readouterr()
    assert (
        cli.main(
            ["submit", str(path), "--project", "proj-x", "--region", "us-central1", "--dry-run"]
        )
        == 0
    )
    assert "would submit PipelineJob 'cifar10-" in capsys.readouterr().out


def test_vertex_compile_without_project_is_one_line(capsys):
    assert (
        cli.main(
            [
                "compile",
                "--pipeline-root",
                "gs://b/r",
                "--image",
                IMAGE,
                "--data",
                "gs://b/c.tar.gz",
            ]
        )
        == 2
    )
    assert (
        capsys.readouterr().err == "error: --project and --region required with --target vertex\n"
    )


class _FakeKfp(http_stand_in.JsonHandler):
    """The slice of the KFP v2beta1 REST API that kfp.Client uses to create a run."""

    requests: list = []
    refuse_with = 0  # an HTTP status to answer every request with, e.g. 401

    def _record(self) -> tuple[str, dict, dict]:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        _FakeKfp.requests.append((self.command, url.path, query, body))
        return url.path, query, body

    def do_GET(self):
        path, _, _ = self._record()
        if self.refuse_with:
            return self.reply({"error": "denied", "code": 16}, self.refuse_with)
        if path == "/apis/v2beta1/healthz":
            return self.reply({"multi_user": False}, 200)
        if path == "/apis/v2beta1/experiments":
            return self.reply({}, 200)  # no experiment with that name yet
        return self.reply({"error": f"no route {path}"}, 404)

    def do_POST(self):
        path, _, body = self._record()
        if self.refuse_with:
            return self.reply({"error": "denied", "code": 16}, self.refuse_with)
        if path == "/apis/v2beta1/experiments":
            return self.reply({**body, "experiment_id": "exp-7"}, 200)
        if path == "/apis/v2beta1/runs":
            return self.reply({**body, "run_id": "run-42", "state": "PENDING"}, 200)
        return self.reply({"error": f"no route {path}"}, 404)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_kfp(tmp_path, monkeypatch):
    """A KFP API on 127.0.0.1 at a free port; kfp's context file kept out of $HOME."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(
        "kfp.client.client.Client._LOCAL_KFP_CONTEXT", str(tmp_path / "context.json")
    )
    _FakeKfp.requests = []
    _FakeKfp.refuse_with = 0
    with http_stand_in.serve(_FakeKfp) as url:
        yield url


def test_submit_creates_the_run_through_the_kfp_client(compiled, fake_kfp, capsys):
    path, spec = compiled
    assert (
        cli.main(
            [
                "submit",
                str(path),
                "--target",
                "kubeflow",
                "--host",
                fake_kfp,
                "--namespace",
                "team-a",
                "--experiment",
                "cifar",
                "--run-name",
                "nightly-1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("Submitted run run-42 ('nightly-1', experiment 'cifar')")
    assert f"{fake_kfp}/#/runs/details/run-42" in out
    [(_, _, listed, _)] = [
        r for r in _FakeKfp.requests if r[:2] == ("GET", "/apis/v2beta1/experiments")
    ]
    assert listed["namespace"] == "team-a" and "cifar" in listed["filter"]
    [(_, _, _, experiment)] = [
        r for r in _FakeKfp.requests if r[:2] == ("POST", "/apis/v2beta1/experiments")
    ]
    assert experiment["display_name"] == "cifar" and experiment["namespace"] == "team-a"
    [(_, _, _, run)] = [r for r in _FakeKfp.requests if r[:2] == ("POST", "/apis/v2beta1/runs")]
    assert run["display_name"] == "nightly-1" and run["experiment_id"] == "exp-7"
    assert run["runtime_config"]["pipeline_root"] == ROOT
    sent = run["pipeline_spec"]
    if STORE == "s3":  # kfp's Client sends the platform spec beside the pipeline spec
        platform = sent["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]
        assert {kfp_platform.secret_variables(sent["platform_spec"], label) == KEYS
                for label in platform["executors"]} == {True}  # fmt: skip
        sent = sent["pipeline_spec"]
    assert pipeline_tasks(sent).keys() == pipeline_tasks(spec).keys()
    assert sent["deploymentSpec"] == spec["deploymentSpec"]


def test_submit_sets_the_span_choice_of_this_run(compiled, fake_kfp, capsys):
    """The compiled span parameters are set per run (a scheduler's nightly run takes the
    defaults: the newest span); an unknown one is refused before any request."""
    path, _ = compiled
    args = ["submit", str(path), "--target", "kubeflow", "--host", fake_kfp]
    assert cli.main([*args, "--parameter", "span=2", "--parameter", "force=1"]) == 0
    [(_, _, _, run)] = [r for r in _FakeKfp.requests if r[:2] == ("POST", "/apis/v2beta1/runs")]
    assert run["runtime_config"]["parameters"] == {"span": 2, "force": 1}
    _FakeKfp.requests.clear()
    assert cli.main([*args, "--parameter", "spans=2"]) == 2
    assert "--parameter 'spans=2': not KEY=VALUE of a parameter (force, span, span_window)" in (
        capsys.readouterr().err
    )
    assert cli.main([*args, "--parameter", "span=abc"]) == 2  # once "'abc' is not a int"
    assert "--parameter span: 'abc' is not a whole number" in capsys.readouterr().err
    assert _FakeKfp.requests == []


def test_submit_without_namespace_asks_the_cluster_whether_it_is_multi_user(
    compiled, fake_kfp, capsys
):
    path, _ = compiled
    assert cli.main(["submit", str(path), "--target", "kubeflow", "--host", fake_kfp]) == 0
    paths = [(method, url) for method, url, _, _ in _FakeKfp.requests]
    assert paths[0] == ("GET", "/apis/v2beta1/healthz")
    assert ("POST", "/apis/v2beta1/runs") in paths
    [(_, _, _, run)] = [r for r in _FakeKfp.requests if r[:2] == ("POST", "/apis/v2beta1/runs")]
    assert run["display_name"].startswith("cifar10-")
    assert "Submitted run run-42" in capsys.readouterr().out


def test_submit_refused_auth_is_one_line(compiled, fake_kfp, capsys):
    path, _ = compiled
    _FakeKfp.refuse_with = 401
    assert (
        cli.main(
            [
                "submit",
                str(path),
                "--target",
                "kubeflow",
                "--host",
                fake_kfp,
                "--namespace",
                "team-a",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: {fake_kfp} refused the request (401 ")
    assert len(err.splitlines()) == 1
    assert not [r for r in _FakeKfp.requests if r[:2] == ("POST", "/apis/v2beta1/runs")]


def test_submit_to_an_unreachable_host_is_one_line(compiled, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(
        "kfp.client.client.Client._LOCAL_KFP_CONTEXT", str(tmp_path / "context.json")
    )
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path, _ = compiled
    assert (
        cli.main(
            ["submit", str(path), "--target", "kubeflow", "--host", f"http://127.0.0.1:{port}"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not reach Kubeflow Pipelines at http://127.0.0.1:{port}")
    assert len(err.splitlines()) == 1


def test_submit_dry_run_describes_without_network(compiled, capsys):
    path, _ = compiled
    # Port 9 (discard) on loopback: a dry run must not even try it.
    assert (
        cli.main(
            [
                "submit",
                str(path),
                "--target",
                "kubeflow",
                "--host",
                "http://127.0.0.1:9",
                "--namespace",
                "team-a",
                "--run-name",
                "r1",
                "--dry-run",
            ]
        )
        == 0
    )
    shown = capsys.readouterr().out
    assert "would create run 'r1'" in shown and "team-a" in shown
    assert f"root       {ROOT}" in shown and IMAGE in shown
    assert "ServedState" in shown and "Trainer" in shown


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("p.yaml", "root: [unclosed", "not a readable KFP pipeline YAML"),
        ("p.yaml", "pipelineInfo: {name: x}\nroot: {}\n", "not a compiled pipeline"),
        ("p.yaml", "bogusField: 1\n", "not a readable KFP pipeline YAML"),
        ("p.yaml", "a: 1\n---\nb: 2\n---\nc: 3\n", "found 3 YAML documents"),
        ("p.yaml", "pipelineInfo: {name: x}\n---\nplatforms: 1\n", "not a readable KFP"),
        ("p.json", "{}", "takes the .yaml file"),
    ],
)
def test_submit_refuses_a_malformed_file_with_one_line(tmp_path, capsys, name, content, message):
    bad = tmp_path / name
    bad.write_text(content)
    assert (
        cli.main(
            [
                "submit",
                str(bad),
                "--target",
                "kubeflow",
                "--host",
                "http://127.0.0.1:9",
                "--dry-run",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


def test_submit_refuses_a_file_with_resolver_executors(compiled, tmp_path, capsys):
    _, spec = compiled
    spec = json.loads(json.dumps(spec))
    spec["deploymentSpec"]["executors"]["old-model-resolver_executor"] = {
        "resolver": {"outputArtifactQueries": {}}
    }
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert (
        cli.main(
            [
                "submit",
                str(path),
                "--target",
                "kubeflow",
                "--host",
                "http://127.0.0.1:9",
                "--dry-run",
            ]
        )
        == 2
    )
    assert "resolver executors (old-model-resolver_executor)" in capsys.readouterr().err
