"""Kubeflow Pipelines (open source, 2.x): compile the same topology to KFP v2 pipeline IR
(YAML) with KubeflowV2DagRunner, then create a run through the kfp SDK's Client."""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import (
    KubeflowConfig,
    PipelineConfig,
    TrainingConfig,
    cloud_pipeline_config,
)
from pipeline.files import write_atomically
from pipeline.submission import (
    SubmitError,
    container_images,
    dated_name,
    has_dag,
    pipeline_name,
)

# Where the Dockerfile puts this project inside the pipeline image.
# TFX components open artifacts themselves with tf.io.gfile: gs:// is built in, s3://
# (AWS S3 or MinIO through S3_ENDPOINT) needs tensorflow-io in the image.
ARTIFACT_STORE_SCHEMES = ("gs://", "s3://")
YAML_SUFFIXES = (".yaml", ".yml")


def _artifact_store_uri(flag: str, uri: str) -> str:
    if uri.startswith("minio://"):
        raise ValueError(
            f"{flag} '{uri}': TFX components open artifacts with tf.io.gfile, which has no "
            f"minio:// filesystem; address the bucket as s3://{uri[len('minio://') :]} with "
            "S3_ENDPOINT pointing at MinIO"
        )
    if not uri.startswith(ARTIFACT_STORE_SCHEMES):
        raise ValueError(
            f"{flag} must be a gs:// or s3:// URI that the cluster's pods can "
            f"reach, not a local path, got '{uri}'"
        )
    return uri.rstrip("/")


def kubeflow_config(
    *,
    pipeline_root: str,
    image: str,
    source_uri: str,
    training: TrainingConfig,
    trainer_cpu: float = 0.0,
    trainer_memory_gb: float = 0.0,
    trainer_gpus: int = 0,
    gpu_resource: str = "nvidia.com/gpu",
    source_fingerprint: str = "",
    pipeline_name: str = "cifar10",
    **overrides,
) -> PipelineConfig:
    """The pipeline on a KFP cluster: the standard Trainer in its own pod with the
    given requests; strategy `auto` then picks from the devices that pod sees."""
    root = _artifact_store_uri("--pipeline-root", pipeline_root)
    source_uri = _artifact_store_uri("--data", source_uri)
    if not image:
        raise ValueError("--image is required: the pipeline image every step runs")
    if training.strategy == "multi_worker":
        raise ValueError(
            "--workers / --strategy multi_worker are not compiled for Kubeflow Pipelines: "
            "the Trainer is one pod (see README, Kubeflow: several workers)"
        )
    return cloud_pipeline_config(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        source_uri=source_uri,
        source_fingerprint=source_fingerprint,
        training=training,
        kubeflow=KubeflowConfig(
            image=image,
            trainer_cpu=trainer_cpu,
            trainer_memory_gb=trainer_memory_gb,
            trainer_gpus=trainer_gpus,
            gpu_resource=gpu_resource,
        ),
        **overrides,
    )


def resolver_executors(spec: dict[str, Any]) -> list[str]:
    """Executors the open-source KFP backend cannot run ("resolver not implemented")."""
    return sorted(
        name
        for name, executor in spec.get("deploymentSpec", {}).get("executors", {}).items()
        if "resolver" in executor
    )


def runner_config(image: str):
    """KubeflowV2DagRunner's settings for both targets: pipeline spec 2.1. Spec 2.0 (TFX's
    default) writes task constants as `runtimeValue.constantValue`, which the open-source
    KFP backend's driver and kfp.local refuse ("Expected constant."), and leaves out the
    inputs spec without which TFX's entrypoint reads the deprecated `inputs.parameters`
    that the backend no longer fills. Vertex AI runs 2.1 as well."""
    from tfx import v1 as tfx

    return tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
        default_image=image, use_pipeline_spec_2_1=True
    )


def build_pipeline_spec(config: PipelineConfig, image: str) -> dict[str, Any]:
    """The KFP v2 PipelineSpec of `create_pipeline(config)`, with the pipeline root as
    its default root (the YAML form has no runtimeConfig to carry it)."""
    from tfx import v1 as tfx

    from pipeline.topology import create_pipeline

    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(config=runner_config(image))
    spec = runner.run(create_pipeline(config), write_out=False)["pipelineSpec"]
    spec["defaultPipelineRoot"] = config.pipeline_root
    return spec


def _yaml_output(output: Path) -> Path:
    if output.suffix not in YAML_SUFFIXES:
        raise ValueError(f"--output {output}: the KFP v2 pipeline file must end in .yaml")
    return output.resolve()


def write_pipeline_yaml(spec: dict[str, Any], output: Path) -> Path:
    """Writes the spec atomically: a failed write leaves no partial file behind."""
    import yaml

    output = _yaml_output(output)
    return write_atomically(output, yaml.safe_dump(spec, sort_keys=True))


def compile_pipeline(config: PipelineConfig, output: Path) -> Path:
    """Writes the KFP v2 pipeline IR (YAML) to `output`."""
    if config.kubeflow is None:
        raise ValueError("compile_pipeline needs a Kubeflow configuration")
    output = _yaml_output(output)  # before the slow part
    spec = build_pipeline_spec(config, config.kubeflow.image)
    unsupported = resolver_executors(spec)
    if unsupported:  # the topology must stay runnable on the open-source backend
        raise RuntimeError(f"resolver executors in the compiled pipeline: {unsupported}")
    return write_pipeline_yaml(spec, output)


def load_pipeline_spec(path: Path) -> dict[str, Any]:
    """Reads a compiled YAML file the way kfp's Client will (kfp's own parser), so a
    malformed file fails here, before any network call. Raises SubmitError."""
    import yaml
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if Path(path).suffix not in YAML_SUFFIXES:
        raise SubmitError(
            f"{path}: Kubeflow Pipelines takes the .yaml file written by "
            "`cifar10-pipeline compile --target kubeflow`"
        )
    try:
        spec = yaml.safe_load(Path(path).read_text())
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    except (OSError, yaml.YAMLError, json_format.ParseError, TypeError, AttributeError) as err:
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

    def describe(self) -> str:
        tasks = sorted(self.spec["root"]["dag"]["tasks"])
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
            ]
        )


def load_submission(
    path: Path, host: str, namespace: str = "", experiment: str = "", run_name: str = ""
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
                arguments={},
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
                "README, Kubeflow Pipelines)"
            ) from err
        raise SubmitError(
            f"Kubeflow Pipelines at {submission.host} refused the run: {err.status} {err.reason}"
        ) from err
    except (urllib3.exceptions.HTTPError, OSError, TimeoutError) as err:
        raise SubmitError(
            f"could not reach Kubeflow Pipelines at {submission.host}: {_one_line(err)}"
        ) from err
    return result.run_id
