"""Cloud TPU names, as users see them in Cloud docs, mapped to the Vertex AI worker pool
that provides them.

Vertex requests TPU v2/v3 as machine type `cloud-tpu` with an accelerator type and 8 cores,
and TPU v5e (v5litepod) as its own machine types `ct5lp-hightpu-{1,4,8}t` with no accelerator
fields. Only single-host slices are offered here: the Trainer feeds every replica from one
host's memory, so a multi-host slice would need per-host input sharding it does not do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TpuWorker:
    """One Vertex worker (one TPU host) for a Cloud TPU name."""

    name: str  # the Cloud TPU name, e.g. v2-8
    machine_type: str
    replicas: int  # TPU cores (v2/v3) or chips (v5e) that TPUStrategy trains on
    accelerator_type: str = ""  # empty: the machine type implies the TPU
    accelerator_count: int = 0
    pjrt: bool = False  # TensorFlow on TPU v5e runs on the PJRT runtime

    def container_env(self) -> list[dict[str, str]]:
        """Environment for the trainer container (the Dockerfile puts libtpu.so in /lib)."""
        if not self.pjrt:
            return []
        return [
            {"name": "NEXT_PLUGGABLE_DEVICE_USE_C_API", "value": "true"},
            {"name": "TF_PLUGGABLE_DEVICE_LIBRARY_PATH", "value": "/lib/libtpu.so"},
        ]

    def machine_spec(self) -> dict[str, Any]:
        """The `machine_spec` of a Vertex WorkerPoolSpec, in its JSON field names."""
        spec: dict[str, Any] = {"machine_type": self.machine_type}
        if self.accelerator_type:
            spec["accelerator_type"] = self.accelerator_type
            spec["accelerator_count"] = self.accelerator_count
        return spec


TPU_WORKERS = {
    worker.name: worker
    for worker in (
        TpuWorker("v2-8", "cloud-tpu", 8, "TPU_V2", 8),
        TpuWorker("v3-8", "cloud-tpu", 8, "TPU_V3", 8),
        TpuWorker("v5litepod-1", "ct5lp-hightpu-1t", 1, pjrt=True),
        TpuWorker("v5litepod-4", "ct5lp-hightpu-4t", 4, pjrt=True),
        TpuWorker("v5litepod-8", "ct5lp-hightpu-8t", 8, pjrt=True),
    )
}
# Vertex's accelerator enum names; Vertex offers them with exactly 8 cores.
VERTEX_ENUM_NAMES = {"TPU_V2": "v2-8", "TPU_V3": "v3-8"}
ACCEPTED_NAMES = (*TPU_WORKERS, *VERTEX_ENUM_NAMES)


def tpu_worker(name: str, cores: int | None = None) -> TpuWorker:
    """The worker for `--tpu-type NAME` (and `--tpu-cores`, which must agree with it).

    Raises ValueError, naming the accepted names, for anything else.
    """
    canonical = VERTEX_ENUM_NAMES.get(name, name)
    worker = TPU_WORKERS.get(canonical)
    if worker is None:
        raise ValueError(
            f"--tpu-type '{name}' is not offered here for TensorFlow training on "
            f"Vertex AI; choose one of {', '.join(ACCEPTED_NAMES)} (single-host "
            "slices only)"
        )
    if cores is not None and cores != worker.replicas:
        raise ValueError(
            f"--tpu-cores {cores} does not match --tpu-type {name}, which has "
            f"{worker.replicas}; leave --tpu-cores out"
        )
    return worker
