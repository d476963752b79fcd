"""Vertex AI: compile the same topology with KubeflowV2DagRunner, submit --dry-run, and the
real submission code path against a local HTTP server standing in for the Vertex API."""

import copy
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.types import AcceleratorType, CustomJobSpec

from pipeline import cli
from pipeline.common.compiled_target import pipeline_tasks
from pipeline.local.runner import local_config
from pipeline.settings.config import CONTAINER_SCHEMA_PATH, TrainingConfig
from pipeline.topology import create_pipeline
from pipeline.vertex import options as vertex_config
from pipeline.vertex import pipeline_file as vertex_file
from pipeline.vertex import submit as vertex_runner

import http_stand_in
from conftest import PIPELINE_NODES, compiler_places, compiling_away_from_home

REPO_ROOT = Path(__file__).resolve().parents[1]

IMAGE = "us-docker.pkg.dev/proj-x/pipelines/cifar10:v1"
ROOT = "gs://bucket-x/pipeline-root"
SERVICE_ACCOUNT = "trainer@proj-x.iam.gserviceaccount.com"
NETWORK = "projects/123456/global/networks/vpc-1"
COMPILE_ARGS = [
    "compile",
    "--target",
    "vertex",
    "--project",
    "proj-x",
    "--region",
    "us-central1",
    "--pipeline-root",
    ROOT,
    "--image",
    IMAGE,
    "--data",
    "gs://bucket-x/cifar-10-binary.tar.gz",
    "--tpu-type",
    "TPU_V3",
    "--tpu-cores",
    "8",
    # A TPU pool needs its image named (stack.tpu_image_problem): the same as the pipeline
    # image here, so the assertions about images stay simple.
    "--tpu-image",
    IMAGE,
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = tmp_path_factory.mktemp("vertex") / "pipeline.json"
    with compiling_away_from_home(tmp_path_factory, "vertex"):
        assert cli.main(COMPILE_ARGS + ["--output", str(path)]) == 0
    return path, json.loads(path.read_text())


def _tasks(job):
    return pipeline_tasks(job["pipelineSpec"])


def test_compiled_dag_has_every_component_and_dependency(compiled):
    _, job = compiled
    tasks = _tasks(job)
    deps = {name: set(task.get("dependentTasks", [])) for name, task in tasks.items()}
    for name in PIPELINE_NODES:
        assert name in tasks
    assert {"Cifar10ExampleGen", "ImportSchemaGen"} <= deps["StatisticsGen"]
    assert {"StatisticsGen", "ExampleValidator"} <= deps["DataValidationGate"]
    assert {"DataValidationGate", "Cifar10ExampleGen"} <= deps["Trainer"]
    assert "Trainer" in deps["Evaluator"]
    assert {"Evaluator", "Trainer"} <= deps["AtomicPusher"]


def test_trainer_runs_on_a_tpu_worker_pool_with_the_tpu_strategy(compiled):
    _, job = compiled
    parameter = _tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]
    custom = json.loads(parameter["runtimeValue"]["constant"])
    job_spec = custom["ai_platform_training_args"]["job_spec"]
    pool = CustomJobSpec(**job_spec).worker_pool_specs[0]  # Vertex's own type accepts it
    assert pool.machine_spec.machine_type == "cloud-tpu"
    assert pool.machine_spec.accelerator_type == AcceleratorType.TPU_V3
    assert pool.machine_spec.accelerator_count == 8
    pool = job_spec["worker_pool_specs"][0]
    assert pool["container_spec"]["image_uri"] == IMAGE
    assert custom["training"]["strategy"] == "tpu" and custom["training"]["tpu"] == "local"
    assert custom[vertex_file.TRAINING_ARGS_KEY]["project"] == "proj-x"
    assert custom[vertex_file.VERTEX_REGION_KEY] == "us-central1"
    assert custom["ai_platform_enable_vertex"] is True
    # Retries resume: checkpoints under the pipeline root, not under the job's paths.
    assert custom["checkpoint_root"] == f"{ROOT}/Trainer/checkpoints"
    for name in ("Cifar10ExampleGen", "StatisticsGen", "Trainer", "Evaluator"):
        assert _tasks(job)[name]["cachingOptions"]["enableCache"] is True


