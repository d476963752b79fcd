"""Vertex AI Pipelines: compile the same topology with KubeflowV2DagRunner, then
submit the compiled file as a PipelineJob (separate steps, as in mlops-with-vertex-ai)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.contract import TRAINER_NODE
from pipeline.config import PipelineConfig, TrainingConfig, VertexConfig, cloud_pipeline_config
from pipeline.tpu import tpu_worker

# Where the Dockerfile puts this project inside the pipeline image.
DEFAULT_API_ENDPOINT = "{region}-aiplatform.googleapis.com"
# The Vertex Trainer's custom_config keys (tfx.extensions.google_cloud_ai_platform; importing
# TFX takes about 30 s, too long for `submit`; tests check they match).
TRAINING_ARGS_KEY = "ai_platform_training_args"
VERTEX_REGION_KEY = "ai_platform_vertex_region"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
FINAL_STATES = ("PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED")


class SubmitError(RuntimeError):
    """Submission failed; the message is one line that says why."""


LABEL_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE_PATTERN = re.compile(r"[a-z0-9_-]{0,63}")


def parse_labels(
    items: list[str] | tuple[str, ...], flag: str = "--label"
) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE pairs as Google Cloud accepts them (lowercase letters, digits, _ and -)."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_PATTERN.fullmatch(key) or not LABEL_VALUE_PATTERN.fullmatch(value):
            raise ValueError(
                f"{flag} '{item}' must be KEY=VALUE: lowercase letters, digits, _ "
                "or -, at most 63 characters, the key starting with a letter"
            )
        labels[key] = value
    return tuple(sorted(labels.items()))


def _dataflow_args(
    project: str,
    region: str,
    temp_location: str,
    image: str,
    service_account: str,
    extra: tuple[str, ...],
) -> tuple[str, ...]:
    """Beam options for Dataflow workers running the pipeline image; `extra` (--beam-arg)
    comes last, so it wins over these defaults."""
    if not temp_location.startswith("gs://"):
        raise ValueError("--dataflow-temp-location gs://... is required with --dataflow-region")
    args = [
        "--runner=DataflowRunner",
        f"--project={project}",
        f"--region={region}",
        f"--temp_location={temp_location}",
        f"--sdk_container_image={image}",
    ]
    if service_account and not any(a.startswith("--service_account_email") for a in extra):
        args.append(f"--service_account_email={service_account}")
    return (*args, *extra)


def vertex_config(
    *,
    project: str,
    region: str,
    pipeline_root: str,
    image: str,
    source_uri: str,
    training: TrainingConfig,
    tpu_type: str = "v2-8",
    tpu_count: int | None = None,
    dataflow_region: str = "",
    dataflow_temp_location: str = "",
    endpoint: str = "",
    source_fingerprint: str = "",
    beam_args: tuple[str, ...] = (),
    service_account: str = "",
    network: str = "",
    labels: tuple[tuple[str, str], ...] = (),
    tpu_image: str = "",
    pipeline_name: str = "cifar10",
    **overrides,
) -> PipelineConfig:
    """The Vertex configuration; bad values raise ValueError naming the flag."""
    if not pipeline_root.startswith("gs://"):
        raise ValueError(f"--pipeline-root must be a gs:// URI, got '{pipeline_root}'")
    if not source_uri.startswith("gs://"):
        raise ValueError(
            f"--data must be a gs:// URI on Vertex (copy the archive to GCS "
            f"first), got '{source_uri}'"
        )
    worker = tpu_worker(tpu_type, tpu_count)
    for arg in beam_args:
        if not arg.startswith("--"):
            raise ValueError(
                f"--beam-arg '{arg}' must be a Beam option such as --beam-arg=--disk_size_gb=50"
            )
    if network and not re.fullmatch(r"projects/[^/]+/global/networks/[^/]+", network):
        raise ValueError(
            f"--network must be projects/PROJECT_NUMBER/global/networks/NAME, got '{network}'"
        )
    if dataflow_region:
        beam_args = _dataflow_args(
            project, dataflow_region, dataflow_temp_location, image, service_account, beam_args
        )
    root = pipeline_root.rstrip("/")
    if training.strategy not in ("auto", "tpu"):
        raise ValueError(
            f"--strategy {training.strategy} cannot run on the Vertex Cloud TPU "
            "worker pool; leave --strategy at auto (or pass tpu)"
        )
    if training.cpu_replicas:
        raise ValueError("--cpu-replicas splits a local CPU; it has no meaning on a Cloud TPU")
    tpu_training = TrainingConfig(
        **{**training.to_custom_config(), "strategy": "tpu", "tpu": training.tpu or "local"}
    )
    return cloud_pipeline_config(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        source_uri=source_uri,
        source_fingerprint=source_fingerprint,
        training=tpu_training,
        beam_args=tuple(beam_args),
        vertex=VertexConfig(
            project=project,
            region=region,
            image=image,
            tpu_type=worker.name,
            tpu_image=tpu_image,
            service_account=service_account,
            network=network,
            labels=labels,
            dataflow_region=dataflow_region,
            dataflow_temp_location=dataflow_temp_location,
            endpoint=endpoint,
        ),
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
        config=kubeflow_runner.runner_config(config.vertex.image),
        output_dir=str(output.parent),
        output_filename=output.name,
    )
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
    return {
        "pipelineSpec": spec,
        "runtimeConfig": {"gcsOutputDirectory": spec.get("defaultPipelineRoot", "")},
    }


@dataclass(frozen=True)
class Submission:
    """What `submit` sends: the compiled file plus the PipelineJob settings."""

    template_path: Path
    display_name: str
    project: str
    region: str
    pipeline_root: str
    tasks: tuple[str, ...]
    images: tuple[str, ...]
    service_account: str = ""
    network: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    enable_caching: bool | None = None  # None: each task as compiled

    def describe(self) -> str:
        caching = {None: "as compiled", True: "on", False: "off"}[self.enable_caching]
        return "\n".join(
            [
                f"would submit PipelineJob '{self.display_name}'",
                f"  to         projects/{self.project}/locations/{self.region}",
                f"  root       {self.pipeline_root}",
                f"  images     {', '.join(self.images)}",
                f"  tasks      {', '.join(self.tasks)}",
                f"  runs as    {self.service_account or '(the project default service account)'}",
                f"  network    {self.network or '(none)'}",
                f"  labels     {', '.join(f'{k}={v}' for k, v in self.labels) or '(none)'}",
                f"  caching    {caching}",
            ]
        )


def _trainer_settings(spec: dict) -> dict:
    """The Vertex Trainer's custom_config as compiled (project, region, CustomJob spec)."""
    trainer = spec["root"]["dag"]["tasks"].get(TRAINER_NODE, {})
    runtime_value = (
        trainer.get("inputs", {})
        .get("parameters", {})
        .get("custom_config", {})
        .get("runtimeValue", {})
    )
    # Pipeline spec 2.1 (what `compile` writes) holds the string itself; files compiled
    # before, in spec 2.0, wrap it, and Vertex still runs them.
    value = runtime_value.get("constant", runtime_value.get("constantValue", {}).get("stringValue"))
    try:
        return json.loads(value) if value else {}
    except json.JSONDecodeError:
        return {}


