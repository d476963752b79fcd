"""Vertex AI Pipelines settings: the `compile --target vertex` flags checked and turned into
a PipelineConfig, before any TFX import."""

from __future__ import annotations

import re

from pipeline.config import PipelineConfig, TrainingConfig, VertexConfig, cloud_pipeline_config
from pipeline.tpu import tpu_worker

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
