"""Vertex AI: compile the same topology with KubeflowV2DagRunner, submit --dry-run, and the
real submission code path against a local HTTP server standing in for the Vertex API."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from pipeline import cli, vertex_runner
from pipeline.config import PROJECT_ROOT, TrainingConfig
from pipeline.local_runner import local_config
from pipeline.topology import create_pipeline

IMAGE = "us-docker.pkg.dev/proj-x/pipelines/cifar10:v1"
ROOT = "gs://bucket-x/pipeline-root"
COMPILE_ARGS = ["compile", "--target", "vertex", "--project", "proj-x", "--region",
                "us-central1", "--pipeline-root", ROOT, "--image", IMAGE, "--data",
                "gs://bucket-x/cifar-10-binary.tar.gz", "--tpu-type", "TPU_V3", "--tpu-cores", "8"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("vertex") / "pipeline.json"
    assert cli.main(COMPILE_ARGS + ["--output", str(path)]) == 0
    return path, json.loads(path.read_text())


def _tasks(job):
    return job["pipelineSpec"]["root"]["dag"]["tasks"]


def test_compiled_dag_has_every_component_and_dependency(compiled):
    _, job = compiled
    tasks = _tasks(job)
    deps = {name: set(task.get("dependentTasks", [])) for name, task in tasks.items()}
    for name in ("Cifar10ExampleGen", "ImportSchemaGen", "StatisticsGen", "ExampleValidator",
                 "DataValidationGate", "Trainer", "Evaluator", "AtomicPusher"):
        assert name in tasks
    assert {"Cifar10ExampleGen", "ImportSchemaGen"} <= deps["StatisticsGen"]
    assert {"StatisticsGen", "ExampleValidator"} <= deps["DataValidationGate"]
    assert {"DataValidationGate", "Cifar10ExampleGen"} <= deps["Trainer"]
    assert "Trainer" in deps["Evaluator"]
    assert {"Evaluator", "Trainer"} <= deps["AtomicPusher"]


def test_trainer_runs_on_a_tpu_worker_pool_with_the_tpu_strategy(compiled):
    _, job = compiled
    parameter = _tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]
    custom = json.loads(parameter["runtimeValue"]["constantValue"]["stringValue"])
    pool = custom["ai_platform_training_args"]["worker_pool_specs"][0]
    assert pool["machine_spec"]["accelerator_type"] == "TPU_V3"
    assert pool["machine_spec"]["accelerator_count"] == 8
    assert pool["container_spec"]["image_uri"] == IMAGE
    assert custom["training"]["strategy"] == "tpu" and custom["training"]["tpu"] == "local"
    assert custom["ai_platform_enable_vertex"] is True


def test_image_root_and_no_local_paths(compiled):
    path, job = compiled
    text = path.read_text()
    assert job["runtimeConfig"]["gcsOutputDirectory"] == ROOT
    images = {e["container"]["image"] for e in
              job["pipelineSpec"]["deploymentSpec"]["executors"].values() if "container" in e}
    assert images == {IMAGE}
    for local in {str(PROJECT_ROOT), os.getcwd(), "/tmp/", str(Path.home())}:
        assert local not in text, f"local path {local} leaked into the compiled pipeline"
    assert vertex_runner.CONTAINER_SCHEMA_PATH in text


def test_local_and_vertex_pipelines_share_one_topology(tmp_path):
    training = TrainingConfig()
    local = create_pipeline(local_config(tmp_path, "/data/c.tar.gz", "f", training))
    vertex = create_pipeline(vertex_runner.vertex_config(
        project="p", region="r", pipeline_root=ROOT, image=IMAGE,
        source_uri="gs://b/c.tar.gz", training=training))

    def edges(pipeline):
        return {(c.id, tuple(sorted(u.id for u in c.upstream_nodes))) for c in pipeline.components}

    assert edges(local) == edges(vertex)


def test_compile_rejects_local_paths():
    with pytest.raises(ValueError, match="--data must be a gs:// URI"):
        vertex_runner.vertex_config(project="p", region="r", pipeline_root=ROOT, image=IMAGE,
                                    source_uri="/home/me/c.tar.gz", training=TrainingConfig())


def test_submit_dry_run_validates_and_describes(compiled, capsys):
    path, _ = compiled
    assert cli.main(["submit", str(path), "--project", "proj-x", "--region", "us-central1",
                     "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "would submit PipelineJob 'cifar10-" in shown
    assert "projects/proj-x/locations/us-central1" in shown and IMAGE in shown
    assert "Trainer" in shown


def test_submit_dry_run_refuses_a_file_that_is_not_a_pipeline(tmp_path, capsys):
    bad = tmp_path / "p.json"
    bad.write_text('{"hello": 1}')
    assert cli.main(["submit", str(bad), "--project", "p", "--region", "r", "--dry-run"]) == 2
    assert "not a compiled Vertex pipeline" in capsys.readouterr().err


class _FakeVertex(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _FakeVertex.requests.append((self.path, json.loads(body)))
        reply = json.dumps({"name": "projects/proj-x/locations/us-central1/pipelineJobs/j1",
                            "state": "PIPELINE_STATE_PENDING"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def test_submit_sends_the_template_and_parameters(compiled):
    from google.auth.credentials import AnonymousCredentials

    path, job = compiled
    server = HTTPServer(("127.0.0.1", 0), _FakeVertex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        submission = vertex_runner.load_submission(path, "proj-x", "us-central1",
                                                   service_account="sa@proj-x.iam")
        name = vertex_runner.submit(submission, "us-central1",
                                    api_endpoint=f"http://127.0.0.1:{server.server_port}",
                                    credentials=AnonymousCredentials())
    finally:
        server.shutdown()
    assert name.endswith("/pipelineJobs/j1")
    [(url, body)] = _FakeVertex.requests
    assert url.startswith("/v1/projects/proj-x/locations/us-central1/pipelineJobs")
    assert f"pipelineJobId={submission.display_name}" in url
    assert body["pipelineSpec"]["root"]["dag"]["tasks"].keys() == _tasks(job).keys()
    assert body["runtimeConfig"]["gcsOutputDirectory"] == ROOT
    assert body["serviceAccount"] == "sa@proj-x.iam"


def test_submit_without_credentials_is_one_clear_line(compiled, tmp_path, monkeypatch, capsys):
    path, _ = compiled
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # never probe a metadata server from tests
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert cli.main(["submit", str(path), "--project", "p", "--region", "us-central1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no Google Cloud credentials found") and len(err.splitlines()) == 1
