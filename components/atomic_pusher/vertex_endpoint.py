"""The AtomicPusher that also deploys to a Vertex AI endpoint (`compile --endpoint`).

Every deployment is recorded as a version of the serving folder
(`<pipeline-root>/serving/<model>/<version>/`: the SavedModel, its training statistics and
spans, and `endpoint.json` with the endpoint, model and deployed-model ids), so the rules
that read the served state (no new span, warm start, drift, the regression baseline) hold
on Vertex exactly as they do locally. Order: the served version is checked, the model is
deployed from the Trainer's artifact (immutable, as TFX's own Vertex Pusher deploys), then
the version is committed by the same protocol as a local push. A deploy that fails records
nothing; a version that fails to commit after its deploy leaves the endpoint serving a model
no version names: the next night trains and deploys again.

Imported only when compiling with an endpoint, and by a rollback of a version deployed to one
(`serve_only`): google-cloud-aiplatform takes seconds to import.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

from absl import logging
from tfx.dsl.components.base import executor_spec
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import io_utils

from components import served_versions
from components.atomic_pusher.component import AtomicPusher, AtomicPusherSpec
from components.atomic_pusher.executor import ANY, Executor, ServedVersionChanged
from components.atomic_pusher.load_test import load_test
from components.atomic_pusher.rollback import EndpointNotMoved
from components.contract import ENDPOINT_FILE

VERTEX_SERVING_KEY = "vertex_serving"  # JSON: project, region, endpoint, image, machine_type
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
TRAFFIC_REQUEST_TIMEOUT_SECONDS = 60.0


def deploy(model_path: str, settings: dict) -> dict:
    """Uploads the SavedModel at `model_path` as a Vertex AI Model and deploys it to the
    endpoint named `settings["endpoint"]` (created when missing) with all traffic; returns
    the ids recorded beside the version."""
    from google.cloud import aiplatform

    aiplatform.init(project=settings["project"], location=settings["region"])
    found = aiplatform.Endpoint.list(filter=f'display_name="{settings["endpoint"]}"')
    endpoint = found[0] if found else aiplatform.Endpoint.create(settings["endpoint"])
    model = aiplatform.Model.upload(
        display_name=settings["endpoint"],
        artifact_uri=model_path,
        serving_container_image_uri=settings["image"],
    )
    endpoint.deploy(model=model, machine_type=settings["machine_type"], traffic_percentage=100)
    deployed = [m.id for m in endpoint.list_models() if m.model == model.resource_name]
    return {
        "endpoint": endpoint.resource_name,
        "model": model.resource_name,
        "deployed_model_id": deployed[-1] if deployed else "",
    }


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


def serve_only(endpoint_name: str, deployed_model_id: str, api_endpoint: str = "") -> dict:
    """Sends all of the endpoint's traffic to `deployed_model_id` (every other deployed model
    gets none) in one UpdateEndpoint call, the models staying deployed; returns the traffic
    split it replaced. Raises EndpointNotMoved, with one line, when the call fails or the
    model is no longer deployed there: the traffic is then as it was."""
    import google.auth
    from google.cloud import aiplatform

    named = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/endpoints/[^/]+", endpoint_name)
    if not named:
        raise EndpointNotMoved(f"{endpoint_name}: not an endpoint resource name")
    project, location = named.groups()
    with _one_line_errors(endpoint_name):
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        aiplatform.init(
            project=project,
            location=location,
            credentials=credentials,
            api_endpoint=api_endpoint or f"{location}-aiplatform.googleapis.com",
            api_transport="rest",
        )
        endpoint = aiplatform.Endpoint(endpoint_name)
        resource = endpoint.gca_resource  # one GET of the endpoint
        before = dict(resource.traffic_split)
        if deployed_model_id not in {m.id for m in resource.deployed_models}:
            raise EndpointNotMoved(
                f"{endpoint_name}: deployed model {deployed_model_id} is no longer deployed "
                "there; deploy it again or roll back to another version"
            )
        endpoint.update(
            traffic_split={deployed_model_id: 100},
            update_request_timeout=TRAFFIC_REQUEST_TIMEOUT_SECONDS,
        )
    return before


class EndpointExecutor(Executor):
    def deployed(self, input_dict, exec_properties, folder: str, expected) -> list:
        base = exec_properties["base_directory"]
        newest = served_versions.newest_complete_version(base)
        if expected is not ANY and newest != expected:  # before paying for a deploy
            raise ServedVersionChanged(expected, newest)
        # The endpoint gets all traffic at deploy time: the load test comes first (and again
        # on the staged copy before the serving folder's commit).
        said = load_test(self.GetModelPath(input_dict))  # LoadTestFailed: nothing deployed
        logging.info("Load test before deploying: %s", said)
        settings = json.loads(exec_properties[VERTEX_SERVING_KEY])
        ids = deploy(self.GetModelPath(input_dict), settings)
        logging.info("Deployed to %s as %s", ids["endpoint"], ids["deployed_model_id"])
        path = os.path.join(folder, ENDPOINT_FILE)
        io_utils.write_string_file(path, json.dumps(ids, indent=1))
        return [(path, ENDPOINT_FILE)]


class VertexEndpointPusherSpec(AtomicPusherSpec):
    PARAMETERS = {
        **AtomicPusherSpec.PARAMETERS,
        VERTEX_SERVING_KEY: ExecutionParameter(type=str),
    }


class VertexEndpointPusher(AtomicPusher):
    """AtomicPusher into `base_directory` after deploying to a Vertex AI endpoint."""

    SPEC_CLASS = VertexEndpointPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(EndpointExecutor)

    def __init__(self, vertex_serving: dict, **pusher_args):
        serving = json.dumps(vertex_serving, sort_keys=True)
        super().__init__(**pusher_args, **{VERTEX_SERVING_KEY: serving})
