"""The one module that knows which software stack the project runs on; nothing else checks
versions.

Two stacks share this codebase:

- legacy: TFX 1.16, TensorFlow 2.16, Python 3.10, protobuf 3 (`requirements.lock`). TFX 1.16
  supports Python < 3.11 only, which reached end of life in October 2026.
- current: TFX 1.21, TensorFlow 2.21, Python 3.13, protobuf 6 (`requirements-current.lock`).
  TFDV 1.21's wheels are tagged manylinux_2_39, so it installs only where glibc >= 2.39
  (Debian 13, Ubuntu 24.04 and later).

What differs between them, and how each difference is handled here:

- Keras: both train on Keras 2 (`tf_keras`), because TFX, TFT and TFMA of both releases are
  built on it; `components/__init__.py` sets TF_USE_LEGACY_KERAS=1 for every process, and the
  SavedModels both write serve on either stack.
- TFMA: 0.52 (current) no longer re-exports its config protos at the top level (0.46 did);
  `tfma_config()` is the proto module both releases have.
- protobuf 3 vs 6 and the KFP IR: the project calls no API whose name changed between them
  (kfp's pipeline_spec_pb2 and text/JSON format are used the same way on both).
- kfp.local: the current stack runs it in its own environment, the legacy stack needs a
  second one (`kfp_local_python()`).
- TensorBoard: TensorFlow 2.21 no longer brings it; requirements-current.in names it.

Importing this module imports nothing but the standard library, so `make` can ask it which
lock fits the host before any environment exists (`python3 -m components.runtime.stack`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# TFDV 1.21 (and so TFX 1.21) publishes wheels for manylinux_2_39 and later only.
CURRENT_STACK_MIN_GLIBC = (2, 39)


@dataclass(frozen=True)
class Stack:
    """One pinned set of packages and the interpreter it is resolved for."""

    name: str
    lock: str  # relative to the repository root
    python: str  # major.minor the lock is resolved for
    description: str


LEGACY = Stack("legacy", "requirements.lock", "3.10", "TFX 1.16, TensorFlow 2.16, Python 3.10")
CURRENT = Stack(
    "current", "requirements-current.lock", "3.13", "TFX 1.21, TensorFlow 2.21, Python 3.13"
)
STACKS = {stack.name: stack for stack in (LEGACY, CURRENT)}
# kfp.local's own environment on the legacy stack (`make setup-kfp`).
KFP_VENV = ".venv-kfp"
CHECKOUT = Path(__file__).resolve().parents[2]
# `make setup` marks the environment with the stack it installed: `.venv/.installed-NAME`.
INSTALLED_MARK = ".installed-"
# The glibc to choose a stack for, instead of this host's (the runbook test plays both hosts).
HOST_GLIBC_VARIABLE = "CIFAR10_HOST_GLIBC"


def parse_glibc(text: str) -> tuple[int, int]:
    """(major, minor) from 'glibc 2.41' or '2.41'; ValueError naming the text otherwise."""
    version = text.split()[-1] if text.split() else ""
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        raise ValueError(
            f"cannot read a glibc version from {text!r}; name a stack ({', '.join(STACKS)}) "
            "or a glibc version such as 2.39"
        ) from None


def stack_for_glibc(glibc: str) -> tuple[Stack, str]:
    """The stack whose lock installs on a host with this glibc, and a one-line reason."""
    major, minor = parse_glibc(glibc)
    needed = ".".join(map(str, CURRENT_STACK_MIN_GLIBC))
    if (major, minor) >= CURRENT_STACK_MIN_GLIBC:
        return CURRENT, (
            f"stack: current ({CURRENT.description}; {CURRENT.lock}): "
            f"this host's glibc {major}.{minor} is >= {needed}"
        )
    return LEGACY, (
        f"stack: legacy ({LEGACY.description}; {LEGACY.lock}): this host's glibc "
        f"{major}.{minor} is < {needed}, which TFX 1.21's TFDV wheels need"
    )


def host_glibc() -> str:
    """This host's glibc version, e.g. '2.36' ($CIFAR10_HOST_GLIBC where set)."""
    if os.environ.get(HOST_GLIBC_VARIABLE):
        return os.environ[HOST_GLIBC_VARIABLE]
    reported = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    if not reported:
        raise RuntimeError("this host reports no glibc version; pass STACK=legacy or current")
    return reported.split()[-1]


