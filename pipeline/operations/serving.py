"""Which serving folder an operations command acts on: `--model-dir` (a serving folder, as
`predict` takes it: local, gs:// or s3://) or `--output-dir` (a run's folder, as `run` takes
it, whose pushes go to `<output-dir>/serving/cifar10`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.settings.config import DEFAULT_OUTPUT_DIR, PipelineConfig

MODEL_NAME = PipelineConfig.__dataclass_fields__["model_name"].default


def add_folder_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--output-dir",
        metavar="DIR",
        help=f"a run's folder, as `run` takes it (default: {DEFAULT_OUTPUT_DIR}); its "
        f"versions are under DIR/serving/{MODEL_NAME}",
    )
    where.add_argument(
        "--model-dir",
        metavar="DIR",
        help="a serving folder, as `predict` takes it (local, gs:// or s3://)",
    )


def serving_model_dir(args: argparse.Namespace) -> str:
    """The serving folder the command acts on."""
    if args.model_dir:
        return (
            args.model_dir.rstrip("/")
            if "://" in args.model_dir
            else str(Path(args.model_dir).resolve())
        )
    output_dir = Path(args.output_dir or DEFAULT_OUTPUT_DIR).resolve()
    return str(output_dir / "serving" / MODEL_NAME)


def output_dir(args: argparse.Namespace) -> Path | None:
    """The run folder, when the command was given one (or the default); None with
    --model-dir."""
    return None if args.model_dir else Path(args.output_dir or DEFAULT_OUTPUT_DIR).resolve()
