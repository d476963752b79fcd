"""The AtomicPusher that also deploys to a Vertex AI endpoint (`compile --endpoint`).

Every deployment is recorded as a version of the serving folder
(`<pipeline-root>/serving/<model>/<version>/`: the SavedModel, its training statistics and
spans, and `endpoint.json` with the endpoint, the registry version and the deployed-model
id), so the rules that read the served state (no new span, warm start, drift, the regression
baseline) hold on Vertex exactly as they do locally.

A lifecycle, so the endpoint does not grow by a deployed model (and its replicas) a night:
each version is a new version of one registry Model (named like the endpoint; alias
`serving` on the one served), uploaded from the Trainer's artifact (immutable, as TFX's own
Vertex Pusher deploys) and deployed with all traffic, while the push lock is held and after
the staged copy's load test, just before the version's commit point (`before_commit`): a
refused deploy commits nothing, and a rollback cannot interleave. Once committed
(`after_commit`), every deployed model of that registry Model but the served one and those
of the `--endpoint-keep` complete versions before it (default 1, for an instant rollback) is
undeployed. A retried push finds its registry version and deployed model and makes neither
twice. A deploy whose commit then fails (the lease lost on an object store) leaves the
endpoint serving a model no version names, until the next push.

Imported only when compiling with an endpoint; the calls themselves are endpoint_api's.
"""

from __future__ import annotations

import json

from absl import logging
from tfx.dsl.components.base import executor_spec
from tfx.types.component_spec import ExecutionParameter

from components.atomic_pusher.component import AtomicPusher, AtomicPusherSpec
from components.atomic_pusher.endpoint_api import deploy, undeploy_all_but
from components.atomic_pusher.executor import BASE_DIRECTORY_KEY, Executor
from components.contract import DEFAULT_ENDPOINT_KEEP, ENDPOINT_FILE
from components.storage import paths, served_versions

VERTEX_SERVING_KEY = "vertex_serving"  # JSON: project, region, endpoint, image, machine_type


class EndpointExecutor(Executor):
    def before_commit(self, input_dict, exec_properties, staging: str, version: str) -> None:
        """Deploys while the push lock is held (a rollback, which takes it too, cannot
        interleave) and after the staged copy's load test; a deploy that fails commits
        nothing, and the endpoint's traffic is as it was."""
        settings = json.loads(exec_properties[VERTEX_SERVING_KEY])
        ids = deploy(self.GetModelPath(input_dict), settings)
        logging.info(
            "Deployed to %s as %s (%s)", ids["endpoint"], ids["deployed_model_id"], ids["model"]
        )
        paths.write_bytes(paths.join(staging, ENDPOINT_FILE), json.dumps(ids, indent=1).encode())

    def after_commit(self, exec_properties, version: str) -> None:
        """Undeploys the endpoint's deployed models of this registry Model but the version's
        and those of the `keep` complete versions before it. The version is visible by now:
        a failure here is a warning, and the next push undeploys what this one left."""
        settings = json.loads(exec_properties[VERTEX_SERVING_KEY])
        keep = int(settings.get("keep", DEFAULT_ENDPOINT_KEEP))
        base = exec_properties[BASE_DIRECTORY_KEY]
        earlier = [v for v in served_versions.complete_versions(base) if int(v) < int(version)]
        kept = [served_versions.version_endpoint(base, v) for v in earlier[len(earlier) - keep :]]
        keep_ids = {ids["deployed_model_id"] for ids in kept if ids}
        try:
            ids = served_versions.version_endpoint(base, version)
            gone = undeploy_all_but(ids, keep_ids, settings.get("api_endpoint", ""))
        except Exception as err:  # any API or store error: the same warning
            logging.warning("deployed models not undeployed (the next push tries again): %s", err)
            return
        if gone:
            logging.info("Undeployed %s from %s (--endpoint-keep %d)", gone, ids["endpoint"], keep)


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