def test_the_job_is_pipeline_spec_2_1(compiled):
    _, job = compiled
    assert job["pipelineSpec"]["schemaVersion"] == "2.1.0"
    custom_config = _tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]
    assert set(custom_config["runtimeValue"]) == {"constant"}


def test_submit_still_reads_a_file_compiled_in_pipeline_spec_2_0(compiled, tmp_path, capsys):
    """Files compiled before spec 2.1 wrap each constant; Vertex runs them, submit reads them."""
    job = copy.deepcopy(compiled[1])  # the module's compiled job stays as compiled
    parameter = _tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]
    value = parameter["runtimeValue"].pop("constant")
    parameter["runtimeValue"]["constantValue"] = {"stringValue": value}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(job))
    assert cli.main(["submit", str(old), "--dry-run"]) == 0
    assert "projects/proj-x/locations/us-central1" in capsys.readouterr().out


def test_submit_reads_the_vertex_trainer_keys_tfx_uses():
    from tfx.extensions.google_cloud_ai_platform import constants
    from tfx.extensions.google_cloud_ai_platform.trainer import executor

    assert vertex_file.TRAINING_ARGS_KEY == executor.TRAINING_ARGS_KEY
    assert vertex_file.VERTEX_REGION_KEY == constants.VERTEX_REGION_KEY


@pytest.fixture(scope="module")
def compiled_for_v5e(tmp_path_factory):
    """Every cloud flag at once: v5e, a TPU image, Dataflow options, identity, no caching."""
    path = tmp_path_factory.mktemp("vertex-v5e") / "pipeline.json"
    args = [a for a in COMPILE_ARGS if a not in ("TPU_V3", "8", "--tpu-type", "--tpu-cores")]
    assert (
        cli.main(
            args
            + [
                "--tpu-type",
                "v5litepod-8",
                "--tpu-image",
                IMAGE + "-tpu",
                "--output",
                str(path),
                "--dataflow-region",
                "us-central1",
                "--dataflow-temp-location",
                "gs://bucket-x/tmp",
                "--beam-arg=--disk_size_gb=100",
                "--beam-arg=--machine_type=n2-standard-4",
                "--beam-arg=--max_num_workers=4",
                "--beam-arg=--no_use_public_ips",
                "--beam-arg=--subnetwork=regions/us-central1/subnetworks/s1",
                "--service-account",
                SERVICE_ACCOUNT,
                "--network",
                NETWORK,
                "--label",
                "team=vision",
                "--label",
                "cost-center=42",
                "--no-cache",
            ]
        )
        == 0
    )
    return path, json.loads(path.read_text())


def test_cloud_flags_reach_the_training_job_and_dataflow(compiled_for_v5e):
    _, job = compiled_for_v5e
    parameter = _tasks(job)["Trainer"]["inputs"]["parameters"]["custom_config"]
    custom = json.loads(parameter["runtimeValue"]["constant"])
    training_args = custom[vertex_file.TRAINING_ARGS_KEY]
    spec = CustomJobSpec(**training_args["job_spec"])
    assert spec.service_account == SERVICE_ACCOUNT and spec.network == NETWORK
    [pool] = spec.worker_pool_specs
    assert pool.machine_spec.machine_type == "ct5lp-hightpu-8t"
    assert pool.machine_spec.accelerator_count == 0  # v5e: no accelerator fields
    assert pool.container_spec.image_uri == IMAGE + "-tpu"
    assert {e.name: e.value for e in pool.container_spec.env}[
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"
    ] == "/lib/libtpu.so"
    assert training_args["labels"] == {"team": "vision", "cost-center": "42"}
    beam = job["pipelineSpec"]["deploymentSpec"]["executors"]["StatisticsGen_executor"][
        "container"
    ]["args"]
    for option in (
        "--runner=DataflowRunner",
        "--disk_size_gb=100",
        "--machine_type=n2-standard-4",
        "--max_num_workers=4",
        "--no_use_public_ips",
        "--subnetwork=regions/us-central1/subnetworks/s1",
        f"--service_account_email={SERVICE_ACCOUNT}",
        f"--sdk_container_image={IMAGE}",
    ):
        assert option in beam
    assert not any(t.get("cachingOptions", {}).get("enableCache") for t in _tasks(job).values())


