"""Kubeflow Pipelines (open source, 2.x): a compiled file checked with kfp's own parser, then a
run created through the kfp SDK's Client."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.common import compiled_target, kfp_platform
from pipeline.common.submission import (
    SubmitError,
    container_images,
    dated_name,
    has_dag,
    listed_parameters,
    pipeline_name,
    run_parameters,
)
from pipeline.kfp_ir import YAML_SUFFIXES, resolver_executors


def load_pipeline_spec(path: Path) -> dict[str, Any]:
    """Reads a compiled YAML file the way kfp's Client will (kfp's own parser), so a
    malformed file fails here, before any network call. Raises SubmitError."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if Path(path).suffix not in YAML_SUFFIXES:
        raise SubmitError(
            f"{path}: Kubeflow Pipelines takes the .yaml file written by "
            "`cifar10-pipeline compile --target kubeflow`"
        )
    try:
        spec, platform = kfp_platform.read_pipeline_file(Path(path))
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
        json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except kfp_platform.PipelineFileError as err:
        raise SubmitError(str(err)) from err
    except (json_format.ParseError, TypeError, AttributeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SubmitError(f"{path}: not a readable KFP pipeline YAML ({reason})") from err
    if not has_dag(spec):
        raise SubmitError(
            f"{path}: not a compiled pipeline (no root DAG); create it with "
            "`cifar10-pipeline compile --target kubeflow`"
        )
    unsupported = resolver_executors(spec)
    if unsupported:
        raise SubmitError(
            f"{path}: has resolver executors ({', '.join(unsupported)}), which "
            "Kubeflow Pipelines cannot run; recompile with this version"
        )
    return spec


@dataclass(frozen=True)
class Submission:
    pipeline_file: Path
    host: str
    namespace: str
    experiment: str
    run_name: str
    pipeline_root: str
    spec: dict[str, Any]
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        tasks = sorted(compiled_target.pipeline_tasks(self.spec))
        images = container_images(self.spec)
        return "\n".join(
            [
                f"would create run '{self.run_name}'",
                f"  on         {self.host}",
                f"  namespace  {self.namespace or '(the client default)'}",
                f"  experiment {self.experiment}",
                f"  root       {self.pipeline_root}",
                f"  images     {', '.join(images)}",
                f"  tasks      {', '.join(tasks)}",
                f"  parameters {listed_parameters(self.parameters)}",
            ]
        )


def load_submission(
    path: Path,
    host: str,
    namespace: str = "",
    experiment: str = "",
    run_name: str = "",
    parameters: list[str] | None = None,
) -> Submission:
    """Validates a compiled file and the target (no network)."""
    if not re.match(r"^https?://[^/\s]+", host or ""):
        raise SubmitError(
            f"--host must be the KFP API URL, e.g. http://localhost:8080, got '{host}'"
        )
    spec = load_pipeline_spec(path)
    name = pipeline_name(spec)
    return Submission(
        pipeline_file=Path(path),
        host=host.rstrip("/"),
        namespace=namespace,
        experiment=experiment or name,
        run_name=run_name or dated_name(name),
        pipeline_root=spec.get("defaultPipelineRoot", ""),
        spec=spec,
        parameters=run_parameters(spec, parameters or []),
    )


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def submit(submission: Submission) -> str:
    """Creates the run with kfp's Client; returns the run id. One-line errors only."""
    import kfp
    import urllib3
    from kfp_server_api.exceptions import ApiException

    try:
        # kfp prints links on stdout; keep stdout for this command's own result.
        with contextlib.redirect_stdout(sys.stderr):
            client = kfp.Client(
                host=submission.host,
                **({"namespace": submission.namespace} if submission.namespace else {}),
            )
            result = client.create_run_from_pipeline_package(
                str(submission.pipeline_file),
                arguments=dict(submission.parameters),
                run_name=submission.run_name,
                experiment_name=submission.experiment,
                namespace=submission.namespace or None,
                pipeline_root=submission.pipeline_root or None,
            )
    except ApiException as err:
        if err.status in (401, 403):
            raise SubmitError(
                f"{submission.host} refused the request ({err.status} "
                f"{err.reason}): pass credentials the cluster accepts (see "
                "docs/kubeflow.md)"
            ) from err
        raise SubmitError(
            f"Kubeflow Pipelines at {submission.host} refused the run: {err.status} {err.reason}"
        ) from err
    except (urllib3.exceptions.HTTPError, OSError, TimeoutError) as err:
        raise SubmitError(
            f"could not reach Kubeflow Pipelines at {submission.host}: {_one_line(err)}"
        ) from err
    return result.run_id