def load_submission(
    path: Path,
    project: str = "",
    region: str = "",
    service_account: str = "",
    network: str = "",
    labels: tuple[tuple[str, str], ...] = (),
    enable_caching: bool | None = None,
) -> Submission:
    """Validates a compiled file (YAML, or the older JSON) against the submit-time
    settings (no network).

    Project and region default to the ones compiled in; different ones are refused, since
    the training CustomJob would still go to the compiled ones. The service account,
    network and labels default to the training CustomJob's.
    """
    try:
        job = _read_pipeline_job(Path(path))
    except (OSError, ValueError) as err:
        raise SubmitError(f"{path}: not a readable pipeline file ({err})") from err
    spec = job.get("pipelineSpec", {}) if isinstance(job, dict) else {}
    if not spec.get("root", {}).get("dag", {}).get("tasks") or "deploymentSpec" not in spec:
        raise SubmitError(
            f"{path}: not a compiled Vertex pipeline (no pipelineSpec DAG); "
            "create it with `cifar10-pipeline compile --target vertex`"
        )
    root = job.get("runtimeConfig", {}).get("gcsOutputDirectory", "")
    if not root.startswith("gs://"):
        raise SubmitError(f"{path}: runtimeConfig.gcsOutputDirectory must be a gs:// URI")
    trainer = _trainer_settings(spec)
    training_args = trainer.get(TRAINING_ARGS_KEY, {})
    compiled = {
        "project": training_args.get("project", ""),
        "region": trainer.get(VERTEX_REGION_KEY, ""),
    }
    chosen = {"project": project, "region": region}
    for flag, value in chosen.items():
        if value and compiled[flag] and value != compiled[flag]:
            raise SubmitError(
                f"{path} was compiled for {flag} '{compiled[flag]}', not "
                f"'{value}': compile again with --{flag} {value}"
            )
        chosen[flag] = value or compiled[flag]
        if not chosen[flag]:
            raise SubmitError(f"{path} names no {flag}; pass --{flag}")
    job_spec = training_args.get("job_spec", {})
    name = re.sub(r"[^a-z0-9-]", "-", spec.get("pipelineInfo", {}).get("name", "cifar10").lower())
    executors = spec["deploymentSpec"].get("executors", {}).values()
    return Submission(
        template_path=Path(path),
        display_name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}",
        project=chosen["project"],
        region=chosen["region"],
        pipeline_root=root,
        tasks=tuple(sorted(spec["root"]["dag"]["tasks"])),
        images=tuple(sorted({e.get("container", {}).get("image", "") for e in executors} - {""})),
        service_account=service_account or job_spec.get("service_account", ""),
        network=network or job_spec.get("network", ""),
        labels=tuple(sorted({**training_args.get("labels", {}), **dict(labels)}.items())),
        enable_caching=enable_caching,
    )