def _refused_in_one_line(flags: list[str], message: str, tmp_path, capsys) -> None:
    """Compiling with `flags` (instead of the TPU flags) exits 2 with `message` as its only
    line and writes nothing."""
    args = [a for a in COMPILE_ARGS if a not in ("TPU_V3", "8", "--tpu-type", "--tpu-cores")]
    output = tmp_path / "p.json"
    assert cli.main(args + flags + ["--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not output.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tpu-type", "v3-32"], "--tpu-type 'v3-32' is not offered"),
        (["--tpu-type", "v4-8"], "choose one of v2-8, v3-8, v5litepod-1"),
        (["--tpu-type", "TPU_V2", "--tpu-cores", "32"], "--tpu-cores 32 does not match"),
        (["--beam-arg", "disk_size_gb=100"], "--beam-arg 'disk_size_gb=100' must be a Beam option"),
        (["--label", "Team=x"], "--label 'Team=x' must be KEY=VALUE"),
        (["--network", "vpc-1"], "--network must be projects/PROJECT_NUMBER/global/networks/NAME"),
    ],
)
def test_bad_cloud_flags_are_one_line_at_compile_time(flags, message, tmp_path, capsys):
    _refused_in_one_line(flags, message, tmp_path, capsys)


def test_image_root_and_no_local_paths(compiled, tmp_path_factory):
    path, job = compiled
    text = path.read_text()
    assert job["runtimeConfig"]["gcsOutputDirectory"] == ROOT
    images = {
        e["container"]["image"]
        for e in job["pipelineSpec"]["deploymentSpec"]["executors"].values()
        if "container" in e
    }
    assert images == {IMAGE}
    home, cwd = compiler_places(tmp_path_factory, "vertex")
    for local in (REPO_ROOT, home, cwd, tmp_path_factory.getbasetemp()):
        assert str(local) not in text, f"local path {local} leaked into the compiled pipeline"
    assert CONTAINER_SCHEMA_PATH in text


def test_local_and_vertex_pipelines_share_one_topology(tmp_path):
    training = TrainingConfig()
    local = create_pipeline(local_config(tmp_path, "/data/c.tar.gz", "f", training))
    vertex = create_pipeline(
        vertex_config.vertex_config(
            project="p",
            region="r",
            pipeline_root=ROOT,
            image=IMAGE,
            source_uri="gs://b/c.tar.gz",
            training=training,
            tpu_image=IMAGE,
        )
    )

    def edges(pipeline):
        return {(c.id, tuple(sorted(u.id for u in c.upstream_nodes))) for c in pipeline.components}

    assert edges(local) == edges(vertex)


def test_compile_rejects_local_paths():
    with pytest.raises(ValueError, match="--data must be a gs:// URI"):
        vertex_config.vertex_config(
            project="p",
            region="r",
            pipeline_root=ROOT,
            image=IMAGE,
            source_uri="/home/me/c.tar.gz",
            training=TrainingConfig(),
        )


def test_submit_dry_run_validates_and_describes(compiled, capsys):
    path, _ = compiled
    assert (
        cli.main(
            ["submit", str(path), "--project", "proj-x", "--region", "us-central1", "--dry-run"]
        )
        == 0
    )
    shown = capsys.readouterr().out
    assert "would submit PipelineJob 'cifar10-" in shown
    assert "projects/proj-x/locations/us-central1" in shown and IMAGE in shown
    assert "Trainer" in shown and "caching    as compiled" in shown