def running_stack() -> Stack:
    """The stack of this process, told by its interpreter (each lock fits one Python)."""
    return CURRENT if sys.version_info >= (3, 11) else LEGACY


def kfp_local_python(checkout: Path) -> Path:
    """The Python that runs kfp.local (`pipeline.kfp_local`). The current stack's kfp 2.16 and
    protobuf 6 sit beside TFX 1.21, so it is this environment's own; TFX 1.16 needs
    protobuf < 5 and kfp's local orchestrator >= 6, so the legacy stack has a second
    environment for it (`make setup-kfp`)."""
    if running_stack() is CURRENT:
        return Path(sys.executable)
    return checkout / KFP_VENV / "bin" / "python"


def tpu_image_problem(stack: Stack, tpu_image: str, tpu_type: str = "v2-8") -> str:
    """Why a Cloud TPU training job compiled on `stack` could not train ('' if it can).

    Without `--tpu-image` the TPU pool would run the pipeline image, whose TensorFlow is the
    CPU build on both stacks: the file would compile and submit, and fail only on a paid TPU
    node. The legacy Dockerfile builds the TPU image (target tpu-trainer); PyPI's newest
    `tensorflow-tpu` is 2.20 and TFX 1.21 pins TensorFlow 2.21, so the current stack has no
    TPU stage (Dockerfile.current): training there needs an image the user built."""
    if tpu_image:
        return ""
    needs = (
        f"--tpu-type {tpu_type} trains on a Cloud TPU, which needs the TPU trainer image: "
        "add --tpu-image IMAGE"
    )
    instead = "or train on CPU/GPU workers with --worker-machine-type"
    if stack is CURRENT:
        return (
            f"{needs} (a TPU build of TensorFlow 2.21, which PyPI does not have and "
            f"Dockerfile.current does not build: docs/stacks.md), {instead}, or compile "
            "on the legacy stack"
        )
    return f"{needs} (Dockerfile target tpu-trainer), {instead}"


def tfma_config() -> ModuleType:
    """TFMA's EvalConfig protos (EvalConfig, MetricConfig, thresholds), on both stacks."""
    from tensorflow_model_analysis.proto import config_pb2

    return config_pb2


def installed_stack(checkout: Path = CHECKOUT) -> Stack | None:
    """The stack `make setup` last installed in this checkout's .venv, if any."""
    marks = sorted((checkout / ".venv").glob(INSTALLED_MARK + "*"))
    names = [mark.name.removeprefix(INSTALLED_MARK) for mark in marks]
    return STACKS[names[0]] if len(names) == 1 and names[0] in STACKS else None


def choose(requested: str = "", checkout: Path = CHECKOUT) -> tuple[Stack, str]:
    """The stack a user named (`make STACK=legacy`), else the one this checkout was set up
    with (so that no later `make` target silently installs the other), else the one that
    fits this host."""
    if not requested:
        installed = installed_stack(checkout)
        if installed is not None:
            return installed, (
                f"stack: {installed.name} ({installed.description}; {installed.lock}): "
                f"this checkout's .venv was set up with it (`make STACK=NAME setup` switches)"
            )
        return stack_for_glibc(host_glibc())
    if requested in STACKS:
        stack = STACKS[requested]
        return stack, f"stack: {stack.name} ({stack.description}; {stack.lock}): STACK={requested}"
    return stack_for_glibc(requested)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m components.runtime.stack [legacy|current|GLIBC]`: prints the stack's name, lock
    and Python on stdout (for make) and the reason on stderr."""
    args = sys.argv[1:] if argv is None else argv
    try:
        stack, reason = choose(args[0] if args else "")
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(stack.name, stack.lock, stack.python)
    print(reason, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
