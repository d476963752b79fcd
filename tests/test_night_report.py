"""A compiled file's night report: the exit handler (components/night_report) composes the
night's message from the run's final status and the facts its steps kept, keeps it in the
serving folder, and delivers it to the webhook whose URL it takes from a Kubernetes secret
(Kubeflow, via the environment) or Secret Manager (Vertex, here a local stand-in); the
compiled files hold the handler, run after failed steps too, and no URL."""

import base64
import json
import time

import pytest
import yaml

from components.night_report import compose, handler, secret
from components.night_report.message import NOTIFY_VARIABLE
from components.storage import night_facts
from pipeline import cli
from pipeline.common import compiled_target, exit_status, kfp_platform

import http_stand_in
from http_stand_in import serve

KEY = "cifar10-20250101-000000"
SUCCEEDED = json.dumps({"state": "SUCCEEDED", "pipelineJobResourceName": KEY})
FAILED = json.dumps({"state": "FAILED", "error": {"code": 1, "message": "task failed"}})
# kfp.local's form: a dict with snake_case keys.
LOCAL_FAILED = {"state": "FAILED", "pipeline_task_name": "tfx-dag", "error": {"message": "x"}}


def _struct(found: dict):
    from google.protobuf import struct_pb2

    status = struct_pb2.Struct()
    status.update(found)
    return status


def keep(serving, **steps) -> str:
    folder = night_facts.folder(str(serving), KEY)
    for step, found in steps.items():
        night_facts.write(folder, step, found)
    return folder


def push_version(serving, version: str) -> None:
    (serving / version).mkdir(parents=True)
    (serving / version / "saved_model.pb").write_bytes(b"")


@pytest.mark.parametrize(
    ("status", "steps", "outcome"),
    [
        (SUCCEEDED, {"Evaluator": {"blessed": True, "eval_accuracy": 0.5}}, "pushed"),
        (SUCCEEDED, {"Cifar10ExampleGen": {"spans": [3], "no_new_span": True}}, "no_new_span"),
        (SUCCEEDED, {"Evaluator": {"blessed": False}}, "not_blessed"),
        (FAILED, {"DataValidationGate": {"kind": "DataDriftError", "error": "x"}}, "drift"),
        (FAILED, {"DataValidationGate": {"kind": "LabelsError", "error": "x"}}, "labels"),
        (FAILED, {"DataValidationGate": {"kind": "DuplicatesError", "error": "x"}}, "duplicates"),
        (FAILED, {"DataValidationGate": {"kind": "DataValidationError"}}, "data_invalid"),
        (FAILED, {}, "failed"),
        (LOCAL_FAILED, {}, "failed"),
        (_struct(LOCAL_FAILED), {}, "failed"),
        ("not json", {}, "failed"),
    ],
)
def test_each_outcome_is_composed_from_the_facts_and_the_final_status(status, steps, outcome):
    kept = {"ServedState": {"served_before": "1"}, **steps}
    served_after = "2" if outcome == "pushed" else "1"
    night = compose.compose(status, kept, served_after, "kubeflow")
    assert night["outcome"] == outcome
    assert night["runner"] == "kubeflow" and night["served_before"] == "1"
    assert night["exit_status"] == compose.EXIT_STATUS[outcome]


# The open-source KFP backend (2.14 and later) passes the exit-handler group's MLMD state
# ("COMPLETE", "FAILED", ...) as a Struct, with an empty error; Vertex and kfp.local say
# "SUCCEEDED".
KFP_COMPLETE = {"state": "COMPLETE", "pipelineTaskName": "tfx-dag", "pipelineJobResourceName": KEY}
KFP_FAILED = {**KFP_COMPLETE, "state": "FAILED", "error": {}}


@pytest.mark.parametrize("form", [dict, _struct], ids=["dict", "struct"])
def test_the_kfp_backends_complete_state_is_a_succeeded_run(form):
    kept = {"ServedState": {"served_before": "1"}, "Evaluator": {"blessed": True}}
    night = compose.compose(form(KFP_COMPLETE), kept, "2", "kubeflow")
    assert night["outcome"] == "pushed" and night["failed_step"] is None
    night = compose.compose(form(KFP_FAILED), kept, "1", "kubeflow")
    assert night["outcome"] == "failed" and night["failed_step"] == "AtomicPusher"


