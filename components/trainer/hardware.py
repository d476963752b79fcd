"""What the training hardware can do, and the precision that follows from it.

`--precision auto` must not pick bf16 where it is emulated: on an AVX2-only CPU
(AMD Zen 3) the default model trained at 313-436 images/s in float32 and 51 in
mixed_bfloat16, while on a CPU with AVX512_BF16 (AMD Zen 4) bf16 was 1.5x faster
than float32. The decision is a pure function of the reported facts
(`decide_precision`), so it is tested for every kind of machine on any machine;
`detect` reads the facts of this one.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

# CPU features (Linux /proc/cpuinfo names) that give oneDNN native bf16 dot products.
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# Features worth recording with a figure: they decide which oneDNN kernels run.
REPORTED_CPU_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_bf16",
    "amx_tile",
)
# ONEDNN_MAX_CPU_ISA values that still allow oneDNN's native bf16 kernels; any other value
# (SSE41, AVX, AVX2, AVX512_CORE, ...) caps oneDNN below them, and bf16 would be emulated.
_BF16_ISAS = {
    "ALL",
    "DEFAULT",
    "AVX512_CORE_BF16",
    "AVX512_CORE_FP16",
    "AVX10_1_512",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512_AMX_FP16",
}
# ONEDNN_MAX_CPU_ISA values below AVX512_CORE, where oneDNN has no bf16 convolution at all
# (AVX2_VNNI_2 has one). TensorFlow 2.16 hands bf16 ops to oneDNN on any CPU with AVX512F,
# so that cap on such a CPU makes bf16 training abort in its first convolution ("could not
# create a primitive descriptor"); on a CPU without AVX512F (AMD Zen 3) TensorFlow keeps
# bf16 in its own kernels, where it is emulated and slow but runs.
_NO_BF16_ISAS = {"SSE41", "AVX", "AVX2", "AVX2_VNNI"}

# First GPU generation with fast bf16 (Ampere) and with fast fp16 tensor cores (Volta).
BF16_GPU_CAPABILITY = (8, 0)
FP16_GPU_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class Hardware:
    """The facts the precision decision reads; recorded in the run summary."""

    accelerator: str  # "tpu", "gpu" or "cpu": what the training strategy runs on
    cpu_model: str = ""
    cpu_flags: tuple[str, ...] = ()  # the REPORTED_CPU_FLAGS this CPU has
    onednn_max_isa: str = ""  # ONEDNN_MAX_CPU_ISA, when set
    gpu_name: str = ""
    gpu_compute_capability: tuple[int, int] | None = None

    def to_json(self) -> dict:
        facts = {
            "accelerator": self.accelerator,
            "cpu_model": self.cpu_model,
            "cpu_flags": list(self.cpu_flags),
        }
        if self.onednn_max_isa:
            facts["onednn_max_isa"] = self.onednn_max_isa
        if self.gpu_name:
            facts["gpu_name"] = self.gpu_name
            facts["gpu_compute_capability"] = ".".join(map(str, self.gpu_compute_capability or ()))
        return facts


class PrecisionError(ValueError):
    """The requested precision cannot run on this hardware; the message says why."""


@dataclass(frozen=True)
class PrecisionChoice:
    policy: str  # a Keras mixed-precision policy name
    reason: str  # one line: what decided it
    hardware: Hardware = field(compare=False)


def cpu_has_native_bf16(hardware: Hardware) -> bool:
    if not any(flag in hardware.cpu_flags for flag in NATIVE_BF16_CPU_FLAGS):
        return False
    return not hardware.onednn_max_isa or hardware.onednn_max_isa.upper() in _BF16_ISAS


def cpu_bf16_blocked(hardware: Hardware) -> str:
    """Why bf16 cannot train on this CPU at all, or "" where it can (natively or not)."""
    isa = hardware.onednn_max_isa.upper()
    if hardware.accelerator == "cpu" and "avx512f" in hardware.cpu_flags and isa in _NO_BF16_ISAS:
        return (
            f"mixed_bfloat16 cannot train on CPU {hardware.cpu_model or '?'} with "
            f"ONEDNN_MAX_CPU_ISA={hardware.onednn_max_isa}: TensorFlow sends bf16 to oneDNN "
            "on AVX-512 CPUs and oneDNN has no bf16 convolution below AVX512_CORE; "
            "use --precision float32 or raise the cap"
        )
    return ""


def decide_precision(requested: str, hardware: Hardware) -> PrecisionChoice:
    """`requested` unless it is "auto"; auto is bf16 on TPU, bf16 or fp16 on GPUs that
    compute them natively, and bf16 on CPU only with native bf16 (else float32).
    Raises PrecisionError for bf16 where it cannot run (`cpu_bf16_blocked`)."""
    blocked = cpu_bf16_blocked(hardware) if requested == "mixed_bfloat16" else ""
    if blocked:
        raise PrecisionError(blocked)
    if requested != "auto":
        return PrecisionChoice(requested, f"--precision {requested}", hardware)
    if hardware.accelerator == "tpu":
        return PrecisionChoice("mixed_bfloat16", "TPU: bf16 is native", hardware)
    if hardware.accelerator == "gpu":
        capability = hardware.gpu_compute_capability or (0, 0)
        shown = (
            f"GPU {hardware.gpu_name or '?'} (compute capability {capability[0]}.{capability[1]})"
        )
        if capability >= BF16_GPU_CAPABILITY:
            return PrecisionChoice("mixed_bfloat16", f"{shown}: native bf16", hardware)
        if capability >= FP16_GPU_CAPABILITY:
            return PrecisionChoice("mixed_float16", f"{shown}: fp16 tensor cores", hardware)
        return PrecisionChoice("float32", f"{shown}: no fast half precision", hardware)
    shown = f"CPU {hardware.cpu_model or '?'}"
    if cpu_has_native_bf16(hardware):
        return PrecisionChoice(
            "mixed_bfloat16",
            f"{shown}: native bf16 "
            f"({', '.join(f for f in NATIVE_BF16_CPU_FLAGS if f in hardware.cpu_flags)})",
            hardware,
        )
    if any(flag in hardware.cpu_flags for flag in NATIVE_BF16_CPU_FLAGS):
        return PrecisionChoice(
            "float32",
            f"{shown}: ONEDNN_MAX_CPU_ISA={hardware.onednn_max_isa} "
            "rules out oneDNN's bf16 kernels",
            hardware,
        )
    return PrecisionChoice("float32", f"{shown}: no native bf16 (bf16 would be emulated)", hardware)


def read_cpu_facts(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, tuple[str, ...]]:
    """(model name, reported flags) of this CPU; flags are empty where /proc/cpuinfo is
    missing (macOS, Windows), which makes `auto` choose float32."""
    model, flags = "", set()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return (
        model or platform.processor() or platform.machine(),
        tuple(f for f in REPORTED_CPU_FLAGS if f in flags),
    )


def detect(accelerator: str) -> Hardware:
    """Facts of this machine for a strategy running on `accelerator` (tpu, gpu or cpu)."""
    model, flags = read_cpu_facts()
    gpu_name, capability = "", None
    if accelerator == "gpu":
        from components.trainer.keras import tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            gpu_name = details.get("device_name", "")
            capability = details.get("compute_capability")
    return Hardware(
        accelerator=accelerator,
        cpu_model=model,
        cpu_flags=flags,
        onednn_max_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        gpu_name=gpu_name,
        gpu_compute_capability=capability,
    )
