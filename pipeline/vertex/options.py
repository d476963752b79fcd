"""Vertex AI Pipelines settings: the `compile --target vertex` flags checked and turned into
a PipelineConfig, before any TFX import."""

from __future__ import annotations

import re
from dataclasses import dataclass

from components.contract import DEFAULT_ENDPOINT_KEEP
from components.runtime import stack
from pipeline.settings.config import (
    PipelineConfig,
    TrainingConfig,
    VertexConfig,
    check_beam_args,
    cloud_pipeline_config,
)
from pipeline.settings.tpu import tpu_worker

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
    comes last, so it wins over these defaults. Without a region, `extra` alone: the Beam
    steps run in their own containers, and a temporary location would go unused."""
    if not region:
        if temp_location:
            raise ValueError(
                "--dataflow-temp-location needs --dataflow-region: it is where the Beam steps "
                "keep their temporary files on Dataflow, and without a region they run in "
                "their own containers"
            )
        return extra
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


@dataclass(frozen=True)
class WorkerPools:
    """The training job's machines as the flags ask for them: a Cloud TPU (`--tpu-type`,
    v2-8 by default) or `--workers` CPU/GPU machines of `--worker-machine-type`; checked
    here so that a bad combination fails at compile time, naming the flag."""

    tpu_type: str
    tpu_count: int | None
    workers: int
    machine_type: str
    gpus: int
    gpu_type: str

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {self.workers}")
        if self.machine_type:
            if self.tpu_type or self.tpu_count:
                raise ValueError(
                    "--tpu-type/--tpu-cores and --worker-machine-type exclude each other"
                )
            _check_gpus(self.gpus, self.gpu_type)
            return
        if self.workers > 1 or self.gpus or self.gpu_type:
            raise ValueError(
                "--workers and --worker-gpus need --worker-machine-type (CPU or GPU workers); "
                "for more TPU chips pick a larger slice with --tpu-type"
            )
        tpu_worker(self.tpu_name, self.tpu_count)  # refuses unknown names with the list

    @property
    def tpu_name(self) -> str:
        return "" if self.machine_type else tpu_worker(self.tpu_type or "v2-8").name

    def training(self, training: TrainingConfig) -> TrainingConfig:
        """The strategy that fits: tpu on a TPU, multi_worker on several workers, else
        auto (MirroredStrategy over one machine's GPUs)."""
        if self.machine_type and training.tpu:
            raise ValueError(
                f"--tpu and --worker-machine-type exclude each other: {self.describe()} has no "
                "TPU to connect to (for a Cloud TPU, pass --tpu-type instead)"
            )
        fits = "tpu" if not self.machine_type else "multi_worker" if self.workers > 1 else "auto"
        if training.strategy not in ("auto", fits):
            raise ValueError(
                f"--strategy {training.strategy} does not fit this training job "
                f"({self.describe()}); leave --strategy at auto (or pass {fits})"
            )
        values = {**training.to_custom_config(), "strategy": fits}
        if fits == "tpu":
            values["tpu"] = training.tpu or "local"
        return TrainingConfig(**values)

    def describe(self) -> str:
        if not self.machine_type:
            return f"Cloud TPU {self.tpu_name}"
        gpus = f" with {self.gpus} {self.gpu_type}" if self.gpus else ""
        return f"{self.workers} x {self.machine_type}{gpus}"


def _check_gpus(gpus: int, gpu_type: str) -> None:
    """GPUs need a type Vertex knows (aiplatform's own AcceleratorType enum), and no TPU."""
    from google.cloud.aiplatform_v1.types import AcceleratorType

    if gpus < 0 or bool(gpus) != bool(gpu_type):
        raise ValueError("--worker-gpus N and --worker-gpu-type TYPE go together (N >= 1)")
    known = sorted(n for n in AcceleratorType.__members__ if n.startswith("NVIDIA_"))
    if gpu_type and gpu_type not in known:
        raise ValueError(f"--worker-gpu-type '{gpu_type}' is not one of {', '.join(known)}")


def _fitting_training(
    pools: WorkerPools, training: TrainingConfig, tpu_image: str
) -> TrainingConfig:
    """The training settings that fit the pools; on a Cloud TPU, only with a TPU image named
    (stack.tpu_image_problem), on either stack."""
    fitting = pools.training(training)
    problem = (
        stack.tpu_image_problem(stack.running_stack(), tpu_image, pools.tpu_name)
        if pools.tpu_name
        else ""
    )
    if problem:
        raise ValueError(problem)
    return fitting


def vertex_config(
    *,
    project: str,
    region: str,
    pipeline_root: str,
    image: str,
    source_uri: str,
    training: TrainingConfig,
    tpu_type: str = "",
    tpu_count: int | None = None,
    workers: int = 1,
    worker_machine_type: str = "",
    worker_gpus: int = 0,
    worker_gpu_type: str = "",
    dataflow_region: str = "",
    dataflow_temp_location: str = "",
    endpoint: str = "",
    endpoint_keep: int = DEFAULT_ENDPOINT_KEEP,
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
    pools = WorkerPools(
        tpu_type, tpu_count, workers, worker_machine_type, worker_gpus, worker_gpu_type
    )
    beam_args = check_beam_args(beam_args)
    if network and not re.fullmatch(r"projects/[^/]+/global/networks/[^/]+", network):
        raise ValueError(
            f"--network must be projects/PROJECT_NUMBER/global/networks/NAME, got '{network}'"
        )
    beam_args = _dataflow_args(
        project, dataflow_region, dataflow_temp_location, image, service_account, beam_args
    )
    if endpoint_keep < 0:
        raise ValueError(f"--endpoint-keep must be 0 or more, got {endpoint_keep}")
    root = pipeline_root.rstrip("/")
    if training.cpu_replicas:
        raise ValueError("--cpu-replicas splits a local CPU; it has no meaning on Vertex AI")
    return cloud_pipeline_config(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        source_uri=source_uri,
        source_fingerprint=source_fingerprint,
        training=_fitting_training(pools, training, tpu_image),
        beam_args=tuple(beam_args),
        vertex=VertexConfig(
            project=project,
            region=region,
            image=image,
            tpu_type=pools.tpu_name,
            worker_machine_type=worker_machine_type,
            workers=workers,
            worker_gpus=worker_gpus,
            worker_gpu_type=worker_gpu_type,
            tpu_image=tpu_image,
            service_account=service_account,
            network=network,
            labels=labels,
            dataflow_region=dataflow_region,
            dataflow_temp_location=dataflow_temp_location,
            endpoint=endpoint,
            endpoint_keep=endpoint_keep,
        ),
        **overrides,
    )
