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

from components.contract import SAVED_MODEL_FILE
from components.storage import object_store, served_versions
from components.storage.served_versions import newest_complete_version
from pipeline.common import exit_status
from pipeline.settings.config import DEFAULT_OUTPUT_DIR, DEFAULT_SERVING_DIR

ACCEPTED_FORMATS = ("PNG", "JPEG")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")  # what a folder given as IMAGE stands for
_ACCEPTED_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")
# Where a run folder (`run --output-dir`) keeps its numbered versions: serving/cifar10.
RUN_SERVING_DIR = DEFAULT_SERVING_DIR.relative_to(DEFAULT_OUTPUT_DIR)


class ModelNotFoundError(RuntimeError):
    pass


class InputError(ValueError):
    """Arguments `predict` cannot serve; the message says why, in the user's terms."""


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
    if version is None:  # a run folder: its serving folder
        in_run = join(str(root), *RUN_SERVING_DIR.parts)
        version = newest_complete_version(in_run)
        root = in_run if isinstance(root, str) else Path(in_run)
    if version is None:
        raise ModelNotFoundError(
            f"{model_dir}: no pushed model version found (--model-dir takes a run folder, "
            f"its {RUN_SERVING_DIR} folder of numbered versions, or one version); run "
            "`cifar10-pipeline run` first"
        )
    return join(str(root), version) if isinstance(root, str) else root / version


def check_image(path: str) -> bytes:
    """The file's bytes if it is a PNG or JPEG image, else ValueError naming the file and
    the problem in words.

    An image too large for Pillow's decompression-bomb guard passes this check: its
    size is the served model's to judge, so `predict` refuses it as serving does."""
    from PIL import Image, UnidentifiedImageError

    try:
        payload = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read it ({err.strerror or type(err).__name__})") from None
    image_format = ""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(payload)) as image:
                image_format = image.format or ""
                if image_format in ACCEPTED_FORMATS:
                    image.verify()
    except Image.DecompressionBombError:
        if not payload.startswith(_ACCEPTED_SIGNATURES):
            raise ValueError(f"{path}: not a PNG or JPEG image") from None
    except UnidentifiedImageError:
        raise ValueError(f"{path}: not a PNG or JPEG image") from None
    except Exception:  # Pillow's verify: SyntaxError, OSError, struct.error, ...
        raise ValueError(f"{path}: a damaged {image_format or 'image'} image") from None
    if image_format and image_format not in ACCEPTED_FORMATS:
        raise ValueError(f"{path}: {image_format} images are not supported (use PNG or JPEG)")
    return payload


