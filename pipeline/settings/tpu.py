"""Cloud TPU names, as users see them in Cloud docs, mapped to the Vertex AI worker pool
that provides them.

Vertex requests TPU v2/v3 as machine type `cloud-tpu` with an accelerator type and 8 cores
(Vertex AI custom training offers no v2/v3 pod slices), and TPU v5e (v5litepod) as its own
machine types `ct5lp-hightpu-{1,4,8}t` with no accelerator fields. A multi-host v5e slice is
`ct5lp-hightpu-4t` (4 chips per host) with a `tpu_topology` of the whole slice (4x4 is 16
chips on 4 hosts) in a pool of one replica: Vertex provisions the hosts of the slice.
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
    topology: str = ""  # Vertex's tpu_topology of a multi-host slice, e.g. 4x4
    hosts: int = 1  # TPU VMs in the slice: each feeds its chips from its own input pipeline

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
        if self.topology:
            spec["tpu_topology"] = self.topology
        return spec


TPU_WORKERS = {
    worker.name: worker
    for worker in (
        TpuWorker("v2-8", "cloud-tpu", 8, "TPU_V2", 8),
        TpuWorker("v3-8", "cloud-tpu", 8, "TPU_V3", 8),
        TpuWorker("v5litepod-1", "ct5lp-hightpu-1t", 1, pjrt=True),
        TpuWorker("v5litepod-4", "ct5lp-hightpu-4t", 4, pjrt=True),
        TpuWorker("v5litepod-8", "ct5lp-hightpu-8t", 8, pjrt=True),
        *(
            TpuWorker(f"v5litepod-{chips}", "ct5lp-hightpu-4t", chips, pjrt=True, **shape)
            for chips, shape in (
                (16, {"topology": "4x4", "hosts": 4}),
                (32, {"topology": "4x8", "hosts": 8}),
                (64, {"topology": "8x8", "hosts": 16}),
                (128, {"topology": "8x16", "hosts": 32}),
                (256, {"topology": "16x16", "hosts": 64}),
            )
        ),
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
            f"Vertex AI; choose one of {', '.join(ACCEPTED_NAMES)} (Vertex AI custom "
            "training has no TPU v2/v3 pod slices; v5e slices above 8 chips are multi-host)"
        )
    if cores is not None and cores != worker.replicas:
        raise ValueError(
            f"--tpu-cores {cores} does not match --tpu-type {name}, which has "
            f"{worker.replicas}; leave --tpu-cores out"
        )
    return worker