@pytest.mark.parametrize(
    ("steps", "failed_step"),
    [
        ((), "ServedState"),
        (("ServedState",), "Cifar10ExampleGen"),
        (
            ("ServedState", "Cifar10ExampleGen"),
            "StatisticsGen, ExampleValidator or DataValidationGate",
        ),
        (("ServedState", "Cifar10ExampleGen", "DataValidationGate"), "Trainer or Evaluator"),
        (("ServedState", "Cifar10ExampleGen", "DataValidationGate", "Evaluator"), "AtomicPusher"),
    ],
)
def test_a_failed_night_names_the_step_after_the_last_one_that_kept_its_facts(steps, failed_step):
    """KFP's final status names no failed step (the backend's carries no error at all): the
    facts each step kept as it finished tell how far the night got."""
    facts = {
        "ServedState": {"served_before": "1"},
        "Cifar10ExampleGen": {"spans": [1], "no_new_span": False},
        "DataValidationGate": {"passed": True},
        "Evaluator": {"blessed": True},
    }
    night = compose.compose(FAILED, {s: facts[s] for s in steps}, "1", "kubeflow")
    assert night["outcome"] == "failed" and night["failed_step"] == failed_step


def test_the_handler_reads_the_pushers_served_changed(tmp_path):
    """A night whose served version changed under it (another night pushed): its own outcome
    is served_changed, not the other night's push."""
    serving = tmp_path / "serving"
    push_version(serving, "1")
    keep(
        serving,
        ServedState={"served_before": "1"},
        Evaluator={"blessed": True},
        AtomicPusher={"served_changed": "the served version changed from 1 to 2"},
    )
    push_version(serving, "2")
    night = handler.report_night(SUCCEEDED, str(serving), KEY, "kubeflow", "")
    assert night["outcome"] == "served_changed" and night["exit_status"] == 6


def test_a_version_that_failed_its_load_test_is_that_outcome(tmp_path):
    serving = tmp_path / "serving"
    push_version(serving, "1")
    error = "load test: version 2 answered differently; nothing pushed"
    keep(serving, ServedState={"served_before": "1"}, AtomicPusher={"load_test_failed": error})
    night = handler.report_night(FAILED, str(serving), KEY, "kubeflow", "")
    assert night["outcome"] == "load_test_failed" and night["exit_status"] == 9
    assert night["failed_step"] == "AtomicPusher" and night["error"] == error


def test_a_gate_stop_carries_its_stop_lines():
    error = "data validation failed, training will not start:\n  - drifted: label\n  - other"
    kept = {"DataValidationGate": {"kind": "DataDriftError", "error": error}}
    night = compose.compose(FAILED, kept, None, "vertex")
    assert night["stops"] == ["drifted: label", "other"]
    assert night["failed_step"] == "DataValidationGate" and night["error"] == error


def test_the_exit_statuses_are_runs():
    assert compose.EXIT_STATUS == {
        "pushed": exit_status.OK, "no_new_span": exit_status.OK, "failed": exit_status.ERROR,
        "data_invalid": exit_status.DATA_INVALID, "drift": exit_status.DATA_INVALID,
        "labels": exit_status.DATA_INVALID, "duplicates": exit_status.DATA_INVALID,
        "not_blessed": exit_status.NOT_BLESSED, "served_changed": exit_status.SERVED_CHANGED,
        "load_test_failed": exit_status.LOAD_TEST_FAILED,
    }  # fmt: skip


@pytest.fixture
def hook():
    with http_stand_in.webhook("/hooks/secret-token-9") as found:
        yield found


