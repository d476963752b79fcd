"""Vertex AI endpoint calls, shared by the endpoint Pusher (vertex_endpoint.py: `deploy`,
`undeploy_all_but`) and a rollback (rollback.py: `serve_version`): the Vertex AI v1 REST
clients, one registry Model per endpoint with alias `serving` on the version served, and the
client libraries' errors as one line (EndpointNotMoved).

Imports nothing of TFX; google-cloud-aiplatform (seconds to import) only inside the calls.
"""

from __future__ import annotations

import contextlib
import re


class EndpointNotMoved(RuntimeError):
    """The endpoint's traffic could not be moved (the Vertex AI call failed or was refused);
    nothing was rolled back. The message is one line naming the endpoint."""


CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TRAFFIC_REQUEST_TIMEOUT_SECONDS = 60.0
# Deploying starts replicas (minutes); the push lease is renewed meanwhile (lease.py).
OPERATION_TIMEOUT_SECONDS = 3600.0
SERVING_ALIAS = "serving"  # on the registry version the endpoint serves
DEFAULT_MACHINE_TYPE = "n1-standard-4"


def _clients(project: str, region: str, api_endpoint: str = ""):
    """The Vertex AI v1 model and endpoint clients (REST), with the default credentials."""
    import google.auth
    from google.cloud import aiplatform_v1

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    options = {"api_endpoint": api_endpoint or f"{region}-aiplatform.googleapis.com"}
    return tuple(
        client(transport="rest", credentials=credentials, client_options=options)
        for client in (aiplatform_v1.ModelServiceClient, aiplatform_v1.EndpointServiceClient)
    )


def _named(display_name: str) -> str:
    return f'display_name="{display_name}"'


def _registered(models, parent: str, display_name: str, model_path: str, image: str):
    """(Model, version id) holding `model_path`: the registry version a retried push uploaded
    already, else a new version of the Model named `display_name` (a new Model the first
    time)."""
    from google.cloud import aiplatform_v1

    found = list(models.list_models(request={"parent": parent, "filter": _named(display_name)}))
    if found:
        for version in models.list_model_versions(request={"name": found[0].name}):
            if version.artifact_uri == model_path:
                return found[0].name, version.version_id
    upload = aiplatform_v1.UploadModelRequest(
        parent=parent,
        parent_model=found[0].name if found else "",
        model=aiplatform_v1.Model(
            display_name=display_name,
            artifact_uri=model_path,
            container_spec=aiplatform_v1.ModelContainerSpec(image_uri=image),
        ),
    )
    answer = models.upload_model(request=upload).result(timeout=OPERATION_TIMEOUT_SECONDS)
    return answer.model, answer.model_version_id


def _of_version(deployed, model: str, version: str) -> bool:
    return deployed.model == f"{model}@{version}" or (
        deployed.model == model and deployed.model_version_id == version
    )


def _deploy_version(endpoints, endpoint: str, versioned: str, machine_type: str) -> str:
    """Deploys the registry version `versioned` (MODEL@VERSION) with all the traffic; its
    deployed model's id."""
    from google.cloud import aiplatform_v1

    deployed = aiplatform_v1.DeployedModel(
        model=versioned,
        dedicated_resources=aiplatform_v1.DedicatedResources(
            machine_spec=aiplatform_v1.MachineSpec(machine_type=machine_type),
            min_replica_count=1,
            max_replica_count=1,
        ),
    )
    operation = endpoints.deploy_model(
        endpoint=endpoint, deployed_model=deployed, traffic_split={"0": 100}
    )
    return operation.result(timeout=OPERATION_TIMEOUT_SECONDS).deployed_model.id


def _all_traffic_to(endpoints, resource, deployed_model_id: str) -> None:
    """One UpdateEndpoint call: all traffic to `deployed_model_id`, the others none."""
    if dict(resource.traffic_split) == {deployed_model_id: 100}:
        return
    resource.traffic_split = {deployed_model_id: 100}
    endpoints.update_endpoint(
        endpoint=resource,
        update_mask={"paths": ["traffic_split"]},
        timeout=TRAFFIC_REQUEST_TIMEOUT_SECONDS,
    )


