"""`cifar10-pipeline predict`: classify image files with the newest pushed model, on CPU."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import warnings
from pathlib import Path

from components import object_store, served_versions
from components.contract import SAVED_MODEL_FILE
from components.served_versions import newest_complete_version
from pipeline.common import exit_status

ACCEPTED_FORMATS = ("PNG", "JPEG")
_ACCEPTED_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


class ModelNotFoundError(RuntimeError):
    pass


def newest_version(model_dir: str) -> Path | str:
    """`model_dir` itself if it is a SavedModel, else its highest numbered version. A
    remote one (gs://, s3://: a serving folder on Kubeflow's store) stays a URI string."""
    if "://" in model_dir:
        try:
            object_store.check_bucket(model_dir)
        except object_store.ObjectStoreError as err:
            raise ModelNotFoundError(str(err)) from None
        root: Path | str = model_dir.rstrip("/")
        join = served_versions.join
    else:
        root, join = Path(model_dir), os.path.join
    if served_versions.exists(join(str(root), SAVED_MODEL_FILE)):
        return root
    version = newest_complete_version(str(root))
    if version is None:
        raise ModelNotFoundError(
            f"{model_dir}: no pushed model version found; run `cifar10-pipeline run` first "
            "or pass --model-dir"
        )
    return join(str(root), version) if isinstance(root, str) else root / version


def check_image(path: str) -> bytes:
    """The file's bytes if it is a PNG or JPEG image, else ValueError naming the problem.

    An image too large for Pillow's decompression-bomb guard passes this check: its
    size is the served model's to judge, so `predict` refuses it as serving does."""
    from PIL import Image, UnidentifiedImageError

    try:
        payload = Path(path).read_bytes()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(payload)) as image:
                image.verify()
                if image.format not in ACCEPTED_FORMATS:
                    raise ValueError(
                        f"{path}: {image.format} images are not supported (use PNG or JPEG)"
                    )
    except Image.DecompressionBombError:
        if not payload.startswith(_ACCEPTED_SIGNATURES):
            raise ValueError(f"{path}: not a PNG or JPEG image") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as err:
        raise ValueError(f"{path}: not a PNG or JPEG image ({err})") from err
    return payload


def _refusal(err: Exception) -> str:
    """The model's reason for refusing an image: its assertion message, one line."""
    found = re.search(r"(image refused: [^\]\n]*)", str(err))
    return found.group(1) if found else str(err).strip().splitlines()[0]


class Classifier:
    def __init__(self, version_dir: Path | str):
        import tensorflow as tf

        object_store.enable(str(version_dir))
        self.version_dir = version_dir
        self._serve = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
        self._tf = tf

    def probabilities(self, encoded_images: list[bytes]):
        outputs = self._serve(images=self._tf.constant(encoded_images))
        return outputs["probabilities"].numpy()

    def classify_each(self, encoded_images: list[bytes]) -> list:
        """Per image, its probabilities or (a str) the reason the model refused it. One
        refused image fails the whole batch, so then every image is served alone."""
        try:
            return list(self.probabilities(encoded_images))
        except self._tf.errors.InvalidArgumentError:
            pass
        results = []
        for encoded in encoded_images:
            try:
                results.append(self.probabilities([encoded])[0])
            except self._tf.errors.InvalidArgumentError as err:
                results.append(_refusal(err))
        return results


def encode_png(image) -> bytes:
    """PNG bytes of an HWC uint8 array: what `serving_default` takes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _eval_images(args: argparse.Namespace):
    """Eval images for the demo: from --data if given, else the eval split that the run
    which pushed the model ingested (found through its run_summary.json)."""
    from components.cifar10_example_gen.sources import load_arrays
    from pipeline.settings import data_source

    if args.data:
        return load_arrays(data_source.resolve(args.data))["eval"]
    from pipeline.local.examples import read_split
    from pipeline.local.summary import RunSummary

    run_dir = Path(args.model_dir).resolve().parent.parent
    examples = RunSummary.load(run_dir).artifacts.get("examples")
    if not examples:
        raise FileNotFoundError(f"{run_dir}: the run ingested no data; pass --data")

    images, labels, _ = read_split(examples, "eval")
    return images, labels


def main(args: argparse.Namespace) -> int:
    """Serving is CPU-only by design: hide GPUs before TensorFlow starts in this process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from components.cifar10_example_gen.sources import SourceError
    from components.contract import LABEL_NAMES
    from pipeline.settings import data_source

    try:
        classifier = Classifier(newest_version(args.model_dir))
    except ModelNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(f"Model: {classifier.version_dir}", file=sys.stderr)

    if args.samples:
        try:
            images, labels = _eval_images(args)
        except (SourceError, data_source.DataSourceError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return exit_status.BAD_INPUT
        chosen = list(range(0, len(labels), max(1, len(labels) // args.samples)))[: args.samples]
        probabilities = classifier.probabilities([encode_png(images[i]) for i in chosen])
        correct = 0
        for index, row in zip(chosen, probabilities):
            predicted, truth = LABEL_NAMES[row.argmax()], LABEL_NAMES[labels[index]]
            correct += predicted == truth
            mark = "ok " if predicted == truth else "MISS"
            print(
                f"{mark} eval #{index:<5} true {truth:<10} predicted {predicted:<10} "
                f"({100 * row.max():.1f}%)"
            )
        print(f"{correct}/{len(chosen)} correct")
        return exit_status.OK

    if not args.images:
        print("error: give one or more IMAGE files, or --samples N", file=sys.stderr)
        return exit_status.BAD_INPUT
    valid: list[tuple[str, bytes]] = []
    failed = 0
    for path in args.images:
        try:
            valid.append((path, check_image(path)))
        except (ValueError, OSError) as err:
            failed += 1
            print(f"error: {err}", file=sys.stderr)
    if valid:
        results = classifier.classify_each([payload for _, payload in valid])
        for (path, _), row in zip(valid, results):
            if isinstance(row, str):
                failed += 1
                print(f"error: {path}: {row}", file=sys.stderr)
                continue
            top = row.argsort()[::-1][: args.top]
            if args.json:
                print(
                    json.dumps(
                        {
                            "file": path,
                            "top": [
                                {"class": LABEL_NAMES[i], "probability": round(float(row[i]), 4)}
                                for i in top
                            ],
                        }
                    )
                )
            else:
                print(f"{path}: " + ", ".join(f"{LABEL_NAMES[i]} {100 * row[i]:.1f}%" for i in top))
    return exit_status.BAD_INPUT if failed else exit_status.OK