def test_the_handler_keeps_delivers_and_clears_the_nights_facts(tmp_path, hook, monkeypatch):
    received, url = hook[0].received, hook[1]
    serving = tmp_path / "serving"
    push_version(serving, "1")
    folder = keep(serving, ServedState={"served_before": "1"}, Evaluator={"blessed": True})
    push_version(serving, "2")
    monkeypatch.setenv(NOTIFY_VARIABLE, url)
    night = handler.report_night(SUCCEEDED, str(serving), KEY, "kubeflow", "")
    assert [m["outcome"] for m in received] == ["pushed"] and night["served_after"] == "2"
    assert night["notification"].startswith("delivered to http://127.0.0.1:")
    latest = json.loads((serving / ".nights" / "latest.json").read_text())
    assert latest["outcome"] == "pushed" and "secret-token" not in json.dumps(latest)
    assert not (serving / ".nights" / "running").exists() or not any(
        (serving / ".nights" / "running").iterdir()
    ), folder


def test_a_slow_webhook_neither_fails_nor_holds_the_handler(tmp_path, hook, monkeypatch):
    hook[0].delay = 60.0
    monkeypatch.setenv(NOTIFY_VARIABLE, hook[1])
    monkeypatch.setattr("components.night_report.message.DELIVERY_SECONDS", 1.0)
    started = time.monotonic()
    night = handler.report_night(FAILED, str(tmp_path / "serving"), KEY, "kubeflow", "")
    assert time.monotonic() - started < 25  # message.DELIVERY_SECONDS (10 s) bounds it
    assert night["outcome"] == "failed" and night["notification"].startswith("not delivered")
    assert (tmp_path / "serving" / ".nights" / "latest.json").exists()


def test_without_a_secret_the_night_is_kept_and_delivered_nowhere(tmp_path, monkeypatch):
    monkeypatch.delenv(NOTIFY_VARIABLE, raising=False)
    night = handler.report_night(FAILED, str(tmp_path), KEY, "kubeflow", "")
    assert night["notification"] == f"not delivered: no {NOTIFY_VARIABLE} in the step's environment"
    night = handler.report_night(FAILED, str(tmp_path), KEY, "vertex", "")
    assert night["notification"] == "not delivered: no --notify-secret compiled in"
    assert len(list((tmp_path / ".nights").glob("*-failed.json"))) == 2


def _secret_manager(url: str, seen: list):
    class SecretManager(http_stand_in.JsonHandler):
        def do_GET(self):
            seen.append((self.path, self.headers["Authorization"]))
            data = base64.b64encode(url.encode()).decode()
            self.reply({"name": self.path, "payload": {"data": data}})

        def log_message(self, *args):
            pass

    return SecretManager


def test_vertex_reads_the_url_from_secret_manager_with_its_token(tmp_path, hook, monkeypatch):
    seen: list = []
    with serve(_secret_manager(hook[1], seen)) as api:
        monkeypatch.setenv(secret.ENDPOINT_VARIABLE, api)
        monkeypatch.setattr(secret, "_default_token", lambda: "sa-token")
        name = "projects/p-1/secrets/night-hook"
        night = handler.report_night(SUCCEEDED, str(tmp_path), KEY, "vertex", name)
    assert seen == [(f"/{name}/versions/latest:access", "Bearer sa-token")]
    assert [m["runner"] for m in hook[0].received] == ["vertex"]
    assert night["notification"].startswith("delivered")


def test_a_secret_that_cannot_be_read_is_said_without_failing(tmp_path, monkeypatch):
    monkeypatch.setenv(secret.ENDPOINT_VARIABLE, "http://127.0.0.1:9")
    monkeypatch.setattr(secret, "_default_token", lambda: "t")
    night = handler.report_night(FAILED, str(tmp_path), KEY, "vertex", "projects/p/secrets/s")
    assert night["notification"].startswith("not delivered: secret projects/p/secrets/s not read")


@pytest.mark.parametrize("name", ["hooks", "projects/p/secrets/s/versions/x/y", "projects//s"])
def test_a_secret_manager_name_is_checked(name):
    with pytest.raises(ValueError, match="projects/PROJECT/secrets/NAME"):
        secret.check_name(name)


# --- the compiled files ---

URL = "http://127.0.0.1:1/hooks/never-in-a-file"