def test_dry_run_takes_identity_and_labels_from_the_compiled_training_job(compiled_for_v5e, capsys):
    path, _ = compiled_for_v5e
    assert cli.main(["submit", str(path), "--dry-run", "--label", "run=nightly"]) == 0
    shown = capsys.readouterr().out
    assert f"runs as    {SERVICE_ACCOUNT}" in shown and f"network    {NETWORK}" in shown
    assert "labels     cost-center=42, run=nightly, team=vision" in shown
    assert "projects/proj-x/locations/us-central1" in shown


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--project", "proj-y"], "was compiled for project 'proj-x', not 'proj-y'"),
        (["--region", "europe-west4"], "was compiled for region 'us-central1', not 'europe-west4'"),
    ],
)
def test_submit_refuses_another_project_or_region(compiled, flags, message, capsys):
    path, _ = compiled
    assert cli.main(["submit", str(path), "--dry-run", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_submit_dry_run_refuses_a_file_that_is_not_a_pipeline(tmp_path, capsys):
    bad = tmp_path / "p.json"
    bad.write_text('{"hello": 1}')
    assert cli.main(["submit", str(bad), "--project", "p", "--region", "r", "--dry-run"]) == 2
    assert "not a compiled Vertex pipeline" in capsys.readouterr().err


class _FakeVertex(http_stand_in.JsonHandler):
    """Vertex's REST API (create, then get: running, then succeeded) and the Cloud Storage
    bucket lookup PipelineJob.submit makes for the pipeline root. `faults` are taken one
    per job GET before it is answered: an HTTP status to reply with instead, or "hang"
    (answer only after the client's request timeout). The job created is named after the
    project and region it was created in, and a GET of any other name is 404, as on Vertex:
    `wait` must poll the job `submit` created."""

    requests: list = []
    polls = 0
    faults: list = []
    created = ""  # the created job's resource name
    gets: list = []  # the paths of the job GETs, in order

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeVertex.requests.append((self.path, body))
        parent = self.path.split("?")[0].removeprefix("/v1/").removesuffix("/pipelineJobs")
        _FakeVertex.created = f"{parent}/pipelineJobs/{JOB_ID}"
        self.reply({**body, "name": _FakeVertex.created, "state": "PIPELINE_STATE_PENDING"})

    def do_GET(self):
        if self.path.startswith("/storage/v1/b/"):
            self.reply({"name": "bucket-x", "projectNumber": PROJECT_NUMBER})
            return
        path = self.path.split("?")[0]
        _FakeVertex.gets.append(path)
        if path != f"/v1/{_FakeVertex.created}":
            status = {"code": 404, "message": f"{path} not found", "status": "NOT_FOUND"}
            self.reply({"error": status}, status=404)
            return
        if _FakeVertex.faults:
            fault = _FakeVertex.faults.pop(0)
            if fault == "hang":
                _FakeVertex.release.wait(HANG_SECONDS)
            else:
                status = {"code": fault, "message": f"injected {fault}", "status": "INJECTED"}
                self.reply({"error": status}, status=fault)
                return
        _FakeVertex.polls += 1
        done = _FakeVertex.polls > 2
        task_state = "SUCCEEDED" if done else "RUNNING"
        self.reply(
            {
                "name": _FakeVertex.created,
                "state": "PIPELINE_STATE_SUCCEEDED" if done else "PIPELINE_STATE_RUNNING",
                "jobDetail": {"taskDetails": [{"taskName": "Trainer", "state": task_state}]},
            }
        )

    def log_message(self, *args):
        pass


JOB_ID = "j1"
JOB_NAME = f"projects/proj-x/locations/us-central1/pipelineJobs/{JOB_ID}"
CONSOLE_URL = (
    "https://console.cloud.google.com/vertex-ai/locations/us-central1/pipelines/runs/j1"
    "?project=proj-x"
)
# The client gives a poll a quarter of this; a normal reply of the local stand-in takes
# milliseconds, so only the injected hang times out, on a loaded machine too.
HANG_SECONDS = 4.0
PROJECT_NUMBER = "123456789"


@pytest.fixture
def fake_vertex(monkeypatch):
    from google.auth.credentials import AnonymousCredentials

    _FakeVertex.requests, _FakeVertex.polls, _FakeVertex.faults = [], 0, []
    _FakeVertex.created, _FakeVertex.gets = "", []
    _FakeVertex.release = threading.Event()
    monkeypatch.setattr(vertex_runner, "POLL_REQUEST_TIMEOUT_SECONDS", HANG_SECONDS / 4)
    monkeypatch.setattr(vertex_runner, "FIRST_BACKOFF_SECONDS", 0.05)
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "proj-x"))
    # aiplatform checks that the root's bucket belongs to the project through Resource
    # Manager, whose endpoint no emulator variable redirects; unanswered, it retried for
    # about 50 s per submit before giving up.
    monkeypatch.setattr(
        "google.cloud.aiplatform.utils.resource_manager_utils.get_project_number",
        lambda project_id, credentials=None: PROJECT_NUMBER if project_id == "proj-x" else "0",
    )
    # Threaded, so a hung reply blocks no other; closed (and its hang released) at teardown.
    with http_stand_in.serve(_FakeVertex, release=_FakeVertex.release) as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)  # the bucket check, on the stand-in
        yield url


