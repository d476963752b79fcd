"""`cifar10-pipeline predict`: classify image files with the newest pushed model, on CPU."""

from __future__ import annotations

import argparse

from components.contract import NUM_CLASSES
from pipeline.settings.config import DEFAULT_SERVING_DIR


def cmd_predict(args: argparse.Namespace) -> int:
    from pipeline.local import predict

    return predict.main(args)


def _count(low: int, high: int | None = None, what: str = ""):
    """An argparse type: a whole number from `low` (to `high`), refused with the flag's
    name (argparse adds it) and the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"from {low} to {high}{what}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    return parse


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Classify images with the pushed model."""
    predict_parser = commands.add_parser(
        "predict",
        help="classify image files with the newest pushed model, on CPU",
        description="Loads the newest version under --model-dir and prints the top classes "
        "for each PNG or JPEG file.",
    )
    predict_parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="a PNG or JPEG file; a folder stands for the .png, .jpg and .jpeg files in it, "
        "sorted by name (not its subfolders)",
    )
    predict_parser.add_argument(
        "--model-dir",
        default=str(DEFAULT_SERVING_DIR),
        help="a run folder (`run --output-dir`), its folder of numbered versions, or one "
        "version (default: %(default)s)",
    )
    predict_parser.add_argument(
        "--top",
        type=_count(1, NUM_CLASSES, " (the number of classes)"),
        default=3,
        metavar="N",
        help=f"classes to show per image, 1 to {NUM_CLASSES} (default: %(default)s)",
    )
    predict_parser.add_argument(
        "--samples",
        type=_count(1),
        default=0,
        metavar="N",
        help="demo: classify N eval images of --data and print true versus predicted",
    )
    predict_parser.add_argument(
        "--data",
        metavar="PATH_OR_URL",
        help="source for --samples (default: the eval split of the run that pushed the model)",
    )
    predict_parser.add_argument("--json", action="store_true", help="print JSON lines")
    predict_parser.set_defaults(func=cmd_predict)
