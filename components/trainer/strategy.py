"""tf.distribute strategy factory, chosen by configuration rather than hard-coded."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from absl import logging

from components.trainer import hardware
from components.trainer.keras import tf

TPU_ENV_VARS = ("TPU_NAME", "COLAB_TPU_ADDR")


class StrategyError(RuntimeError):
    """The requested strategy cannot run here; the message says why and what to pass."""


def configure_cpu_replicas(count: int) -> None:
    """Splits the host CPU into `count` logical devices (the multi-replica path of a
    TPU v2-8, without accelerators). Must run before TensorFlow initialises devices."""
    if count <= 1:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * count
    current = tf.config.get_logical_device_configuration(cpu)
    if current and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as err:
        raise StrategyError(
            f"cannot split the CPU into {count} replicas: TensorFlow devices were already "
            f"initialised in this process ({err})"
        ) from err


def _tpu_address(tpu: str) -> str:
    if tpu:
        return tpu
    for name in TPU_ENV_VARS:
        value = os.environ.get(name, "")
        if value:
            return value if "://" in value or name != "COLAB_TPU_ADDR" else f"grpc://{value}"
    return ""


def _tpu_strategy(tpu: str) -> tf.distribute.Strategy:
    address = _tpu_address(tpu)
    if not address:
        raise StrategyError(
            "strategy 'tpu' needs a TPU: pass --tpu NAME, --tpu grpc://HOST:8470 or "
            f"--tpu local (on a TPU VM), or set one of {', '.join(TPU_ENV_VARS)}"
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
        if address != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise StrategyError(f"no TPU reachable at '{address}': {err}") from err


def create_strategy(name: str, tpu: str = "", cpu_replicas: int = 0) -> tf.distribute.Strategy:
    """Returns the strategy for `name`: auto, tpu, mirrored, multi_worker or default.

    auto picks a TPU when one is configured (argument or environment), else all
    GPUs when there are several, else `cpu_replicas` logical CPUs when > 1, else
    the default single-device strategy.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if name == "auto":
        if _tpu_address(tpu):
            name = "tpu"
        elif len(gpus) > 1 or cpu_replicas > 1:
            name = "mirrored"
        else:
            name = "default"
    if name == "tpu":
        strategy = _tpu_strategy(tpu)
    elif name == "mirrored":
        if gpus:
            devices = [d.name for d in tf.config.list_logical_devices("GPU")]
        else:
            configure_cpu_replicas(cpu_replicas)
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(devices)
    elif name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise StrategyError("strategy 'multi_worker' needs the TF_CONFIG environment variable")
        json.loads(os.environ["TF_CONFIG"])  # fail early on malformed JSON
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif name == "default":
        strategy = tf.distribute.get_strategy()
    else:
        raise StrategyError(f"unknown strategy '{name}'")
    logging.info(
        "Using %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync
    )
    return strategy


def strategy_kind(strategy: tf.distribute.Strategy) -> str:
    """Short name of a strategy for summaries: tpu, mirrored, multi_worker or default."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "multi_worker"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "mirrored"
    return "default"


def accelerator_of(strategy: tf.distribute.Strategy) -> str:
    """tpu, gpu or cpu: what the strategy's replicas compute on."""
    if strategy_kind(strategy) == "tpu":
        return "tpu"
    if strategy_kind(strategy) == "default":  # runs on the first GPU when there is one
        return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    devices = strategy.extended.worker_devices
    return "gpu" if any("GPU" in device.upper() for device in devices) else "cpu"


def choose_precision(precision: str, strategy: tf.distribute.Strategy) -> hardware.PrecisionChoice:
    """The mixed-precision policy for `precision` (auto: from this machine's hardware)."""
    return hardware.decide_precision(precision, hardware.detect(accelerator_of(strategy)))


@dataclass(frozen=True)
class Worker:
    """Where this process stands in a multi-worker job: worker `index` of `count`, the
    chief being 0. Only the chief writes what outlives the job (model, summary, the
    checkpoints to resume from); the others do the same work and write to scratch."""

    index: int = 0
    count: int = 1

    @property
    def is_chief(self) -> bool:
        return self.index == 0


def worker_position(cluster: dict[str, list[str]], task_type: str, task_id: int) -> Worker:
    """This task's place among the training tasks of a TF_CONFIG cluster: a `chief` task
    (as Vertex AI's first worker pool sets it) comes first, then the `worker` tasks; with
    no chief, worker 0 is the chief (MultiWorkerMirroredStrategy's own convention)."""
    chiefs, workers = len(cluster.get("chief", [])), len(cluster.get("worker", []))
    if task_type == "chief":
        return Worker(task_id, chiefs + workers)
    if task_type == "worker":
        return Worker(chiefs + task_id, chiefs + workers)
    raise StrategyError(
        f"TF_CONFIG task type '{task_type}' does not train here: MultiWorkerMirroredStrategy "
        "runs only chief and worker tasks"
    )


def worker_of(strategy: tf.distribute.Strategy) -> Worker:
    """This process's Worker: from the cluster under MultiWorkerMirroredStrategy, else the
    only one (a TPU slice, even a multi-host one, is driven by one client process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if strategy_kind(strategy) != "multi_worker" or resolver is None:
        return Worker()
    cluster = resolver.cluster_spec().as_dict()
    if not cluster:
        return Worker()
    return worker_position(cluster, resolver.task_type, int(resolver.task_id))
