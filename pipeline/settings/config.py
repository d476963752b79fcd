"""One frozen configuration for the pipeline; runners and the CLI build it, the
topology in `pipeline.topology` only reads it."""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path

from components.checks.reference_images import MAX_CLASS_DROP
from components.contract import DEFAULT_ENDPOINT_KEEP, DEFAULT_KEEP_VERSIONS, MIN_KEEP_VERSIONS
from components.trainer.config import TrainingConfig

# The curated schema, as installed package data (data/ in the source tree).
SCHEMA_PATH = Path(str(importlib.resources.files("cifar10_data") / "schema" / "schema.pbtxt"))
# Where the pipeline image (Dockerfile) puts the project: compiled pipelines name the schema
# by its path inside that image.
CONTAINER_PROJECT_ROOT = "/pipeline"
CONTAINER_SCHEMA_PATH = f"{CONTAINER_PROJECT_ROOT}/data/schema/schema.pbtxt"
# Relative to where a command runs (the checkout, for `make run`), never inside an install:
# `run` writes there, `predict` and the serving benchmark read the model it pushed.
DEFAULT_OUTPUT_DIR = Path("outputs")
DEFAULT_SERVING_DIR = DEFAULT_OUTPUT_DIR / "serving" / "cifar10"


@dataclass(frozen=True)
class VertexConfig:
    """Cloud settings; present only when compiling for Vertex AI Pipelines."""

    project: str
    region: str
    image: str
    tpu_type: str = "v2-8"  # Cloud TPU name; pipeline/settings/tpu.py maps it to the worker pool
    # CPU or GPU workers instead of a TPU (pipeline/worker_pools.py): a chief and workers-1
    # more of this machine type, with worker_gpus of worker_gpu_type each.
    worker_machine_type: str = ""
    workers: int = 1
    worker_gpus: int = 0
    worker_gpu_type: str = ""  # Vertex's AcceleratorType name, e.g. NVIDIA_TESLA_T4
    tpu_image: str = ""  # the training CustomJob's image (Dockerfile target tpu-trainer)
    service_account: str = ""  # the training CustomJob runs as this account (default: Vertex's)
    network: str = ""  # projects/NUMBER/global/networks/NAME to peer the CustomJob with
    labels: tuple[tuple[str, str], ...] = ()  # on the training CustomJob
    dataflow_region: str = ""  # non-empty: run Beam components on Dataflow
    dataflow_temp_location: str = ""
    endpoint: str = ""  # non-empty: deploy the blessed model to this Vertex endpoint
    endpoint_keep: int = DEFAULT_ENDPOINT_KEEP  # deployed models kept there before the served one


