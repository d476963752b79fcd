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

Imported only when compiling with an endpoint: google-cloud-aiplatform takes seconds to import.
"""

from __future__ import annotations

import json
import os

from absl import logging
from tfx.dsl.components.base import executor_spec
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import io_utils

from components import served_versions
from components.atomic_pusher.component import AtomicPusher, AtomicPusherSpec
from components.atomic_pusher.executor import ANY, Executor, ServedVersionChanged
from components.contract import ENDPOINT_FILE

VERTEX_SERVING_KEY = "vertex_serving"  # JSON: project, region, endpoint, image, machine_type


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


class EndpointExecutor(Executor):
    def deployed(self, input_dict, exec_properties, folder: str, expected) -> list:
        base = exec_properties["base_directory"]
        newest = served_versions.newest_complete_version(base)
        if expected is not ANY and newest != expected:  # before paying for a deploy
            raise ServedVersionChanged(expected, newest)
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