def test_submit_sends_a_pipeline_job_through_aiplatform_and_waits(
    compiled_for_v5e, fake_vertex, capsys
):
    path, job = compiled_for_v5e
    assert (
        cli.main(
            [
                "submit",
                str(path),
                "--project",
                "proj-x",
                "--label",
                "run=nightly",
                "--cache",
                "--parameter",
                "span=3",
                "--wait",
                "--poll-seconds",
                "0",
                "--api-endpoint",
                fake_vertex,
            ]
        )
        == 0
    )
    [(url, body)] = _FakeVertex.requests
    assert url.startswith("/v1/projects/proj-x/locations/us-central1/pipelineJobs")
    assert f"pipelineJobId={body['displayName']}" in url
    assert pipeline_tasks(body["pipelineSpec"]).keys() == _tasks(job).keys()
    assert body["runtimeConfig"]["gcsOutputDirectory"] == ROOT
    assert body["serviceAccount"] == SERVICE_ACCOUNT and body["network"] == NETWORK
    assert body["labels"] == {"team": "vision", "cost-center": "42", "run": "nightly"}
    assert body["runtimeConfig"]["parameterValues"] == {"span": 3, "span_window": 1, "force": 0}
    # --cache overrides the compiled --no-cache on every task but the two that read the span
    # and serving folders: cached, they would replay an old night.
    caching = {
        name: task["cachingOptions"]["enableCache"]
        for name, task in pipeline_tasks(body["pipelineSpec"]).items()
    }
    assert caching.pop("ServedState") is False and caching.pop("Cifar10ExampleGen") is False
    assert set(caching.values()) == {True}
    out, err = capsys.readouterr()
    assert f"Submitted {JOB_NAME}" in out and "ended: PIPELINE_STATE_SUCCEEDED" in out
    assert "Trainer: RUNNING" in err and "Trainer: SUCCEEDED" in err
    # Every poll asked for the job created, in the compiled project and region.
    assert _FakeVertex.created == JOB_NAME
    assert _FakeVertex.gets and set(_FakeVertex.gets) == {f"/v1/{JOB_NAME}"}


