"""One training recipe, tuned honestly: trained on the training split minus a validation
slice and scored on that slice, never on the eval carve the pipeline's gate uses.

The validation slice is carved from the ExampleGen's training split the way the eval
split is carved from the release (`EvalCarver`: every k-th image of each class), so it
is class-balanced and the same on every run. Runs the Trainer's own plan and fit
(`components.trainer.train`), then scores the model with the exported model's test-time
augmentation. Prints one JSON line. `--eval-carve` trains on the whole training split and
scores the pipeline's eval carve instead: to check a recipe chosen on the slice against the
gate's split, never to choose one.

    python -m benchmarks.recipe_trial --model airbench --set epochs=4 --seed 0 \\
        --data ../shared/datasets/cifar10/cifar-10-binary-train.tar.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time

import numpy as np

from benchmarks import jpeg_trace
from components.cifar10_example_gen.sources import EvalCarver, SourceError, load_arrays
from components.contract import NUM_CLASSES
from components.trainer import export, flops, model, train
from components.trainer.config import TrainingConfig
from components.trainer.keras import tf

VALIDATION_FRACTION = 1 / 9  # 5,000 of the 45,000 training images


def validation_mask(labels: np.ndarray, fraction: float = VALIDATION_FRACTION) -> np.ndarray:
    """True for the validation slice: the same class-balanced rule as the eval carve."""
    carver = EvalCarver(fraction)
    seen = [0] * NUM_CLASSES
    mask = np.zeros(len(labels), bool)
    for index, label in enumerate(labels):
        mask[index] = carver.is_eval(seen[label])
        seen[label] += 1
    return mask


def trial_split(
    arrays: dict[str, tuple[np.ndarray, np.ndarray]], eval_carve: bool
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(training, scored) images and labels: the training split minus the validation slice
    and that slice; or, with `eval_carve`, the whole training split and the eval carve the
    pipeline's gate scores (to check a recipe chosen on the slice, never to choose one)."""
    images, labels = arrays["train"]
    if eval_carve:
        return (images, labels), arrays["eval"]
    held_out = validation_mask(labels)
    return (images[~held_out], labels[~held_out]), (images[held_out], labels[held_out])


def _parse_override(recipe: model.Recipe, text: str) -> tuple[str, object]:
    name, _, value = text.partition("=")
    fields = {f.name for f in dataclasses.fields(model.Recipe)}
    if name not in fields:
        raise SystemExit(f"--set {text}: no recipe field '{name}' (fields: {', '.join(fields)})")
    current = getattr(recipe, name)
    if isinstance(current, bool):
        return name, value.lower() in ("1", "true", "yes")
    if isinstance(current, tuple) or (current is None and name == "widths"):
        return name, tuple(type((current or (0,))[0])(v) for v in value.split(","))
    return name, type(current)(value)


def accuracy(module: export.ServingModule, images: np.ndarray, labels: np.ndarray) -> float:
    correct = 0
    probabilities_of = tf.function(module.probabilities)
    for start in range(0, len(images), 500):
        probabilities = probabilities_of(tf.constant(images[start : start + 500]))
        correct += int(np.sum(np.argmax(probabilities, axis=1) == labels[start : start + 500]))
    return correct / len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the CIFAR-10 release (archive or folder)")
    parser.add_argument("--model", default="airbench", choices=sorted(model.RECIPES))
    parser.add_argument("--set", action="append", default=[], help="recipe field=value")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--jpeg-quality",
        type=int,
        metavar="1..100",
        help="first save every image as JPEG at this quality (4:2:0 chroma) and decode it: "
        "what further JPEG artefacts cost (benchmarks/jpeg_trace.py)",
    )
    parser.add_argument(
        "--eval-carve",
        action="store_true",
        help="train on the whole training split and score the eval carve (the pipeline's "
        "split) instead of the validation slice",
    )
    args = parser.parse_args()
    if args.jpeg_quality is not None and not 1 <= args.jpeg_quality <= 100:
        parser.error(f"--jpeg-quality must be 1..100, got {args.jpeg_quality}")

    recipe = model.RECIPES[args.model]
    recipe = dataclasses.replace(recipe, **dict(_parse_override(recipe, o) for o in args.set))
    try:
        arrays = load_arrays(args.data)
    except SourceError as err:
        raise SystemExit(f"error: {err}") from None
    (train_images, train_labels), (validation_images, validation_labels) = trial_split(
        arrays, args.eval_carve
    )
    if args.jpeg_quality is not None:  # only the images this trial trains on and scores
        train_images, validation_images = (
            jpeg_trace.jpeg_round_trip(images, args.jpeg_quality, "4:2:0")
            for images in (train_images, validation_images)
        )
    split = {
        "train": (tf.constant(train_images), tf.constant(train_labels)),
        "eval": (tf.constant(validation_images), tf.constant(validation_labels)),
    }
    run = train.plan(TrainingConfig(model=args.model, seed=args.seed))
    run = dataclasses.replace(
        run,
        recipe=recipe,
        epochs=recipe.epochs,
        per_replica_batch_size=recipe.per_replica_batch_size,
        global_batch_size=recipe.per_replica_batch_size * run.replicas,
    )
    started = time.time()
    settings = train.process_settings(run.precision.policy, args.seed)
    with settings, tempfile.TemporaryDirectory() as work:
        fitted = train.fit(run, split, f"{work}/checkpoints", f"{work}/model")
        network = export.float32_copy(fitted.network, fitted.build)
    by_view = {  # every test-time augmentation on the same network: what the views are worth
        views: accuracy(export.ServingModule(network, views), validation_images, validation_labels)
        for views in export.TEST_TIME_AUGMENTATIONS
    }
    forward = flops.forward_flops_per_image(network)
    images_seen = run.epochs * fitted.steps_per_epoch * run.global_batch_size
    print(
        json.dumps(
            {
                "model": args.model,
                "recipe": dataclasses.asdict(recipe),
                "seed": args.seed,
                "jpeg_quality": args.jpeg_quality,
                "scored_on": "eval carve" if args.eval_carve else "validation slice",
                "train_images": len(train_labels),
                "validation_images": len(validation_labels),
                "validation_accuracy": by_view[recipe.test_time_augmentation],
                "validation_accuracy_by_test_time_augmentation": by_view,
                "validation_accuracy_without_tta": fitted.history[-1].get("val_accuracy"),
                "history": [round(e.get("val_accuracy", 0), 4) for e in fitted.history],
                "epoch_seconds": [e["seconds"] for e in fitted.history],
                "training_flops": flops.training_flops(forward, images_seen),
                "fit_seconds": round(fitted.fit_seconds, 1),
                "wall_seconds": round(time.time() - started, 1),
                "precision": run.precision.policy,
            }
        )
    )


if __name__ == "__main__":
    main()
