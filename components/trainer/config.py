"""What the Trainer's run_fn is configured with: the training part of the pipeline's
frozen configuration. It lives with the trainer (not in `pipeline/`) because the
Trainer's process reads it back from the component's custom_config."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# custom_config key under which the Trainer component carries its TrainingConfig; the
# other keys of custom_config belong to TFX (the Vertex training job settings).
CUSTOM_CONFIG_KEY = "training"
# custom_config key of the folder under which checkpoints are kept, keyed by inputs and
# config: the pipeline sets <pipeline_root>/Trainer/checkpoints, the same for every job, so
# a retried Trainer resumes.
CHECKPOINT_ROOT_KEY = "checkpoint_root"
# custom_config key of how many local worker processes run the Trainer step
# (`run --workers N`, components/trainer/local_workers.py); absent: one, in-process.
LOCAL_WORKERS_KEY = "local_workers"
# custom_config key of the serving folder's model name (`<serving_dir>/<model_name>/`), which
# the warmup records' PredictRequests name (components/serving/warmup.py).
SERVING_MODEL_NAME_KEY = "serving_model_name"

STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "default")
MODELS = ("airbench", "airbench94", "seed_cnn")
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
    # Start from the served model's weights (the Trainer's base_model) with the fine-tuning
    # schedule of components/trainer/warm_start.py; from scratch when there is none to fit.
    warm_start: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model '{self.model}'; choose one of {', '.join(MODELS)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"unknown strategy '{self.strategy}'; choose one of {', '.join(STRATEGIES)}"
            )
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"unknown precision '{self.precision}'; choose one of {', '.join(PRECISIONS)}"
            )
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
    def from_custom_config(cls, values: dict[str, Any]) -> TrainingConfig:
        """The inverse of `to_custom_config`; unknown keys are an error, never dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(
                f"unknown training setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(names))}"
            )
        return cls(**values)

    @classmethod
    def from_trainer_custom_config(cls, custom_config: dict[str, Any] | None) -> TrainingConfig:
        """The TrainingConfig inside a Trainer component's whole custom_config."""
        return cls.from_custom_config((custom_config or {}).get(CUSTOM_CONFIG_KEY, {}))