@pytest.mark.parametrize("enable_caching", [True, False, None])
def test_no_submit_option_caches_the_steps_that_read_span_or_serving_folders(
    compiled, tmp_path, enable_caching
):
    """The body aiplatform's PipelineJob would send (anonymous credentials, no network):
    aiplatform's own `enable_caching` overwrites every task's option, so submit applies the
    choice to the file itself, leaving the served state and the ExampleGen uncached."""
    from google.auth.credentials import AnonymousCredentials

    path, _ = compiled
    submission = vertex_file.load_submission(path, project="proj-x", enable_caching=enable_caching)
    job = vertex_runner.pipeline_job(submission, AnonymousCredentials(), tmp_path)
    tasks = pipeline_tasks(job.to_dict()["pipelineSpec"])
    caching = {
        name: task.get("cachingOptions", {}).get("enableCache") for name, task in tasks.items()
    }
    assert caching.pop("ServedState") is False and caching.pop("Cifar10ExampleGen") is False
    expected = {True} if enable_caching is None else {enable_caching}  # compiled: cache on
    assert set(caching.values()) == expected, caching


def _submit_and_wait(path, endpoint, *flags):
    return cli.main(
        ["submit", str(path), "--project", "proj-x", "--wait", "--poll-seconds", "0",
         "--api-endpoint", endpoint, *flags]
    )  # fmt: skip


def test_wait_polls_on_through_server_errors_and_timeouts(compiled_for_v5e, fake_vertex, capsys):
    path, _ = compiled_for_v5e
    _FakeVertex.faults = [503, "hang", 500, 429]
    assert _submit_and_wait(path, fake_vertex, "--wait-retry-seconds", "60") == 0
    out, err = capsys.readouterr()
    assert "ended: PIPELINE_STATE_SUCCEEDED" in out
    retried = [line for line in err.splitlines() if "lost contact" in line]
    causes = [line.split("(")[1].split(":")[0] for line in retried]
    # Each injected fault is retried once, in order. A normal reply that a very loaded
    # machine delays past the poll timeout would add a ReadTimeout retry, and nothing else.
    assert [cause for cause in causes if cause != "ReadTimeout"] == [
        "ServiceUnavailable",
        "InternalServerError",
        "TooManyRequests",
    ]
    assert causes.index("ServiceUnavailable") < causes.index("ReadTimeout")
    assert causes.index("ReadTimeout") < causes.index("InternalServerError")
    assert all(line.endswith("; retrying") for line in retried)
    assert "Trainer: SUCCEEDED" in err and _FakeVertex.faults == []


@pytest.mark.parametrize(
    "faults, cause",
    [
        ([503] * 1000, "ServiceUnavailable: 503"),  # past --wait-retry-seconds
        ([403], "Forbidden: 403"),  # not worth retrying
    ],
)
def test_lost_contact_is_its_own_exit_status_with_the_console_link(
    compiled_for_v5e, fake_vertex, capsys, faults, cause
):
    path, _ = compiled_for_v5e
    _FakeVertex.faults = faults
    assert _submit_and_wait(path, fake_vertex, "--wait-retry-seconds", "1") == 5
    out, err = capsys.readouterr()
    [last] = err.strip().splitlines()[-1:]
    assert last.startswith(f"error: lost contact with Vertex AI while waiting for {JOB_NAME} (")
    assert cause in last and last.endswith(f"the job may still be running: {CONSOLE_URL}")
    assert "refused" not in err and f"Submitted {JOB_NAME}\n{CONSOLE_URL}" in out


def test_submit_without_credentials_is_one_clear_line(compiled, tmp_path, monkeypatch, capsys):
    path, _ = compiled
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # never probe a metadata server from tests
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    assert cli.main(["submit", str(path), "--project", "proj-x", "--region", "us-central1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no Google Cloud credentials found") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy", "mirrored"], "--strategy mirrored does not fit this training job"),
        (["--cpu-replicas", "8"], "--cpu-replicas splits a local CPU"),
    ],
)
def test_compile_refuses_training_settings_a_tpu_cannot_honour(flags, message, tmp_path, capsys):
    from pipeline import cli

    status = cli.main(
        [
            "compile",
            "--project",
            "p",
            "--region",
            "us-central1",
            "--pipeline-root",
            "gs://b/root",
            "--image",
            "img",
            "--tpu-image",
            "img-tpu",
            "--data",
            "gs://b/data.tar.gz",
            "--output",
            str(tmp_path / "p.yaml"),
            *flags,
        ]
    )
    assert status == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


