"""One frozen configuration for the pipeline; runners and the CLI build it, the
topology in `pipeline.topology` only reads it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = PROJECT_ROOT / "data" / "schema" / "schema.pbtxt"

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "default")
MODELS = ("airbench", "seed_cnn")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


@dataclass(frozen=True)
class TrainingConfig:
    """What the Trainer's run_fn receives (through custom_config)."""

    model: str = "airbench"
    strategy: str = "auto"
    tpu: str = ""  # TPU name, grpc://host:8470, or "local" on a TPU VM
    cpu_replicas: int = 0  # >1 splits the host CPU into this many logical devices
    epochs: int | None = None  # None: the model recipe's default
    per_replica_batch_size: int | None = None
    learning_rate: float | None = None
    precision: str = "auto"  # auto: from the hardware (components/trainer/hardware.py)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model '{self.model}'; choose one of {', '.join(MODELS)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"unknown strategy '{self.strategy}'; choose one of {', '.join(STRATEGIES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"unknown precision '{self.precision}'; choose one of {', '.join(PRECISIONS)}")
        for name in ("epochs", "per_replica_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.cpu_replicas < 0:
            raise ValueError(f"cpu_replicas must be >= 0, got {self.cpu_replicas}")

    def to_custom_config(self) -> dict[str, Any]:
        """Plain values only: custom_config is serialised into the compiled pipeline."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_custom_config(cls, values: dict[str, Any]) -> "TrainingConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass(frozen=True)
class VertexConfig:
    """Cloud settings; present only when compiling for Vertex AI Pipelines."""

    project: str
    region: str
    image: str
    tpu_type: str = "TPU_V2"  # Vertex accelerator type for the training worker pool
    tpu_count: int = 8  # TPU cores
    machine_type: str = "cloud-tpu"
    dataflow_region: str = ""  # non-empty: run Beam components on Dataflow
    dataflow_temp_location: str = ""
    endpoint: str = ""  # non-empty: deploy the blessed model to this Vertex endpoint


@dataclass(frozen=True)
class KubeflowConfig:
    """Open-source Kubeflow Pipelines settings: the image every step runs, and what the
    Trainer's pod requests (0 requests nothing; the strategy follows what the pod sees)."""

    image: str
    trainer_cpu: float = 0.0  # vCPU request
    trainer_memory_gb: float = 0.0  # memory request, GB
    trainer_gpus: int = 0  # accelerator count
    gpu_resource: str = "nvidia.com/gpu"  # Kubernetes resource name of the accelerator

    def __post_init__(self) -> None:
        for name in ("trainer_cpu", "trainer_memory_gb", "trainer_gpus"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.trainer_gpus and "/" not in self.gpu_resource:
            raise ValueError(f"gpu_resource must be a Kubernetes resource name such as "
                             f"nvidia.com/gpu, got '{self.gpu_resource}'")


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
    training: TrainingConfig = field(default_factory=TrainingConfig)
    beam_args: tuple[str, ...] = ()
    enable_cache: bool = True
    vertex: VertexConfig | None = None
    kubeflow: KubeflowConfig | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.accuracy_gate <= 1.0:
            raise ValueError(f"accuracy_gate must be in [0, 1], got {self.accuracy_gate}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.vertex is not None and self.kubeflow is not None:
            raise ValueError("a pipeline targets Vertex AI or Kubeflow Pipelines, not both")
