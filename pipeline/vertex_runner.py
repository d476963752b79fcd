"""Vertex AI Pipelines: compile the same topology with KubeflowV2DagRunner, then
submit the compiled file as a PipelineJob (separate steps, as in mlops-with-vertex-ai)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig, TrainingConfig, VertexConfig

# Where the Dockerfile puts this project inside the pipeline image.
CONTAINER_PROJECT_ROOT = "/pipeline"
CONTAINER_SCHEMA_PATH = f"{CONTAINER_PROJECT_ROOT}/data/schema/schema.pbtxt"
DEFAULT_API_ENDPOINT = "{region}-aiplatform.googleapis.com"


class SubmitError(RuntimeError):
    """Submission failed; the message is one line that says why."""


def vertex_config(*, project: str, region: str, pipeline_root: str, image: str, source_uri: str,
                  training: TrainingConfig, tpu_type: str = "TPU_V2", tpu_count: int = 8,
                  dataflow_region: str = "", dataflow_temp_location: str = "",
                  endpoint: str = "", source_fingerprint: str = "",
                  pipeline_name: str = "cifar10", **overrides) -> PipelineConfig:
    if not pipeline_root.startswith("gs://"):
        raise ValueError(f"--pipeline-root must be a gs:// URI, got '{pipeline_root}'")
    if not source_uri.startswith("gs://"):
        raise ValueError(f"--data must be a gs:// URI on Vertex (copy the archive to GCS "
                         f"first), got '{source_uri}'")
    beam_args: tuple[str, ...] = ()
    if dataflow_region:
        if not dataflow_temp_location.startswith("gs://"):
            raise ValueError("--dataflow-temp-location gs://... is required with --dataflow-region")
        beam_args = ("--runner=DataflowRunner", f"--project={project}",
                     f"--region={dataflow_region}", f"--temp_location={dataflow_temp_location}",
                     f"--sdk_container_image={image}")
    root = pipeline_root.rstrip("/")
    tpu_training = TrainingConfig(**{**training.to_custom_config(), "strategy": "tpu",
                                     "tpu": training.tpu or "local"})
    return PipelineConfig(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        serving_dir=f"{root}/serving",
        source_uri=source_uri,
        # Without a fingerprint, Vertex caching keys on the URI: new data needs a new path.
        source_fingerprint=source_fingerprint or f"uri:{source_uri}",
        schema_path=CONTAINER_SCHEMA_PATH,
        training=tpu_training,
        beam_args=beam_args,
        vertex=VertexConfig(project=project, region=region, image=image, tpu_type=tpu_type,
                            tpu_count=tpu_count, dataflow_region=dataflow_region,
                            dataflow_temp_location=dataflow_temp_location, endpoint=endpoint),
        **overrides,
    )


def compile_pipeline(config: PipelineConfig, output: Path) -> Path:
    """Writes the Vertex pipeline to `output`: KFP v2 YAML, or for a .json name the
    PipelineJob JSON that TFX marks deprecated."""
    from tfx import v1 as tfx

    from pipeline import kubeflow_runner
    from pipeline.topology import create_pipeline

    if config.vertex is None:
        raise ValueError("compile_pipeline needs a Vertex configuration")
    if output.suffix != ".json":
        spec = kubeflow_runner.build_pipeline_spec(config, config.vertex.image)
        return kubeflow_runner.write_pipeline_yaml(spec, output)
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=config.vertex.image),
        output_dir=str(output.parent), output_filename=output.name)
    runner.run(create_pipeline(config), write_out=True)
    return output


def _read_pipeline_job(path: Path) -> dict[str, Any]:
    """The PipelineJob body: the JSON file as written, or a YAML PipelineSpec wrapped with
    its default pipeline root as the output directory."""
    import yaml

    if path.suffix not in (".yaml", ".yml"):
        return json.loads(path.read_text())
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(str(err).splitlines()[0]) from err
    if not isinstance(spec, dict):
        raise ValueError("not a YAML mapping")
    return {"pipelineSpec": spec,
            "runtimeConfig": {"gcsOutputDirectory": spec.get("defaultPipelineRoot", "")}}


@dataclass(frozen=True)
class Submission:
    display_name: str
    parent: str
    pipeline_root: str
    job: dict[str, Any]

    def describe(self) -> str:
        tasks = sorted(self.job["pipelineSpec"]["root"]["dag"]["tasks"])
        images = sorted({e.get("container", {}).get("image", "") for e in
                         self.job["pipelineSpec"]["deploymentSpec"]["executors"].values()} - {""})
        return "\n".join([
            f"would submit PipelineJob '{self.display_name}'",
            f"  to         {self.parent}",
            f"  root       {self.pipeline_root}",
            f"  images     {', '.join(images)}",
            f"  tasks      {', '.join(tasks)}",
        ])


def load_submission(path: Path, project: str, region: str,
                    service_account: str = "") -> Submission:
    """Validates a compiled file (YAML, or the older JSON) and prepares the PipelineJob
    body (no network)."""
    try:
        job = _read_pipeline_job(Path(path))
    except (OSError, ValueError) as err:
        raise SubmitError(f"{path}: not a readable pipeline file ({err})") from err
    spec = job.get("pipelineSpec", {})
    if not spec.get("root", {}).get("dag", {}).get("tasks") or "deploymentSpec" not in spec:
        raise SubmitError(f"{path}: not a compiled Vertex pipeline (no pipelineSpec DAG); "
                          "create it with `cifar10-pipeline compile --target vertex`")
    root = job.get("runtimeConfig", {}).get("gcsOutputDirectory", "")
    if not root.startswith("gs://"):
        raise SubmitError(f"{path}: runtimeConfig.gcsOutputDirectory must be a gs:// URI")
    name = re.sub(r"[^a-z0-9-]", "-", spec.get("pipelineInfo", {}).get("name", "cifar10").lower())
    job = dict(job)
    job["displayName"] = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if service_account:
        job["serviceAccount"] = service_account
    return Submission(job["displayName"], f"projects/{project}/locations/{region}", root, job)


def submit(submission: Submission, region: str, api_endpoint: str = "",
           credentials=None) -> str:
    """Creates the PipelineJob; returns its resource name. One-line errors only."""
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    endpoint = api_endpoint or DEFAULT_API_ENDPOINT.format(region=region)
    try:
        client = aiplatform_v1.PipelineServiceClient(
            credentials=credentials, transport="rest",
            client_options={"api_endpoint": endpoint})
        job = json_format.ParseDict(submission.job, aiplatform_v1.PipelineJob()._pb,
                                    ignore_unknown_fields=True)
        created = client.create_pipeline_job(
            parent=submission.parent, pipeline_job=aiplatform_v1.PipelineJob(job),
            pipeline_job_id=submission.display_name, timeout=60)
    except auth_exceptions.DefaultCredentialsError as err:
        raise SubmitError("no Google Cloud credentials found: run `gcloud auth "
                          "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
                          ) from err
    except api_exceptions.GoogleAPICallError as err:
        raise SubmitError(f"Vertex AI refused the job: {err.code} {err.message}") from err
    except (api_exceptions.RetryError, OSError, auth_exceptions.TransportError) as err:
        raise SubmitError(f"could not reach the Vertex AI API at {endpoint}: "
                          f"{str(err).splitlines()[0]}") from err
    return created.name
