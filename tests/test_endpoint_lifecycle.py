"""A Vertex AI endpoint over many nights (`compile --endpoint`): each pushed version is a new
version of one registry Model (alias `serving` on the served one), deployed with all traffic
while the push lock is held, and every deployed model of it but the served one and the
`--endpoint-keep` before it is undeployed, so the endpoint's size (and bill) stays bounded.
A rollback moves traffic back to a kept model, or deploys the version asked for again. All of
it through the real client (google-cloud-aiplatform, REST) against tests/vertex_stand_in.py."""

import fcntl
import json
import os
from unittest import mock

import pytest
from test_atomic_pusher import _fixture_load_test
from test_vertex_endpoint import SETTINGS, _model
from tfx.types import standard_artifacts

from components.atomic_pusher import executor as pusher
from components.atomic_pusher import vertex_endpoint
from components.atomic_pusher.lock import LOCK_NAME
from components.storage import served_versions
from pipeline import cli

import vertex_stand_in


@pytest.fixture
def vertex(monkeypatch):
    from google.auth.credentials import AnonymousCredentials

    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "proj-x"))
    state = vertex_stand_in.VertexState()
    with vertex_stand_in.serve(state) as url:
        state.url = url
        yield state


def _night(tmp_path, vertex, base, name, keep=None, expected="newest"):
    """One night's Pusher: a new fixture model, judged against the newest served version."""
    if (tmp_path / name).exists():  # a retry: the same Trainer artifact
        model = standard_artifacts.Model()
        model.uri = str(tmp_path / name)
    else:
        model = _model(tmp_path, name)
    blessing = standard_artifacts.ModelBlessing()
    blessing.set_int_custom_property("blessed", 1)
    served = standard_artifacts.Model()
    served.uri = str(tmp_path / f"served-{name}")
    os.makedirs(served.uri, exist_ok=True)
    newest = (
        served_versions.newest_complete_version(str(base)) if expected == "newest" else expected
    )
    state = served_versions.ServedState(version=newest)
    (tmp_path / f"served-{name}" / "served_state.json").write_text(state.to_json())
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / f"pushed-{name}")
    settings = {**SETTINGS, "api_endpoint": vertex.url}
    if keep is not None:
        settings["keep"] = keep
    with mock.patch.object(pusher, "load_test", _fixture_load_test):
        vertex_endpoint.EndpointExecutor().Do(
            {"model": [model], "model_blessing": [blessing], "served_model": [served]},
            {"pushed_model": [pushed]},
            {pusher.BASE_DIRECTORY_KEY: str(base), "vertex_serving": json.dumps(settings)},
        )
    return pushed


def _endpoint(vertex) -> str:
    [name] = vertex.endpoints
    return name


def _served_id(base) -> str:
    newest = served_versions.newest_complete_version(str(base))
    return served_versions.version_endpoint(str(base), newest)["deployed_model_id"]


def _calls(vertex, verb) -> list:
    return [r for r in vertex.requests if r[1].endswith(":" + verb)]


def test_each_night_is_a_new_version_of_one_registry_model_with_the_serving_alias(tmp_path, vertex):
    base = tmp_path / "serving"
    for night in ("a", "b", "c"):
        _night(tmp_path, vertex, base, night)
    [(model, versions)] = vertex.models.items()
    assert [v["versionId"] for v in versions] == ["1", "2", "3"]
    assert [v["artifactUri"] for v in versions] == [
        os.path.join(str(tmp_path / n), "Format-Serving") for n in "abc"
    ]
    assert [v for v in versions if "serving" in v["versionAliases"]] == [versions[-1]]
    newest = served_versions.newest_complete_version(str(base))
    ids = served_versions.version_endpoint(str(base), newest)
    assert ids["model"] == f"{model}@3" and ids["endpoint"] == _endpoint(vertex)


@pytest.mark.parametrize("keep", [0, 1, 2])
def test_the_endpoint_keeps_the_served_model_and_endpoint_keep_before_it(tmp_path, vertex, keep):
    base = tmp_path / "serving"
    ids = []
    for night in range(5):
        _night(tmp_path, vertex, base, f"m{night}", keep=keep)
        ids.append(_served_id(base))
        endpoint = _endpoint(vertex)
        assert vertex.traffic(endpoint) == {ids[-1]: 100}
        assert vertex.deployed(endpoint) == ids[-1 - min(keep, night) :]


def test_a_year_of_nights_with_a_rollback_in_the_middle(tmp_path, vertex, capsys):
    """Bounded: never more than the served and the previous deployed model; traffic always all
    on the served version's; the rollback sticks (its version is never served again)."""
    base = tmp_path / "serving"
    rolled_back = None
    for night in range(40):
        _night(tmp_path, vertex, base, f"n{night}")
        endpoint = _endpoint(vertex)
        assert len(vertex.deployed(endpoint)) <= 2
        assert vertex.traffic(endpoint) == {_served_id(base): 100}
        if night == 20:
            rolled_back = _served_id(base)
            assert cli.main(["rollback", "--model-dir", str(base), "--reason", "bad",
                             "--api-endpoint", vertex.url]) == 0  # fmt: skip
            assert vertex.traffic(endpoint) == {_served_id(base): 100} != {rolled_back: 100}
        if rolled_back and night > 20:
            assert rolled_back not in vertex.deployed(endpoint)
    assert len(served_versions.rolled_back(str(base))) == 1
    assert len(vertex.models) == 1 and len(next(iter(vertex.models.values()))) == 40