def test_reading_and_submitting_a_compiled_file_imports_no_tfx():
    """`submit` works from the compiled file alone: TFX, TensorFlow and Beam (about 30 s to
    import) stay out of what it uses, and out of what it shares with Kubeflow's submit."""
    modules = [
        "common.submission",
        "vertex.options",
        "vertex.pipeline_file",
        "vertex.submit",
        "kubeflow.submit",
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module('pipeline.' + name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'tfx', 'tensorflow', 'apache_beam'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def _compile_custom_config(tmp_path, flags):
    args = [a for a in COMPILE_ARGS if a not in ("TPU_V3", "8", "--tpu-type", "--tpu-cores")]
    path = tmp_path / "p.json"
    assert cli.main(args + flags + ["--output", str(path)]) == 0
    parameter = _tasks(json.loads(path.read_text()))["Trainer"]["inputs"]["parameters"]
    return json.loads(parameter["custom_config"]["runtimeValue"]["constant"])


def test_gpu_workers_compile_to_a_chief_pool_and_a_worker_pool(tmp_path):
    custom = _compile_custom_config(
        tmp_path,
        ["--workers", "3", "--worker-machine-type", "n1-standard-8"]
        + ["--worker-gpus", "2", "--worker-gpu-type", "NVIDIA_TESLA_T4"],
    )
    spec = CustomJobSpec(**custom[vertex_file.TRAINING_ARGS_KEY]["job_spec"])
    chief, workers = spec.worker_pool_specs  # Vertex's own type accepts both pools
    assert (chief.replica_count, workers.replica_count) == (1, 2)
    for pool in (chief, workers):
        assert pool.machine_spec.machine_type == "n1-standard-8"
        assert pool.machine_spec.accelerator_type == AcceleratorType.NVIDIA_TESLA_T4
        assert pool.machine_spec.accelerator_count == 2
        assert pool.container_spec.image_uri == IMAGE
    assert custom["training"]["strategy"] == "multi_worker"
    assert custom["training"]["tpu"] == ""  # no TPU to connect to


def test_a_multi_host_tpu_slice_compiles_to_one_replica_with_its_topology(tmp_path):
    custom = _compile_custom_config(tmp_path, ["--tpu-type", "v5litepod-16"])
    [pool] = CustomJobSpec(**custom[vertex_file.TRAINING_ARGS_KEY]["job_spec"]).worker_pool_specs
    assert pool.machine_spec.machine_type == "ct5lp-hightpu-4t"
    assert pool.machine_spec.tpu_topology == "4x4"
    assert pool.replica_count == 1  # Vertex provisions the slice's 4 hosts as one replica
    assert custom["training"]["strategy"] == "tpu"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--workers", "2"], "--workers and --worker-gpus need --worker-machine-type"),
        (["--workers", "0"], "--workers must be at least 1"),
        (
            ["--worker-machine-type", "n1-standard-8", "--tpu-type", "v2-8"],
            "--tpu-type/--tpu-cores and --worker-machine-type exclude each other",
        ),
        (
            ["--worker-machine-type", "n1-standard-8", "--worker-gpus", "1"],
            "--worker-gpus N and --worker-gpu-type TYPE go together",
        ),
        (
            ["--worker-machine-type", "a2-highgpu-1g", "--worker-gpus", "1"]
            + ["--worker-gpu-type", "NVIDIA_A100"],
            "--worker-gpu-type 'NVIDIA_A100' is not one of",
        ),
        (
            ["--worker-machine-type", "n1-standard-8", "--workers", "2", "--strategy", "tpu"],
            "--strategy tpu does not fit this training job (2 x n1-standard-8)",
        ),
    ],
)
def test_worker_flags_that_do_not_fit_are_one_line_at_compile_time(
    flags, message, tmp_path, capsys
):
    _refused_in_one_line(flags, message, tmp_path, capsys)
