"""Vertex AI Pipelines: submit a compiled file as a PipelineJob and wait for it
(compiling is `vertex.compile`, reading the file `vertex.pipeline_file`, as separate steps as in
mlops-with-vertex-ai)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from pipeline.common.submission import SubmitError
from pipeline.vertex.pipeline_file import Submission, write_job

DEFAULT_API_ENDPOINT = "{region}-aiplatform.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
FINAL_STATES = ("PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED")


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


def pipeline_job(submission: Submission, credentials, folder: Path):
    """The `aiplatform.PipelineJob` for `submission`, built without the network. Caching is
    applied to the file first (`pipeline_file.with_caching`) and aiplatform is told nothing
    about it: its `enable_caching` overwrites every task's option, the span and serving
    readers' included, and from the second night on a run would replay night 1."""
    from google.cloud import aiplatform

    return aiplatform.PipelineJob(
        display_name=submission.display_name,
        job_id=submission.display_name,
        template_path=str(write_job(submission, folder)),
        pipeline_root=submission.pipeline_root,
        enable_caching=None,
        labels=dict(submission.labels),
        parameter_values=dict(submission.parameters),
        project=submission.project,
        location=submission.region,
        credentials=credentials,
    )


def submit(submission: Submission, api_endpoint: str = "", credentials=None):
    """Creates the PipelineJob with google-cloud-aiplatform; returns the PipelineJob."""
    import google.auth
    from google.cloud import aiplatform

    endpoint = api_endpoint_of(submission.region, api_endpoint)
    with _one_line_errors(endpoint), tempfile.TemporaryDirectory() as folder:
        if credentials is None:  # explicitly, so no earlier aiplatform.init's credentials stay
            credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        aiplatform.init(
            project=submission.project,
            location=submission.region,
            credentials=credentials,
            api_endpoint=endpoint,
            api_transport="rest",
        )
        job = pipeline_job(submission, credentials, Path(folder))
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