def image_files(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(the files to classify, the problems found): each IMAGE argument, a folder standing
    for its .png, .jpg and .jpeg files (sorted by name, not its subfolders)."""
    files, problems = [], []
    for argument in arguments:
        if not os.path.isdir(argument):
            files.append(argument)
            continue
        found = sorted(
            name
            for name in os.listdir(argument)
            if name.lower().endswith(IMAGE_SUFFIXES)
            and os.path.isfile(os.path.join(argument, name))
        )
        if not found:
            problems.append(f"{argument}: no PNG or JPEG files in this folder")
        files += [os.path.join(argument, name) for name in found]
    return files, problems


def _refusal(err: Exception) -> str:
    """The model's reason for refusing an image: its assertion message, one line."""
    found = re.search(r"(image refused: [^\]\n]*)", str(err))
    return found.group(1) if found else str(err).strip().splitlines()[0]


class Classifier:
    def __init__(self, version_dir: Path | str):
        import tensorflow as tf

        object_store.enable(str(version_dir))
        self.version_dir = version_dir
        try:
            self._serve = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
        except Exception as err:  # a damaged or foreign SavedModel: OSError, OpError, ...
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            reason = re.sub(r"\bb'([^']*)'", r"\1", reason)  # C++ paths come as bytes
            raise ModelNotFoundError(f"{version_dir}: cannot load the model ({reason})") from None
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


def _run_of(version_dir: Path | str) -> Path | None:
    """The run folder a local version sits in (`<run>/serving/cifar10/<version>`)."""
    if isinstance(version_dir, str):
        return None
    parents = Path(version_dir).resolve().parents
    depth = len(RUN_SERVING_DIR.parts)
    return parents[depth] if len(parents) > depth else None


def _eval_images(args: argparse.Namespace, version_dir: Path | str):
    """Eval images for the demo: from --data if given, else the eval split that the run
    which pushed the model ingested (found through its run_summary.json)."""
    from components.cifar10_example_gen.sources import load_arrays
    from pipeline.settings import data_source

    if args.data:
        return load_arrays(data_source.resolve(args.data))["eval"]
    from pipeline.local.examples import read_split
    from pipeline.local.report_data import ArtifactError, reading
    from pipeline.local.summary import RunSummary, SummaryError

    run_dir = _run_of(version_dir)
    if run_dir is None:
        raise InputError(f"{version_dir}: not in a run folder; pass --data")
    try:
        examples = RunSummary.load(run_dir).artifacts.get("examples")
    except FileNotFoundError:
        raise InputError(f"{run_dir}: no run summary beside the model; pass --data") from None
    except SummaryError as err:
        raise InputError(f"{err}; or pass --data") from None
    if not examples:
        raise InputError(f"{run_dir}: the run ingested no data; pass --data")
    try:
        with reading(examples, "examples"):
            images, labels, _ = read_split(examples, "eval")
    except ArtifactError as err:
        raise InputError(f"{err}; pass --data") from None
    if not len(labels):
        raise InputError(f"{examples}: no eval images there; pass --data")
    return images, labels


def _arguments_problem(args: argparse.Namespace) -> str:
    """What is wrong with the arguments as a whole ('' when nothing)."""
    if args.samples and args.images:
        return "give IMAGE files or --samples N, not both"
    if args.data and not args.samples:
        return "--data is read only with --samples N"
    if not args.samples and not args.images:
        return "give one or more IMAGE files or folders, or --samples N"
    return ""


def _loaded(version_dir: Path | str) -> Classifier:
    classifier = Classifier(version_dir)
    print(f"Model: {classifier.version_dir}", file=sys.stderr)
    return classifier


def _samples(args: argparse.Namespace, version_dir: Path | str) -> int:
    """The demo: N eval images, true versus predicted class."""
    from components.cifar10_example_gen.sources import SourceError
    from components.contract import LABEL_NAMES
    from pipeline.settings import data_source

    try:
        images, labels = _eval_images(args, version_dir)
    except (SourceError, data_source.DataSourceError) as err:
        raise InputError(str(err)) from None
    chosen = list(range(0, len(labels), max(1, len(labels) // args.samples)))[: args.samples]
    probabilities = _loaded(version_dir).probabilities([encode_png(images[i]) for i in chosen])
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


def _print_top(path: str, row, top: int, as_json: bool) -> None:
    from components.contract import LABEL_NAMES

    best = row.argsort()[::-1][:top]
    if as_json:
        shown = [{"class": LABEL_NAMES[i], "probability": round(float(row[i]), 4)} for i in best]
        print(json.dumps({"file": path, "top": shown}))
    else:
        print(f"{path}: " + ", ".join(f"{LABEL_NAMES[i]} {100 * row[i]:.1f}%" for i in best))


def _classify_files(args: argparse.Namespace, version_dir: Path | str) -> int:
    """Every file checked first, so that the model (seconds to load) is loaded only when
    there is something to classify; exit status 2 when any file was refused."""
    valid: list[tuple[str, bytes]] = []
    failed = 0
    for argument in args.images:  # the errors in the order the files were given
        paths, problems = image_files([argument])
        for path in paths:
            try:
                valid.append((path, check_image(path)))
            except ValueError as err:
                problems.append(str(err))
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        failed += len(problems)
    if not valid:
        return exit_status.BAD_INPUT
    results = _loaded(version_dir).classify_each([payload for _, payload in valid])
    for (path, _), row in zip(valid, results):
        if isinstance(row, str):
            failed += 1
            print(f"error: {path}: {row}", file=sys.stderr)
        else:
            _print_top(path, row, args.top, args.json)
    return exit_status.BAD_INPUT if failed else exit_status.OK


def main(args: argparse.Namespace) -> int:
    """Serving is CPU-only by design: hide GPUs before TensorFlow starts in this process.
    The arguments, the model folder and the images are checked before the model loads."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        problem = _arguments_problem(args)
        if problem:
            raise InputError(problem)
        version_dir = newest_version(args.model_dir)
        if args.samples:
            return _samples(args, version_dir)
        return _classify_files(args, version_dir)
    except (InputError, ModelNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
