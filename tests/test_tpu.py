"""Cloud TPU names -> Vertex worker pools, checked with google-cloud-aiplatform's own types;
steps_per_execution and the input hosts of a slice as pure decisions."""

import pytest
from google.cloud.aiplatform_v1.types import (
    AcceleratorType,
    CustomJobSpec,
    MachineSpec,
    WorkerPoolSpec,
)

from components.trainer import tpu_runtime
from pipeline.settings import tpu

# What Vertex expects for each name (Vertex custom training docs: TPU v2/v3 as cloud-tpu with
# 8 accelerators; TPU v5e as ct5lp-hightpu-{1,4,8}t with no accelerator fields).
EXPECTED = {
    "v2-8": ("cloud-tpu", AcceleratorType.TPU_V2, 8),
    "v3-8": ("cloud-tpu", AcceleratorType.TPU_V3, 8),
    "TPU_V2": ("cloud-tpu", AcceleratorType.TPU_V2, 8),
    "TPU_V3": ("cloud-tpu", AcceleratorType.TPU_V3, 8),
    "v5litepod-1": ("ct5lp-hightpu-1t", AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED, 0),
    "v5litepod-4": ("ct5lp-hightpu-4t", AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED, 0),
    "v5litepod-8": ("ct5lp-hightpu-8t", AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED, 0),
}
# Multi-host v5e slices: 4-chip hosts, the slice's shape as tpu_topology (chips, topology, hosts).
MULTI_HOST = {
    "v5litepod-16": (16, "4x4", 4),
    "v5litepod-32": (32, "4x8", 8),
    "v5litepod-64": (64, "8x8", 16),
    "v5litepod-128": (128, "8x16", 32),
    "v5litepod-256": (256, "16x16", 64),
}
for _name in MULTI_HOST:
    EXPECTED[_name] = ("ct5lp-hightpu-4t", AcceleratorType.ACCELERATOR_TYPE_UNSPECIFIED, 0)


def test_every_accepted_name_is_checked_here():
    assert set(tpu.ACCEPTED_NAMES) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_builds_a_valid_vertex_worker_pool(name):
    machine_type, accelerator, count = EXPECTED[name]
    spec = CustomJobSpec(
        worker_pool_specs=[
            WorkerPoolSpec(
                machine_spec=MachineSpec(**tpu.tpu_worker(name).machine_spec()),
                replica_count=1,
                container_spec={"image_uri": "img"},
            )
        ]
    )
    machine = spec.worker_pool_specs[0].machine_spec
    assert machine.machine_type == machine_type
    assert machine.accelerator_type == accelerator
    assert machine.accelerator_count == count
    chips, topology, hosts = MULTI_HOST.get(name, (None, "", 1))
    assert machine.tpu_topology == topology
    assert tpu.tpu_worker(name).hosts == hosts
    if chips:
        assert tpu.tpu_worker(name).replicas == chips
        rows, cols = map(int, topology.split("x"))
        assert rows * cols == chips == 4 * hosts  # 4 chips per ct5lp-hightpu-4t host


@pytest.mark.parametrize(
    "name",
    [
        "v2-32",
        "v3-32",
        "v3-8x",
        "v4-8",
        "v5litepod-2",
        "v5litepod-512",
        "v5p-8",
        "v6e-8",
        "TPU_V5_LITEPOD",
        "tpu_v2",
        "",
    ],
)
def test_names_vertex_does_not_offer_for_tensorflow_are_refused_with_the_list(name):
    with pytest.raises(ValueError) as err:
        tpu.tpu_worker(name)
    assert f"--tpu-type '{name}'" in str(err.value)
    for accepted in tpu.ACCEPTED_NAMES:
        assert accepted in str(err.value)


def test_core_count_must_agree_with_the_tpu():
    assert tpu.tpu_worker("TPU_V2", 8).name == "v2-8"
    assert tpu.tpu_worker("v5litepod-4", 4).replicas == 4
    with pytest.raises(ValueError, match="--tpu-cores 32 does not match --tpu-type TPU_V3"):
        tpu.tpu_worker("TPU_V3", 32)


def test_steps_per_execution_only_on_tpu_and_never_past_an_epoch():
    assert tpu_runtime.steps_per_execution("tpu", 1000) == tpu_runtime.TPU_STEPS_PER_EXECUTION
    assert tpu_runtime.steps_per_execution("tpu", 5) == 5
    for kind in ("mirrored", "default", "multi_worker"):
        assert tpu_runtime.steps_per_execution(kind, 1000) == 1


def test_input_hosts_reads_the_strategy():
    from components.trainer.keras import tf

    assert tpu_runtime.input_hosts(tf.distribute.get_strategy()) == 1

    class FakeTpuExtended:
        num_hosts = 2

    class FakeTpuStrategy:
        extended = FakeTpuExtended()

    assert tpu_runtime.input_hosts(FakeTpuStrategy()) == 2