def test_rollback_to_a_version_no_longer_deployed_deploys_it_again(tmp_path, vertex, capsys):
    base = tmp_path / "serving"
    for night in range(4):
        _night(tmp_path, vertex, base, f"r{night}")
    first = served_versions.complete_versions(str(base))[0]
    old = served_versions.version_endpoint(str(base), first)
    assert old["deployed_model_id"] not in vertex.deployed(_endpoint(vertex))
    assert cli.main(["rollback", "--model-dir", str(base), "--reason", "bad", "--to", first,
                     "--api-endpoint", vertex.url]) == 0  # fmt: skip
    [deploy] = _calls(vertex, "deployModel")[4:]
    assert deploy[3]["deployedModel"]["model"] == old["model"]
    now = served_versions.version_endpoint(str(base), first)
    assert now["deployed_model_id"] in vertex.deployed(_endpoint(vertex))
    assert vertex.traffic(_endpoint(vertex)) == {now["deployed_model_id"]: 100}
    [model] = vertex.models.values()
    assert "serving" in model[0]["versionAliases"]


def test_the_deploy_runs_while_the_push_lock_is_held(tmp_path, vertex, monkeypatch):
    """So a rollback, which takes the same lock, cannot interleave with a night's deploy."""
    base = tmp_path / "serving"
    held = []
    real = vertex_stand_in._Handler._answer

    def answer(self, state, method, path, query, body):
        if path.endswith(":deployModel"):
            with open(base / LOCK_NAME, "a") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held.append(False)
                    fcntl.flock(handle, fcntl.LOCK_UN)
                except BlockingIOError:
                    held.append(True)
        return real(self, state, method, path, query, body)

    monkeypatch.setattr(vertex_stand_in._Handler, "_answer", answer)
    _night(tmp_path, vertex, base, "locked")
    assert held == [True]


def test_a_push_retried_after_its_deploy_timed_out_deploys_once_and_is_pushed(
    tmp_path, vertex, monkeypatch
):
    """The deploy went through on Vertex but its answer never came (a timeout): the step fails
    with nothing committed; its retry finds the same registry version and deployed model,
    deploys nothing again, and pushes (not `served_changed`)."""
    base = tmp_path / "serving"
    _night(tmp_path, vertex, base, "first")
    real = vertex_stand_in._Handler._answer
    lost = []

    def answer(self, state, method, path, query, body):
        reply = real(self, state, method, path, query, body)
        if path.endswith(":deployModel") and not lost:
            lost.append(reply)
            raise vertex_stand_in._Refused(504, "deadline exceeded")
        return reply

    monkeypatch.setattr(vertex_stand_in._Handler, "_answer", answer)
    with pytest.raises(Exception, match="deadline exceeded"):
        _night(tmp_path, vertex, base, "second")
    assert len(served_versions.complete_versions(str(base))) == 1
    pushed = _night(tmp_path, vertex, base, "second")
    assert pushed.get_int_custom_property("pushed") == 1
    assert not pushed.get_string_custom_property(pusher.SERVED_CHANGED_KEY)
    assert len(_calls(vertex, "deployModel")) == 2 and len(_calls(vertex, "upload")) == 2
    assert vertex.traffic(_endpoint(vertex)) == {_served_id(base): 100}
    assert len(vertex.deployed(_endpoint(vertex))) == 2


def test_a_refused_deploy_commits_nothing_and_leaves_the_endpoint_as_it_was(tmp_path, vertex):
    base = tmp_path / "serving"
    _night(tmp_path, vertex, base, "first")
    before = vertex.traffic(_endpoint(vertex)), vertex.deployed(_endpoint(vertex))
    vertex.faults["deployModel"] = 429
    with pytest.raises(Exception, match="429"):
        _night(tmp_path, vertex, base, "second")
    assert len(served_versions.complete_versions(str(base))) == 1
    assert (vertex.traffic(_endpoint(vertex)), vertex.deployed(_endpoint(vertex))) == before


def test_an_undeploy_that_fails_after_the_commit_is_a_warning_and_the_next_night_catches_up(
    tmp_path, vertex
):
    base = tmp_path / "serving"
    for night in ("a", "b"):
        _night(tmp_path, vertex, base, night, keep=0)
    vertex.faults["undeployModel"] = 503
    pushed = _night(tmp_path, vertex, base, "c", keep=0)
    assert pushed.get_int_custom_property("pushed") == 1
    assert len(vertex.deployed(_endpoint(vertex))) == 2
    vertex.faults.clear()
    _night(tmp_path, vertex, base, "d", keep=0)
    assert vertex.deployed(_endpoint(vertex)) == [_served_id(base)]


def test_compile_endpoint_keep_is_compiled_in_and_refused_without_endpoint(tmp_path, capsys):
    import yaml

    from pipeline.common.compiled_target import pipeline_tasks

    args = ["compile", "--target", "vertex", "--project", "proj-x", "--region", "us-central1"]
    args += ["--pipeline-root", "gs://b/root", "--image", "img:1", "--tpu-image", "img:1"]
    args += ["--data", "gs://b/data", "--output", str(tmp_path / "p.yaml")]
    assert cli.main([*args, "--endpoint", "e", "--endpoint-keep", "3"]) == 0
    task = pipeline_tasks(yaml.safe_load((tmp_path / "p.yaml").read_text()))["AtomicPusher"]
    serving = task["inputs"]["parameters"]["vertex_serving"]["runtimeValue"]["constant"]
    assert json.loads(serving)["keep"] == 3
    capsys.readouterr()
    assert cli.main([*args, "--endpoint-keep", "3"]) == 2
    assert "--endpoint-keep" in capsys.readouterr().err
    assert cli.main([*args, "--endpoint", "e", "--endpoint-keep", "-1"]) == 2
    assert "--endpoint-keep" in capsys.readouterr().err
