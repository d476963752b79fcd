"""Flags and helpers that more than one subcommand uses: the training and gate options (their
defaults read from the config dataclasses, never restated) and the one-file-written reply."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from components.trainer.config import MODELS, PRECISIONS, STRATEGIES, TrainingConfig
from pipeline.common import exit_status
from pipeline.settings.config import PipelineConfig


def _default(config_class: type, name: str):
    """A config dataclass's default: the CLI never restates it."""
    return next(f.default for f in dataclasses.fields(config_class) if f.name == name)


def add_training_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training")
    group.add_argument(
        "--model",
        choices=MODELS,
        default=_default(TrainingConfig, "model"),
        help="airbench: the fast default (widths 32/64/128, 5 epochs); airbench94: the "
        "wider preset for more time or a TPU (64/256/256, 10 epochs, batch 1,024); seed_cnn: "
        "the classic Colab TPU recipe (default: %(default)s)",
    )
    group.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=_default(TrainingConfig, "strategy"),
        help="tf.distribute strategy (auto: TPU if configured, else several "
        "GPUs or --cpu-replicas, else one device)",
    )
    group.add_argument(
        "--tpu", default="", help="TPU name, grpc://HOST:8470 (Colab) or 'local' (TPU VM)"
    )
    group.add_argument(
        "--cpu-replicas",
        type=int,
        metavar="N",
        default=_default(TrainingConfig, "cpu_replicas"),
        help="split the CPU into N logical devices for MirroredStrategy",
    )
    group.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=1,
        help="train with N worker processes (MultiWorkerMirroredStrategy): run: N local "
        "processes on loopback; compile --target vertex: a chief and N-1 workers of "
        "--worker-machine-type; compile --target kubeflow: 1 only, the Trainer is one pod "
        "(default: %(default)s)",
    )
    group.add_argument("--epochs", type=int, help="default: the model recipe's")
    group.add_argument(
        "--per-replica-batch-size", type=int, help="default: 128 on TPU, the recipe's elsewhere"
    )
    group.add_argument(
        "--learning-rate",
        type=float,
        help="peak learning rate at the recipe's reference batch; scaled with the global batch",
    )
    group.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=_default(TrainingConfig, "precision"),
        help="auto: bf16 on TPU; bf16/fp16 on GPUs that have it; bf16 on CPUs with "
        "native bf16 (AVX512_BF16, AMX), else float32",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=_default(TrainingConfig, "seed"),
        help="seeds weights, shuffling and augmentation (default: %(default)s)",
    )
    group.add_argument(
        "--warm-start",
        action="store_true",
        help="start from the served model's weights with a shorter fine-tuning schedule; "
        "from scratch (and saying why) when nothing is served or its network differs",
    )


def training_config(args: argparse.Namespace) -> TrainingConfig:
    """The Trainer's settings; several workers train with multi_worker (auto becomes it, any
    other strategy is refused by the configuration that checks it)."""
    multi = args.workers > 1 and args.strategy == "auto"
    return TrainingConfig(
        model=args.model,
        strategy="multi_worker" if multi else args.strategy,
        tpu=args.tpu,
        cpu_replicas=args.cpu_replicas,
        epochs=args.epochs,
        per_replica_batch_size=args.per_replica_batch_size,
        learning_rate=args.learning_rate,
        precision=args.precision,
        seed=args.seed,
        warm_start=args.warm_start,
    )


def fraction(text: str) -> float:
    """A share or margin from 0 to 1, both included (argparse names the flag)."""
    value = float(text)
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1, got {text}")
    return value


def open_fraction(text: str) -> float:
    """A share strictly between 0 and 1 (a split of the records: neither side empty)."""
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be more than 0 and less than 1, got {text}")
    return value


def keep_versions(args: argparse.Namespace) -> int:
    """--keep-versions N, checked: the serving folder keeps at least the served version and
    the one a rollback would serve. ValueError naming the flag (a one-line refusal)."""
    from pipeline.settings.config import MIN_KEEP_VERSIONS

    if args.keep_versions < MIN_KEEP_VERSIONS:
        raise ValueError(
            f"--keep-versions: must be at least {MIN_KEEP_VERSIONS} (the served version and the "
            f"one before it), got {args.keep_versions}"
        )
    return args.keep_versions


def add_serving_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("serving folder")
    group.add_argument(
        "--keep-versions",
        type=int,
        metavar="N",
        default=_default(PipelineConfig, "keep_versions"),
        help="after a push, remove the oldest versions beyond N (never the served one, the one "
        "before it, or one a rollback went back to; default: %(default)s)",
    )


def add_gate_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data and evaluation")
    group.add_argument(
        "--eval-fraction",
        type=open_fraction,
        default=_default(PipelineConfig, "eval_fraction"),
        help="share of training records carved out for eval when the "
        "source has no test batch (class-balanced, deterministic)",
    )
    group.add_argument(
        "--accuracy-gate",
        type=fraction,
        default=_default(PipelineConfig, "accuracy_gate"),
        help="minimum eval accuracy for the model to be blessed and pushed (default: %(default)s)",
    )
    group.add_argument(
        "--max-regression",
        type=fraction,
        default=_default(PipelineConfig, "max_regression"),
        help="how far accuracy may fall below the baseline model (default: %(default)s)",
    )
    group.add_argument(
        "--max-class-drop",
        type=fraction,
        default=_default(PipelineConfig, "max_class_drop"),
        help="how far one class's accuracy on the served version's reference images may "
        "fall below the served model's (default: %(default)s)",
    )
    group.add_argument(
        "--accept-drift",
        action="store_true",
        help="train even if the data drifted from what the served model was trained on "
        "(recorded in the run summary and report); skew between the splits still stops",
    )
    group.add_argument(
        "--accept-labels",
        action="store_true",
        help="train even if the served model disagrees with the new labels (exchanged "
        "classes, many wrong labels; recorded in the run summary)",
    )
    group.add_argument(
        "--accept-duplicates",
        action="store_true",
        help="train even if more than 1%% of the images are exact copies of another "
        "(recorded in the run summary)",
    )


def output_problem(path: Path) -> str:
    """Why a file cannot be written at `path` ('' when nothing is known against it), so that
    a command refuses before its slow part."""
    if path.is_dir():
        return f"{path}: is a folder; name a file in it"
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{path}: {existing} is a file, not a folder"
    return ""


def folder_problem(path: Path) -> str:
    """Why `path` cannot be (made) a folder: '' when it is one or can be made."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{path}: {existing} is a file, not a folder"
    return ""


def wrote(
    verb: str,
    write: Callable[[], Path],
    refused: type[Exception] | tuple[type[Exception], ...],
    target: Path | None = None,
) -> int:
    """A command that writes one file: its path when written, one line when `refused`, or
    when `target` cannot be written (a full disk, no permission)."""
    try:
        path = write()
    except refused as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except OSError as err:
        if target is None:
            raise
        print(f"error: {target}: cannot write it ({err.strerror or err})", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(f"{verb} {path}")
    return exit_status.OK
