"""`cifar10-pipeline predict`: classify image files with the newest pushed model, on CPU."""

from __future__ import annotations

import argparse

from pipeline.settings.config import DEFAULT_SERVING_DIR


def cmd_predict(args: argparse.Namespace) -> int:
    from pipeline.local import predict

    return predict.main(args)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Classify images with the pushed model."""
    predict_parser = commands.add_parser(
        "predict",
        help="classify image files with the newest pushed model, on CPU",
        description="Loads the newest version under --model-dir and prints the top classes "
        "for each PNG or JPEG file.",
    )
    predict_parser.add_argument("images", nargs="*", metavar="IMAGE")
    predict_parser.add_argument(
        "--model-dir",
        default=str(DEFAULT_SERVING_DIR),
        help="folder of numbered versions, or one version (default: %(default)s)",
    )
    predict_parser.add_argument("--top", type=int, default=3, help="classes to show per image")
    predict_parser.add_argument(
        "--samples",
        type=int,
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
