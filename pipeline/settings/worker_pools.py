"""The Vertex AI CustomJob worker pools of the Trainer: one Cloud TPU (a single host, or a
multi-host slice that Vertex provisions as one replica), or CPU/GPU machines as a chief
pool of one and a worker pool of the rest. Vertex sets each replica's TF_CONFIG (task type
`chief` or `worker`), TFX's Vertex trainer runs the same executor in every pool, and the
Trainer's run_fn finds its place among them from that."""

from __future__ import annotations

from typing import Any

from pipeline.settings.config import VertexConfig
from pipeline.settings.tpu import tpu_worker


def _gpu_machine_spec(vertex: VertexConfig) -> dict[str, Any]:
    spec: dict[str, Any] = {"machine_type": vertex.worker_machine_type}
    if vertex.worker_gpus:
        spec["accelerator_type"] = vertex.worker_gpu_type
        spec["accelerator_count"] = vertex.worker_gpus
    return spec


def worker_pool_specs(vertex: VertexConfig) -> list[dict[str, Any]]:
    """`job_spec.worker_pool_specs` in the JSON field names of aiplatform's WorkerPoolSpec
    (TFX's Vertex trainer fills in each pool's command)."""
    container: dict[str, Any] = {"image_uri": vertex.tpu_image or vertex.image}
    if vertex.worker_machine_type:
        machine = _gpu_machine_spec(vertex)
        chief = {"machine_spec": machine, "replica_count": 1, "container_spec": container}
        if vertex.workers == 1:
            return [chief]
        workers = {**chief, "replica_count": vertex.workers - 1}
        return [chief, workers]
    worker = tpu_worker(vertex.tpu_type)
    if worker.container_env():
        container["env"] = worker.container_env()
    return [
        {"machine_spec": worker.machine_spec(), "replica_count": 1, "container_spec": container}
    ]