@dataclass(frozen=True)
class KubeflowConfig:
    """Open-source Kubeflow Pipelines settings: the image every step runs, and what the
    Trainer's pod requests (0 requests nothing; the strategy follows what the pod sees)."""

    image: str
    trainer_cpu: float = 0.0  # vCPU request
    trainer_memory_gb: float = 0.0  # memory request, GB
    trainer_gpus: int = 0  # accelerator count
    gpu_resource: str = "nvidia.com/gpu"  # Kubernetes resource name of the accelerator
    # With an s3:// store: the endpoint every pod gets as AWS_ENDPOINT_URL ('' none: AWS S3)
    # and the Kubernetes secret whose accesskey/secretkey become its keys ('' none).
    s3_endpoint: str = ""
    s3_secret: str = ""

    def __post_init__(self) -> None:
        for name in ("trainer_cpu", "trainer_memory_gb", "trainer_gpus"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.trainer_gpus and "/" not in self.gpu_resource:
            raise ValueError(
                f"gpu_resource must be a Kubernetes resource name such as "
                f"nvidia.com/gpu, got '{self.gpu_resource}'"
            )


@dataclass(frozen=True)
class PipelineConfig:
    pipeline_name: str
    pipeline_root: str  # where artifacts go: a local folder or gs://
    source_uri: str
    source_fingerprint: str
    serving_dir: str  # pushed versions go to <serving_dir>/<model_name>/<version>/
    metadata_path: str = ""  # SQLite file for local runs; empty on Vertex
    schema_path: str = str(SCHEMA_PATH)
    eval_fraction: float = 0.1
    model_name: str = "cifar10"
    accuracy_gate: float = 0.80
    # A new model may trail the last blessed one by at most this much accuracy:
    # retraining with another seed moves accuracy by a few tenths of a point.
    max_regression: float = 0.005
    # On the served version's reference images, a class's accuracy may fall by at most
    # this much (components/checks/reference_images.py; --max-class-drop).
    max_class_drop: float = MAX_CLASS_DROP
    # After a push the oldest versions beyond this many are removed (never the served one,
    # the one before it, or one a rollback went back to); components/atomic_pusher/retention.py.
    keep_versions: int = DEFAULT_KEEP_VERSIONS
    # Drift from the served model's training data beyond the schema's thresholds is recorded
    # and the run trains anyway (--accept-drift); off, it stops the run before training.
    accept_drift: bool = False
    # Labels the served model disagrees with (exchanged pairs, an estimated share of wrong
    # labels beyond the reference's) are recorded and the run trains anyway (--accept-labels);
    # off, they stop the run before training.
    accept_labels: bool = False
    # More exact copies among the images than the gate's limit are recorded and the run
    # trains anyway (--accept-duplicates); off, they stop it.
    accept_duplicates: bool = False
    # With span folders under source_uri: the span to train on (-1: the newest), a rolling
    # window of the newest `span_window` up to it, and `force` to train although the served
    # model already saw that span. `span_parameters`: compiled as runtime parameters (span,
    # span_window, force) that each Kubeflow or Vertex run may set, these values their
    # defaults; a local run passes them resolved.
    span: int = -1
    span_window: int = 1
    force: bool = False
    span_parameters: bool = False
    # What the local runner read from the serving folder just before the run: the ServedState
    # step's cache key there. Empty in compiled files, where that step runs uncached.
    served_read_key: str = ""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    beam_args: tuple[str, ...] = ()
    enable_cache: bool = True
    # Compiled files: where the exit handler finds the webhook URL (never the URL itself):
    # a Kubernetes secret NAME[:KEY] (Kubeflow) or a Secret Manager secret name (Vertex).
    notify_secret: str = ""
    vertex: VertexConfig | None = None
    kubeflow: KubeflowConfig | None = None
    # >1: the local Trainer step runs as this many worker processes (MultiWorkerMirrored).
    local_workers: int = 1

    @property
    def serving_model_dir(self) -> str:
        """Where the pusher writes this model's versions, and the served model is read."""
        return f"{self.serving_dir.rstrip('/')}/{self.model_name}"

    def __post_init__(self) -> None:
        if self.local_workers < 1:
            raise ValueError(f"local_workers must be at least 1, got {self.local_workers}")
        if self.local_workers > 1 and (self.vertex or self.kubeflow):
            raise ValueError("local_workers is for local runs; Vertex has --workers")
        if self.local_workers > 1 and self.training.strategy != "multi_worker":
            raise ValueError(
                f"{self.local_workers} local workers train with strategy multi_worker, "
                f"not '{self.training.strategy}'"
            )
        if not 0.0 <= self.accuracy_gate <= 1.0:
            raise ValueError(f"accuracy_gate must be in [0, 1], got {self.accuracy_gate}")
        if self.keep_versions < MIN_KEEP_VERSIONS:
            raise ValueError(
                f"keep_versions must be at least {MIN_KEEP_VERSIONS}, got {self.keep_versions}"
            )
        for name in ("max_regression", "max_class_drop"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.vertex is not None and self.kubeflow is not None:
            raise ValueError("a pipeline targets Vertex AI or Kubeflow Pipelines, not both")


def check_beam_args(beam_args: tuple[str, ...]) -> tuple[str, ...]:
    """--beam-arg values as Beam reads them: options, each starting with --."""
    for arg in beam_args:
        if not arg.startswith("--"):
            raise ValueError(
                f"--beam-arg '{arg}' must be a Beam option such as --beam-arg=--disk_size_gb=50"
            )
    return tuple(beam_args)


def cloud_pipeline_config(
    *,
    pipeline_name: str,
    pipeline_root: str,
    source_uri: str,
    source_fingerprint: str,
    training: TrainingConfig,
    **fields,
) -> PipelineConfig:
    """A pipeline whose steps run in the pipeline image (Vertex, Kubeflow): artifacts and
    served versions under the object-store root, the schema at its path inside the image.
    Without a fingerprint, caching keys on the URI: new data needs a new path."""
    root = pipeline_root.rstrip("/")
    fields.setdefault("span_parameters", True)  # each run may choose its spans
    return PipelineConfig(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        serving_dir=f"{root}/serving",
        source_uri=source_uri,
        source_fingerprint=source_fingerprint or f"uri:{source_uri}",
        schema_path=CONTAINER_SCHEMA_PATH,
        training=training,
        **fields,
    )