def _compile(tmp_path_factory, target: str, *extra: str) -> tuple[dict, dict, str]:
    path = tmp_path_factory.mktemp(target) / "p.yaml"
    args = ["compile", "--target", target, "--pipeline-root", "gs://b/root", "--image", "i:1"]
    if target == "vertex":
        args += ["--project", "p-1", "--region", "us-central1", "--tpu-image", "i:1"]
    assert cli.main([*args, "--data", "gs://b/d.tar.gz", "--output", str(path), *extra]) == 0
    spec, platform = kfp_platform.read_pipeline_file(path)
    return spec, platform, path.read_text()


@pytest.fixture(scope="module", params=["kubeflow", "vertex"])
def compiled(request, tmp_path_factory):
    secret_name = "hooks:url" if request.param == "kubeflow" else "projects/p-1/secrets/hook"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NOTIFY_VARIABLE, URL)  # in compile's environment: still never compiled in
        return request.param, *_compile(
            tmp_path_factory, request.param, "--notify-secret", secret_name
        )


def test_the_compiled_file_runs_the_handler_after_the_steps_whatever_they_did(compiled):
    target, spec, platform, text = compiled
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {compiled_target.TFX_DAG, "NightReport"}
    report = root["NightReport"]
    assert report["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert report["dependentTasks"] == [compiled_target.TFX_DAG]
    parameters = report["inputs"]["parameters"]
    assert parameters["final_status"] == {"taskFinalStatus": {"producerTask": "tfx-dag"}}
    assert parameters["runner"]["runtimeValue"]["constant"] == target
    key = {"runtimeValue": {"constant": night_facts.NIGHT_KEY_PLACEHOLDER}}
    assert parameters["night_key"] == key
    assert (
        compiled_target.pipeline_tasks(spec)["ServedState"]["inputs"]["parameters"]["night_key"]
        == key
    )
    assert compiled_target.exit_task(spec) == "NightReport"
    assert "127.0.0.1" not in text and "never-in-a-file" not in text


def test_the_night_key_is_the_runs_unique_id():
    """The open-source KFP backend substitutes `{{$.pipeline_job_name}}` with the run's display
    name, which two runs may share (`submit --run-name first` twice): their facts would mix.
    The run's UUID is unique on KFP, Vertex and kfp.local alike."""
    assert night_facts.NIGHT_KEY_PLACEHOLDER == "{{$.pipeline_job_uuid}}"


def test_only_the_secrets_name_is_compiled_in(compiled):
    target, spec, platform, _ = compiled
    report = spec["components"]["NightReport"]["executorLabel"]
    if target == "kubeflow":
        assert kfp_platform.secret_variables(platform, report) == {
            NOTIFY_VARIABLE: ("hooks", "url")
        }
    else:
        constant = spec["root"]["dag"]["tasks"]["NightReport"]["inputs"]["parameters"]
        assert constant["notify_secret"]["runtimeValue"]["constant"] == "projects/p-1/secrets/hook"
        assert platform == {}


def test_the_span_parameters_reach_the_nested_steps(compiled):
    _, spec, _, _ = compiled
    nested = spec["components"][compiled_target.TFX_DAG]
    assert set(nested["inputDefinitions"]["parameters"]) == {"span", "span_window", "force"}
    task = spec["root"]["dag"]["tasks"][compiled_target.TFX_DAG]
    assert task["inputs"]["parameters"]["span"] == {"componentInputParameter": "span"}
    example_gen = compiled_target.pipeline_tasks(spec)["Cifar10ExampleGen"]
    assert example_gen["inputs"]["parameters"]["span"] == {"componentInputParameter": "span"}
    yaml.safe_dump(spec)  # plain data


def test_kfp_local_names_the_same_webhook_variable():
    """pipeline/kfp_local runs without TFX, so it names the variable instead of importing it."""
    from components.night_report.message import NOTIFY_VARIABLE
    from pipeline.kfp_local import plan

    assert plan.NOTIFY_VARIABLE == NOTIFY_VARIABLE