def deploy(model_path: str, settings: dict) -> dict:
    """Makes the SavedModel at `model_path` a new version of the registry Model named
    `settings["endpoint"]` and deploys it to that endpoint (created when missing) with all
    traffic, the `serving` alias moved onto it. Called again for the same model (a retried
    push), it uploads and deploys nothing twice. Returns the ids recorded beside the version."""
    project, region = settings["project"], settings["region"]
    models, endpoints = _clients(project, region, settings.get("api_endpoint", ""))
    parent = f"projects/{project}/locations/{region}"
    name = settings["endpoint"]
    found = list(endpoints.list_endpoints(request={"parent": parent, "filter": _named(name)}))
    if found:
        endpoint = found[0]
    else:
        from google.cloud import aiplatform_v1

        created = endpoints.create_endpoint(
            parent=parent, endpoint=aiplatform_v1.Endpoint(display_name=name)
        )
        endpoint = created.result(timeout=OPERATION_TIMEOUT_SECONDS)
    model, version = _registered(models, parent, name, model_path, settings["image"])
    versioned = f"{model}@{version}"
    mine = [d.id for d in endpoint.deployed_models if _of_version(d, model, version)]
    if mine:  # deployed by a try whose answer was lost: all traffic to it, nothing redeployed
        deployed_id = mine[-1]
        _all_traffic_to(endpoints, endpoint, deployed_id)
    else:
        deployed_id = _deploy_version(endpoints, endpoint.name, versioned, settings["machine_type"])
    models.merge_version_aliases(name=versioned, version_aliases=[SERVING_ALIAS])
    return {
        "endpoint": endpoint.name,
        "model": versioned,
        "deployed_model_id": deployed_id,
        "machine_type": settings["machine_type"],
    }


def undeploy_all_but(ids: dict, keep_ids: set[str], api_endpoint: str = "") -> list[str]:
    """Undeploys every deployed model of the registry Model in `ids` (a version's
    ENDPOINT_FILE) from its endpoint except `ids`' own and `keep_ids`; the ids undeployed.
    Models of other registry Models on the same endpoint are left alone."""
    project, location = _project_and_location(ids["endpoint"])
    _, endpoints = _clients(project, location, api_endpoint)
    model = ids["model"].split("@")[0]
    resource = endpoints.get_endpoint(name=ids["endpoint"])
    gone = []
    for deployed in resource.deployed_models:
        if deployed.model.split("@")[0] != model:
            continue
        if deployed.id == ids["deployed_model_id"] or deployed.id in keep_ids:
            continue
        endpoints.undeploy_model(endpoint=ids["endpoint"], deployed_model_id=deployed.id).result(
            timeout=OPERATION_TIMEOUT_SECONDS
        )
        gone.append(deployed.id)
    return gone


def _project_and_location(endpoint_name: str) -> tuple[str, str]:
    named = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/endpoints/[^/]+", endpoint_name)
    if not named:
        raise EndpointNotMoved(f"{endpoint_name}: not an endpoint resource name")
    return named.group(1), named.group(2)


@contextlib.contextmanager
def _one_line_errors(endpoint_name: str):
    """The client libraries' errors as EndpointNotMoved: one line naming the endpoint."""
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except auth_exceptions.DefaultCredentialsError as err:
        raise EndpointNotMoved(
            f"{endpoint_name}: no Google Cloud credentials found (run `gcloud auth "
            "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS)"
        ) from err
    except api_exceptions.GoogleAPICallError as err:
        said = re.sub(r"^[A-Z]+ https?://\S+: ", "", err.message)  # REST names its URL first
        raise EndpointNotMoved(
            f"{endpoint_name}: Vertex AI refused the traffic change: {err.code} {said}"
        ) from err
    except (api_exceptions.RetryError, OSError, auth_exceptions.TransportError) as err:
        raise EndpointNotMoved(
            f"{endpoint_name}: could not reach the Vertex AI API: {str(err).splitlines()[0]}"
        ) from err


def serve_version(ids: dict, api_endpoint: str = "") -> tuple[dict, str]:
    """Sends all of the endpoint's traffic to the deployed model of the version whose
    ENDPOINT_FILE is `ids` (every other deployed model gets none, and stays deployed), in one
    UpdateEndpoint call; a version whose deployed model was undeployed since (the lifecycle
    keeps only --endpoint-keep of them) is deployed again from its registry version first.
    Returns (the traffic split it replaced, the deployed model id serving now). Raises
    EndpointNotMoved, with one line, when a call fails: the traffic is then as it was."""
    endpoint_name = ids["endpoint"]
    project, location = _project_and_location(endpoint_name)
    with _one_line_errors(endpoint_name):
        models, endpoints = _clients(project, location, api_endpoint)
        resource = endpoints.get_endpoint(name=endpoint_name)
        before = dict(resource.traffic_split)
        deployed_id = ids["deployed_model_id"]
        if deployed_id in {m.id for m in resource.deployed_models}:
            _all_traffic_to(endpoints, resource, deployed_id)
        else:
            machine_type = ids.get("machine_type") or DEFAULT_MACHINE_TYPE
            deployed_id = _deploy_version(endpoints, endpoint_name, ids["model"], machine_type)
        if "@" in ids["model"]:
            models.merge_version_aliases(name=ids["model"], version_aliases=[SERVING_ALIAS])
    return before, deployed_id
