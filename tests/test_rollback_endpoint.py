"""`cifar10-pipeline rollback` of versions deployed to a Vertex AI endpoint (`compile
--endpoint`, endpoint.json beside the model): the endpoint's traffic goes back to the deployed
model of the version served after, before any folder moves, through the real aiplatform client
over HTTP to a local stand-in for the Vertex endpoint API; a refused call changes nothing."""

import json

import pytest

from components.storage import served_versions
from pipeline import cli

import vertex_stand_in
from cifar_fixtures import served_version as _serve

ENDPOINT = "projects/proj-x/locations/us-central1/endpoints/777"
MODELS = {"100": "1100", "200": "1200", "300": "1300"}  # version -> deployed model id


@pytest.fixture
def vertex(monkeypatch):
    """The stand-in (tests/vertex_stand_in.py) with ENDPOINT holding the three versions'
    deployed models, all traffic on version 300's."""
    from google.auth.credentials import AnonymousCredentials

    state = vertex_stand_in.VertexState()
    state.endpoints[ENDPOINT] = {
        "name": ENDPOINT,
        "displayName": "cifar10-endpoint",
        "createTime": "2024-01-01T00:00:00Z",
        "deployedModels": [
            {"id": i, "model": f"projects/proj-x/locations/us-central1/models/{v}"}
            for v, i in MODELS.items()
        ],
        "trafficSplit": {MODELS["300"]: 100},
    }
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), "proj-x"))
    with vertex_stand_in.serve(state) as url:
        state.url = url
        yield state


def _deployed(base, version):
    folder = _serve(base, version)
    ids = {
        "endpoint": ENDPOINT,
        "model": f"projects/proj-x/locations/us-central1/models/{version}",
        "deployed_model_id": MODELS[version],
    }
    (folder / "endpoint.json").write_text(json.dumps(ids))


@pytest.fixture
def serving(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    for version in MODELS:
        _deployed(base, version)
    return base


def _listing(base):
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.name != ".push.lock")


def _rollback(base, url, *flags):
    return cli.main(["rollback", "--model-dir", str(base), "--reason", "bad", *flags,
                     "--api-endpoint", url])  # fmt: skip


def test_the_endpoint_traffic_goes_back_to_the_served_version_before_the_folder_moves(
    serving, vertex, capsys
):
    assert _rollback(serving, vertex.url) == 0
    (get, *_), (method, path, query, body) = vertex.requests  # read, then one change
    assert get == "GET" and method == "PATCH" and path == ENDPOINT
    assert query["updateMask"] == ["trafficSplit"]
    assert body["trafficSplit"] == {MODELS["200"]: 100}  # the others: none
    assert len(body["deployedModels"]) == 3  # none undeployed
    assert served_versions.complete_versions(str(serving)) == ["100", "200"]
    record = served_versions.rolled_back(str(serving))["300"]
    assert record["endpoint"] == {
        "name": ENDPOINT,
        "served_deployed_model_id": MODELS["200"],
        "rolled_back_deployed_model_ids": [MODELS["300"]],
        "traffic_split_before": {MODELS["300"]: 100},
    }
    out = capsys.readouterr().out
    assert f"endpoint      {ENDPOINT}: all traffic to deployed model {MODELS['200']}" in out


def test_rollback_to_an_older_version_names_every_rolled_back_deployed_model(serving, vertex):
    assert _rollback(serving, vertex.url, "--to", "100") == 0
    assert vertex.requests[-1][3]["trafficSplit"] == {MODELS["100"]: 100}
    record = served_versions.rolled_back(str(serving))["200"]["endpoint"]
    assert record["rolled_back_deployed_model_ids"] == [MODELS["300"], MODELS["200"]]


@pytest.mark.parametrize("status, words", [(500, "500 injected 500"), (403, "403 injected 403")])
def test_a_refused_traffic_change_is_one_line_and_changes_nothing(
    serving, vertex, capsys, status, words
):
    vertex.faults["PATCH"] = status
    before = _listing(serving)
    assert _rollback(serving, vertex.url) == 1
    err = capsys.readouterr().err
    assert err == f"error: {ENDPOINT}: Vertex AI refused the traffic change: {words}\n"
    assert [r[0] for r in vertex.requests] == ["GET", "PATCH"]  # the change was asked
    assert _listing(serving) == before  # nothing set aside, no record
    assert vertex.traffic(ENDPOINT) == {MODELS["300"]: 100}


def test_a_served_model_no_longer_deployed_whose_redeploy_is_refused_changes_nothing(
    serving, vertex, capsys
):
    """The lifecycle undeployed version 200's model; the rollback deploys it again
    (tests/test_endpoint_lifecycle.py), here refused: one line, nothing moved."""
    vertex.endpoints[ENDPOINT]["deployedModels"].pop(1)  # version 200's
    vertex.faults["deployModel"] = 403
    before = _listing(serving), vertex.traffic(ENDPOINT)
    assert _rollback(serving, vertex.url) == 1
    err = capsys.readouterr().err
    assert f"{ENDPOINT}: Vertex AI refused the traffic change: 403 injected 403" in err
    assert len(err.strip().splitlines()) == 1
    assert (_listing(serving), vertex.traffic(ENDPOINT)) == before
    [get, post] = vertex.requests
    assert get[0] == "GET" and post[:2] == ("POST", f"{ENDPOINT}:deployModel")
    assert post[3]["deployedModel"]["model"].endswith("/models/200")


def test_versions_without_an_endpoint_make_no_vertex_call(tmp_path, vertex, monkeypatch):
    def no_credentials(*args, **kwargs):
        raise AssertionError("a Vertex call for versions that were never deployed")

    monkeypatch.setattr("google.auth.default", no_credentials)
    base = tmp_path / "serving"
    for version in ("100", "200"):
        _serve(base, version)
    assert _rollback(base, vertex.url) == 0
    assert served_versions.complete_versions(str(base)) == ["100"]
    assert vertex.requests == []
    assert "endpoint" not in served_versions.rolled_back(str(base))["200"]


def test_rolling_back_to_a_version_never_deployed_is_refused(tmp_path, vertex, capsys):
    base = tmp_path / "serving"
    _serve(base, "100")  # pushed before the pipeline deployed to an endpoint
    _deployed(base, "200")
    before = _listing(base)
    assert _rollback(base, vertex.url) == 2
    err = capsys.readouterr().err
    assert f"version 200 was deployed to endpoint {ENDPOINT}, but version 100 records no " in err
    assert "the endpoint would serve nothing the folder names" in err
    assert len(err.strip().splitlines()) == 1 and _listing(base) == before
    assert vertex.requests == []


def test_versions_on_two_endpoints_are_refused(serving, vertex, capsys):
    other = ENDPOINT.replace("/777", "/888")
    ids = json.loads((serving / "300" / "endpoint.json").read_text())
    (serving / "300" / "endpoint.json").write_text(json.dumps({**ids, "endpoint": other}))
    before = _listing(serving)
    assert _rollback(serving, vertex.url) == 2
    err = capsys.readouterr().err
    assert f"version 300 was deployed to endpoint {other}, version 200 to {ENDPOINT}" in err
    assert len(err.strip().splitlines()) == 1 and _listing(serving) == before
    assert vertex.requests == []
