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
        help=f"a run's folder, as `run` takes it (default: {DEFAULT_OUTPUT_DIR}), or a "
        f"compiled pipeline's --pipeline-root (gs:// or s3://); its versions are under "
        f"DIR/serving/{MODEL_NAME}",
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
    if args.output_dir and is_uri(args.output_dir):
        return f"{args.output_dir.rstrip('/')}/serving/{MODEL_NAME}"
    output_dir = Path(args.output_dir or DEFAULT_OUTPUT_DIR).resolve()
    return str(output_dir / "serving" / MODEL_NAME)


def is_uri(path: str) -> bool:
    """A bucket (gs://, s3://) or other store, not a local folder."""
    return "://" in path
