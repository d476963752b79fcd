"""`compile --endpoint`: each deployment is also a version of the serving folder under the
pipeline root, with the endpoint's ids beside the model, so the served state (no new span,
warm start, drift, the regression baseline) holds on Vertex as it does locally. The deploy
itself (google-cloud-aiplatform) is replaced here by a recorder: no Google API is reachable."""

import json
import os
from unittest import mock

import pytest
from test_atomic_pusher import _fixture_load_test
from tfx.types import standard_artifacts

from components.atomic_pusher import executor as pusher
from components.atomic_pusher import vertex_endpoint
from components.storage import served_versions
from pipeline.common.compiled_target import pipeline_tasks

SETTINGS = {
    "project": "proj-x",
    "region": "us-central1",
    "endpoint": "cifar10-endpoint",
    "image": "serving:1",
    "machine_type": "n1-standard-4",
}
IDS = {
    "endpoint": "projects/1/endpoints/2",
    "model": "projects/1/models/3",
    "deployed_model_id": "4",
}


def _model(tmp_path, name="model"):
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / name)
    serving = tmp_path / name / "Format-Serving"
    (serving / "variables").mkdir(parents=True)
    (serving / "saved_model.pb").write_bytes(b"graph-" + name.encode())
    (serving / "variables" / "variables.index").write_bytes(b"index")
    (serving / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    return model


def _push(tmp_path, model, base, served_version=None, load_tested=False):
    blessing = standard_artifacts.ModelBlessing()
    blessing.set_int_custom_property("blessed", 1)
    served = standard_artifacts.Model()
    served.uri = str(tmp_path / f"served-{served_version}")
    os.makedirs(served.uri, exist_ok=True)
    state = served_versions.ServedState(version=served_version)
    (tmp_path / f"served-{served_version}" / "served_state.json").write_text(state.to_json())
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    # The fixture model is a few bytes, not a loadable SavedModel: the load test of the staged
    # copy (before the deploy) is the protocol tests' stand-in (`load_tested`: the real one,
    # as tests/test_warmup.py runs it on real exports).
    stand_in = pusher.load_test if load_tested else _fixture_load_test
    with mock.patch.object(pusher, "load_test", stand_in):
        vertex_endpoint.EndpointExecutor().Do(
            {"model": [model], "model_blessing": [blessing], "served_model": [served]},
            {"pushed_model": [pushed]},
            {pusher.BASE_DIRECTORY_KEY: str(base), "vertex_serving": json.dumps(SETTINGS)},
        )
    return pushed


@pytest.fixture
def deploys(monkeypatch):
    calls = []

    def deploy(model_path, settings):
        calls.append((model_path, settings))
        return IDS

    monkeypatch.setattr(vertex_endpoint, "deploy", deploy)
    monkeypatch.setattr(vertex_endpoint, "undeploy_all_but", lambda *args: [])
    return calls


def test_a_deployment_is_a_version_of_the_serving_folder(tmp_path, deploys):
    base = tmp_path / "root" / "serving" / "cifar10"
    model = _model(tmp_path)
    pushed = _push(tmp_path, model, base)
    assert deploys == [(os.path.join(model.uri, "Format-Serving"), SETTINGS)]
    version = served_versions.newest_complete_version(str(base))
    assert json.loads((base / version / "endpoint.json").read_text()) == IDS
    assert (base / version / "saved_model.pb").read_bytes() == b"graph-model"
    assert pushed.get_string_custom_property("pushed_destination") == str(base / version)
    # the next night's first step reads it like any push
    assert served_versions.read_served_state(str(base)).version == version


def test_a_failed_deploy_records_nothing(tmp_path, monkeypatch):
    def fail(model_path, settings):
        raise RuntimeError("quota exceeded")

    monkeypatch.setattr(vertex_endpoint, "deploy", fail)
    base = tmp_path / "serving"
    with pytest.raises(RuntimeError, match="quota"):
        _push(tmp_path, _model(tmp_path), base)
    assert served_versions.complete_versions(str(base)) == []


def test_a_served_version_that_changed_stops_before_deploying(tmp_path, deploys):
    base = tmp_path / "serving"
    _push(tmp_path, _model(tmp_path, "first"), base)
    stopped = _push(tmp_path, _model(tmp_path, "second"), base)
    assert "it read nothing" in stopped.get_string_custom_property(pusher.SERVED_CHANGED_KEY)
    assert stopped.get_int_custom_property("pushed") == 0
    assert len(deploys) == 1 and len(served_versions.complete_versions(str(base))) == 1


def test_compile_with_an_endpoint_wires_the_endpoint_pusher(tmp_path):
    from pipeline import cli

    path = tmp_path / "p.yaml"
    args = ["compile", "--target", "vertex", "--project", "proj-x", "--region", "us-central1"]
    args += ["--pipeline-root", "gs://b/root", "--image", "img:1", "--tpu-image", "img:1"]
    args += ["--data", "gs://b/data", "--endpoint", "cifar10-endpoint", "--output", str(path)]
    assert cli.main(args) == 0
    import yaml

    spec = yaml.safe_load(path.read_text())
    task = pipeline_tasks(spec)["AtomicPusher"]
    serving = json.loads(task["inputs"]["parameters"]["vertex_serving"]["runtimeValue"]["constant"])
    assert serving["endpoint"] == "cifar10-endpoint" and serving["project"] == "proj-x"
    base = task["inputs"]["parameters"]["base_directory"]["runtimeValue"]["constant"]
    assert base == "gs://b/root/serving/cifar10"
    executor = spec["deploymentSpec"]["executors"]["AtomicPusher_executor"]["container"]["args"]
    assert "components.atomic_pusher.vertex_endpoint.EndpointExecutor" in executor
