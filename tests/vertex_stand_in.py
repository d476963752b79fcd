"""A local stand-in for the parts of Vertex AI's REST API (v1) that the endpoint Pusher and
rollback call, kept as state: endpoints (deployed models, traffic split), registry Models with
versions and aliases. The real client (google-cloud-aiplatform's GAPIC REST transport) talks
to it over HTTP. Long-running operations are answered done, with their response.

Rules kept as Vertex documents them: a traffic split names only deployed models and sums to
100; a deployed model with traffic cannot be undeployed unless the request gives the split
that remains; an alias is on one version of a Model at a time (merging it onto a version
takes it off the other); a Model's first version is `1`, each later upload with parentModel
adds the next.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from urllib.parse import parse_qs, unquote, urlsplit

import http_stand_in

API = "type.googleapis.com/google.cloud.aiplatform.v1."


class VertexState:
    def __init__(self, project: str = "proj-x", region: str = "us-central1"):
        self.parent = f"projects/{project}/locations/{region}"
        self.endpoints: dict[str, dict] = {}
        self.models: dict[str, list[dict]] = {}  # model name -> its versions
        self.display_names: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict, dict | None]] = []
        self.faults: dict[str, int] = {}  # a verb ("deployModel", "PATCH", ...) -> its status
        self.lock = threading.Lock()
        self._ids = iter(range(1000, 10**9))

    def deployed(self, endpoint: str) -> list[str]:
        return [m["id"] for m in self.endpoints[endpoint]["deployedModels"]]

    def traffic(self, endpoint: str) -> dict[str, int]:
        return dict(self.endpoints[endpoint]["trafficSplit"])


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _done(kind: str, response: dict) -> dict:
    return {"name": "operations/0", "done": True, "response": {"@type": API + kind, **response}}


def _split(state: VertexState, endpoint: dict, split: dict, new_id: str = "") -> dict:
    split = {(new_id if k == "0" else k): int(v) for k, v in split.items() if int(v)}
    known = {m["id"] for m in endpoint["deployedModels"]} | {new_id}
    if not set(split) <= known or sum(split.values()) != 100:
        raise _Refused(400, f"traffic split {split} must name deployed models and sum to 100")
    return split


class _Handler(http_stand_in.JsonHandler):
    state: VertexState

    def _serve(self, method: str):
        state = type(self).state
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urlsplit(self.path)
        # Newer google-api-core percent-encodes a path's "@" (models/1001%401); Vertex decodes it.
        path, query = unquote(url.path).removeprefix("/v1/"), parse_qs(url.query)
        verb = path.rsplit(":", 1)[1] if ":" in path else method
        with state.lock:
            state.requests.append((method, path, query, body))
            try:
                if state.faults.get(verb):
                    raise _Refused(state.faults[verb], f"injected {state.faults[verb]}")
                self.reply(self._answer(state, method, path, query, body or {}))
            except _Refused as refused:
                error = {"code": refused.status, "message": refused.message}
                self.reply({"error": error}, refused.status)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PATCH(self):
        self._serve("PATCH")

    def log_message(self, *args):
        pass

    @staticmethod
    def _named(query: dict) -> str:
        found = re.search(r'display_name="([^"]*)"', (query.get("filter") or [""])[0])
        return found.group(1) if found else ""

    def _answer(self, state, method, path, query, body) -> dict:
        parent, endpoints, models = state.parent, state.endpoints, state.models
        if path == f"{parent}/endpoints" and method == "GET":
            named = self._named(query)
            return {"endpoints": [e for e in endpoints.values() if e["displayName"] == named]}
        if path == f"{parent}/endpoints" and method == "POST":
            name = f"{parent}/endpoints/{next(state._ids)}"
            endpoints[name] = {
                "name": name,
                "displayName": body["displayName"],
                "deployedModels": [],
                "trafficSplit": {},
            }
            return _done("Endpoint", endpoints[name])
        if path in endpoints and method == "GET":
            return endpoints[path]
        if path in endpoints and method == "PATCH":
            endpoint = endpoints[path]
            endpoint["trafficSplit"] = _split(state, endpoint, body["trafficSplit"])
            return endpoint
        if path.endswith(":deployModel") and path.split(":")[0] in endpoints:
            endpoint = endpoints[path.split(":")[0]]
            wanted = body["deployedModel"]
            model, _, version = wanted["model"].partition("@")
            if not any(v["versionId"] == version for v in models.get(model, [])):
                raise _Refused(404, f"model {wanted['model']} not found")
            new_id = str(next(state._ids))
            split = _split(state, endpoint, body.get("trafficSplit") or {"0": 100}, new_id)
            deployed = {**wanted, "id": new_id, "model": model, "modelVersionId": version}
            endpoint["deployedModels"].append(deployed)
            endpoint["trafficSplit"] = split
            return _done("DeployModelResponse", {"deployedModel": deployed})
        if path.endswith(":undeployModel") and path.split(":")[0] in endpoints:
            endpoint = endpoints[path.split(":")[0]]
            gone = body["deployedModelId"]
            if gone not in state.deployed(endpoint["name"]):
                raise _Refused(404, f"deployed model {gone} not found")
            split = body.get("trafficSplit")
            if split is None and endpoint["trafficSplit"].get(gone):
                raise _Refused(400, f"deployed model {gone} has traffic; move it first")
            endpoint["deployedModels"] = [m for m in endpoint["deployedModels"] if m["id"] != gone]
            endpoint["trafficSplit"] = {
                k: v for k, v in (split or endpoint["trafficSplit"]).items() if k != gone
            }
            return _done("UndeployModelResponse", {})
        if path == f"{parent}/models" and method == "GET":
            named = self._named(query)
            found = [vs[-1] for n, vs in models.items() if state.display_names[n] == named]
            return {"models": found}
        if path == f"{parent}/models:upload":
            model = body.get("parentModel") or f"{parent}/models/{next(state._ids)}"
            if body.get("parentModel") and model not in models:
                raise _Refused(404, f"parent model {model} not found")
            versions = models.setdefault(model, [])
            state.display_names.setdefault(model, body["model"]["displayName"])
            version = {
                **body["model"],
                "name": model,
                "versionId": str(len(versions) + 1),
                "versionAliases": [] if versions else ["default"],
            }
            versions.append(version)
            return _done(
                "UploadModelResponse", {"model": model, "modelVersionId": version["versionId"]}
            )
        if path.endswith(":listVersions") and path.split(":")[0] in models:
            return {"models": models[path.split(":")[0]]}
        if path.endswith(":mergeVersionAliases"):
            model, _, version = path.split(":")[0].partition("@")
            versions = models.get(model, [])
            [target] = [v for v in versions if v["versionId"] == version] or [None]
            if target is None:
                raise _Refused(404, f"model version {model}@{version} not found")
            for alias in body["versionAliases"]:
                for other in versions:
                    other["versionAliases"] = [a for a in other["versionAliases"] if a != alias]
                target["versionAliases"].append(alias)
            return target
        raise _Refused(404, f"{method} {path} not found")


@contextlib.contextmanager
def serve(state: VertexState):
    """Serves `state` on 127.0.0.1; yields the base URL to pass as the API endpoint."""
    handler = type("VertexHandler", (_Handler,), {"state": state})
    with http_stand_in.serve(handler) as url:
        yield url
