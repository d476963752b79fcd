"""What the Trainer reports about one training run (`training_summary.json` next to the
model), as a typed record shared by the trainer, which writes it, and the pipeline's
run summary, which reads it. No TensorFlow import: readers stay light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

Record = TypeVar("Record")


def strict_from_json(cls: type[Record], values: dict[str, Any], where: str) -> Record:
    """`cls(**values)` where a missing or an unknown field is an error naming it."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    required = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    missing, unknown = sorted(required - set(values)), sorted(set(values) - set(fields))
    if missing or unknown:
        raise ValueError(
            f"{where}: "
            + "; ".join(
                part
                for part in (
                    missing and f"missing {', '.join(missing)}",
                    unknown and f"unknown {', '.join(unknown)}",
                )
                if part
            )
        )
    return cls(**values)


@dataclass(frozen=True)
class TrainingSummary:
    model: str
    strategy: str  # tpu, mirrored, multi_worker or default
    replicas: int
    per_replica_batch_size: int
    global_batch_size: int
    epochs: int
    resumed_from_epoch: int  # epochs restored from a checkpoint of an earlier attempt
    # Unreadable checkpoints skipped on the way there: {"skipped": [{"checkpoint", "error"}],
    # "resumed_from_epoch": N}, or None when none was skipped.
    checkpoint_fallback: dict[str, Any] | None
    learning_rate: float
    precision: str  # the Keras mixed-precision policy trained with
    precision_reason: str  # what decided it (components/trainer/hardware.py)
    hardware: dict[str, Any]
    train_records: int
    eval_records: int
    forward_flops_per_image: int
    training_images_seen: int  # epochs x whole batches per epoch x global batch
    training_flops: int  # 3 x forward FLOPs x images seen (components/trainer/flops.py)
    load_seconds: float
    fit_seconds: float
    export_seconds: float
    trainer_seconds: float
    final_eval_accuracy_without_tta: float | None
    # Scaling facts (absent from summaries written before multi-worker training).
    workers: int = 1  # training processes (MultiWorkerMirroredStrategy), else 1
    steps_per_epoch: int | None = None
    step_seconds: float | None = None  # one training step, steady state
    allreduce_seconds: float | None = None  # one gradient all-reduce across the replicas
    gradient_bytes: int | None = None  # bytes of one gradient of every trainable weight
    # The served version folder a warm start began from (None: from scratch), and why a
    # requested warm start did not happen ('' when it did, or none was asked for).
    warm_start_source: str | None = None
    warm_start_note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, values: dict[str, Any], where: str = "training summary") -> TrainingSummary:
        return strict_from_json(cls, values, where)
