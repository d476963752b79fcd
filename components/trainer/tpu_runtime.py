"""Decisions that depend on running on a TPU: how many steps one TPU execution runs, and
how many hosts (input pipelines) feed the slice."""

from __future__ import annotations

from components.trainer.keras import tf

# Steps per TPU execution: one host round trip per this many steps instead of per step.
# Keras still ends every epoch on its boundary (the last execution of an epoch is shorter).
TPU_STEPS_PER_EXECUTION = 32


def steps_per_execution(kind: str, steps_per_epoch: int) -> int:
    """How many training steps Keras runs per `tf.function` call: several on TPU (where each
    call is a host-to-device round trip), one elsewhere (per-step callbacks stay exact)."""
    if kind != "tpu":
        return 1
    return max(1, min(TPU_STEPS_PER_EXECUTION, steps_per_epoch))


def input_hosts(strategy: tf.distribute.Strategy) -> int:
    """How many hosts feed the strategy's replicas (1 for everything but a TPU pod slice)."""
    num_hosts = getattr(strategy.extended, "num_hosts", 1)
    return int(num_hosts) if isinstance(num_hosts, int) else 1
