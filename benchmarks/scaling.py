"""On-paper data-parallel efficiency on TPU cores, from what a run measured: the forward FLOPs
per image and the bytes of one gradient (`run_summary.json`). No TPU was used: the TPU's
throughput, its utilisation by this network and the interconnect are assumptions, printed
with the result, so the figures can be redone with other ones.

Model: weak scaling at a fixed per-core batch (the Trainer's 128 on TPU). One step computes
3 x forward FLOPs x batch per core, then all-reduces the gradient with a ring: 2 (n-1) / n of
the gradient's bytes through each chip's link plus 2 (n-1) hops of latency, not overlapped
with compute. Efficiency = compute / (compute + all-reduce).

    python -m benchmarks.scaling outputs/run_summary.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Tpu:
    name: str
    core_tflops: float  # bf16 peak per core
    utilisation: float  # assumed share of the peak this small CNN reaches
    link_gbytes: float  # assumed effective ring bandwidth per chip, GB/s
    hop_microseconds: float  # assumed latency per ring hop


# Peak figures from Cloud TPU's published per-chip numbers (v2: 45, v3: 123 TFLOP/s bf16 per
# chip, 2 cores each); the rest are round assumptions, not measurements.
TPUS = (
    Tpu("v2", 22.5, 0.25, 70.0, 2.0),
    Tpu("v3", 61.5, 0.25, 70.0, 2.0),
)


def efficiency(
    tpu: Tpu, cores: int, forward_flops: float, gradient_bytes: int, per_core_batch: int = 128
) -> dict[str, float]:
    """Milliseconds of compute and of all-reduce per step on `cores` cores, and their ratio."""
    compute = 3 * forward_flops * per_core_batch / (tpu.core_tflops * 1e12 * tpu.utilisation)
    steps = 2 * (cores - 1)
    allreduce = (
        steps / cores * gradient_bytes / (tpu.link_gbytes * 1e9)
        + steps * tpu.hop_microseconds * 1e-6
    )
    return {
        "compute_ms": round(compute * 1e3, 3),
        "allreduce_ms": round(allreduce * 1e3, 3),
        "efficiency": round(compute / (compute + allreduce), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_summary", type=Path)
    parser.add_argument("--cores", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args(argv)
    summary = json.loads(args.run_summary.read_text())
    forward, gradient = summary["forward_flops_per_image"], summary["gradient_bytes"]
    print(f"forward {forward / 1e6:.1f} MFLOP/image, gradient {gradient:,} bytes")
    for tpu in TPUS:
        for cores in args.cores:
            result = efficiency(tpu, cores, forward, gradient)
            print(json.dumps({"cores": cores, **vars(tpu), **result}))


if __name__ == "__main__":
    main()