@contextmanager
def _one_line_errors(endpoint: str):
    """Turns the client libraries' errors into SubmitError with one line."""
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except auth_exceptions.DefaultCredentialsError as err:
        raise SubmitError(
            "no Google Cloud credentials found: run `gcloud auth "
            "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
        ) from err
    except api_exceptions.GoogleAPICallError as err:
        raise SubmitError(f"Vertex AI refused the job: {err.code} {err.message}") from err
    except (api_exceptions.RetryError, OSError, auth_exceptions.TransportError) as err:
        raise SubmitError(
            f"could not reach the Vertex AI API at {endpoint}: {str(err).splitlines()[0]}"
        ) from err


def api_endpoint_of(region: str, api_endpoint: str = "") -> str:
    return api_endpoint or DEFAULT_API_ENDPOINT.format(region=region)


def submit(submission: Submission, api_endpoint: str = "", credentials=None):
    """Creates the PipelineJob with google-cloud-aiplatform; returns the PipelineJob."""
    import google.auth
    from google.cloud import aiplatform

    endpoint = api_endpoint_of(submission.region, api_endpoint)
    with _one_line_errors(endpoint):
        if credentials is None:  # explicitly, so no earlier aiplatform.init's credentials stay
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        aiplatform.init(
            project=submission.project,
            location=submission.region,
            credentials=credentials,
            api_endpoint=endpoint,
            api_transport="rest",
        )
        job = aiplatform.PipelineJob(
            display_name=submission.display_name,
            job_id=submission.display_name,
            template_path=str(submission.template_path),
            pipeline_root=submission.pipeline_root,
            enable_caching=submission.enable_caching,
            labels=dict(submission.labels),
            project=submission.project,
            location=submission.region,
            credentials=credentials,
        )
        job.submit(
            service_account=submission.service_account or None, network=submission.network or None
        )
    return job


class LostContact(RuntimeError):
    """The job was submitted, but its state could not be read for the whole retry window;
    it may still be running. The message is one line with the job's console link."""


# How long `wait` keeps polling through transient errors before it reports lost contact,
# and the limit on one poll request (a hung connection counts as a transient error).
WAIT_RETRY_SECONDS = 600.0
POLL_REQUEST_TIMEOUT_SECONDS = 60.0
FIRST_BACKOFF_SECONDS = 1.0  # doubling up to a minute between retries


def _is_transient(error: Exception) -> bool:
    """Errors worth polling again for: the server's 5xx and 429 answers, and a connection
    that failed or timed out (requests' errors, google-auth's transport error)."""
    import requests
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    return isinstance(
        error,
        (
            api_exceptions.ServerError,
            api_exceptions.TooManyRequests,
            requests.exceptions.ConnectionError,
            requests.exceptions.Timeout,
            requests.exceptions.ChunkedEncodingError,
            auth_exceptions.TransportError,
        ),
    )


def console_url(resource_name: str) -> str:
    """The Cloud console page of a PipelineJob, from its resource name."""
    fields = resource_name.split("/")  # projects/P/locations/L/pipelineJobs/ID
    project, location, job_id = fields[1], fields[3], fields[5]
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/runs/"
        f"{job_id}?project={project}"
    )


def wait(
    job,
    report: Callable[[str], None],
    poll_seconds: float = 30.0,
    retry_seconds: float = WAIT_RETRY_SECONDS,
) -> str:
    """Polls the job until it ends, reporting each task's state changes; returns the final
    pipeline state name (PIPELINE_STATE_SUCCEEDED, _FAILED or _CANCELLED).

    Each poll is one GET, retried with exponential backoff through transient errors for
    up to `retry_seconds`; after that, or on any other API error, raises LostContact.
    The job runs on in the cloud either way, so nothing here says it was refused."""
    from google.api_core import exceptions as api_exceptions
    from google.api_core import retry as api_retry

    def retrying(error: Exception) -> None:
        report(f"  lost contact with Vertex AI ({_one_line(error)}); retrying")

    retry = api_retry.Retry(
        predicate=_is_transient,
        initial=FIRST_BACKOFF_SECONDS,
        maximum=60.0,
        multiplier=2.0,
        timeout=retry_seconds,
        on_error=retrying,
    )
    last: dict[str, str] = {}
    while True:
        try:
            resource = job.api_client.get_pipeline_job(
                name=job.resource_name, retry=retry, timeout=POLL_REQUEST_TIMEOUT_SECONDS
            )
        except (api_exceptions.GoogleAPIError, OSError) as err:
            cause = err.cause if isinstance(err, api_exceptions.RetryError) and err.cause else err
            raise LostContact(
                f"lost contact with Vertex AI while waiting for {job.resource_name} "
                f"({_one_line(cause)}); the job may still be running: "
                f"{console_url(job.resource_name)}"
            ) from err
        for task in resource.job_detail.task_details:
            if last.get(task.task_name) != task.state.name:
                last[task.task_name] = task.state.name
                report(f"  {task.task_name}: {task.state.name}")
        if resource.state.name in FINAL_STATES:
            return resource.state.name
        time.sleep(poll_seconds)


def _one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
