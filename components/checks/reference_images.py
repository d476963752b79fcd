"""A reference the new labels cannot move (issue 55): labelled eval images kept with every
served version, on which the Evaluator scores the candidate and the served model class by
class. A class the candidate gets much more often wrong there than the served model blocks
the push, whatever the candidate's own eval split says (a span whose labels of two classes
were exchanged also has them exchanged in its own eval split).

The Trainer writes the set into the export's `assets.extra/` (TF Serving ignores it, every
pusher copies it): the served version's set, then this run's eval images (evenly spaced) until
it holds `REFERENCE_SIZE` images. Once full it is carried from version to version unchanged.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np

from components.contract import IMAGE_SHAPE, LABEL_NAMES, NUM_CLASSES

REFERENCE_FILE = os.path.join("assets.extra", "reference_images.npz")
# 2,000 images (about 200 a class, 6 MB) keep a class's accuracy within about 3 points of
# sampling noise between two models scored on the same images.
REFERENCE_SIZE = 2000
# A class whose accuracy on the reference falls by more than this blocks the push
# (docs/data-validation.md has the measured falls: clean warm-started candidates up to about
# 15 points, candidates trained on cat and dog exchanged 35 points and more).
MAX_CLASS_DROP = 0.25
# A class with fewer reference images than this is not judged.
MIN_CLASS_IMAGES = 20


@dataclasses.dataclass(frozen=True)
class ReferenceImages:
    images: np.ndarray  # uint8, (N, 32, 32, 3)
    labels: np.ndarray  # int64, (N,)

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def grow(kept: ReferenceImages | None, images: np.ndarray, labels: np.ndarray,
         size: int = REFERENCE_SIZE) -> ReferenceImages:  # fmt: skip
    """The kept set, filled up to `size` with new eval images evenly spaced in their order:
    the images already kept stay first and are never replaced."""
    have = 0 if kept is None else len(kept)
    take = min(max(0, size - have), len(labels))
    chosen = np.arange(take) * len(labels) // max(take, 1)  # evenly spaced, in order
    images, labels = images[chosen], labels[chosen]
    if kept is None:
        return ReferenceImages(np.asarray(images, np.uint8), np.asarray(labels, np.int64))
    return ReferenceImages(
        np.concatenate([kept.images, np.asarray(images, np.uint8)]),
        np.concatenate([kept.labels, np.asarray(labels, np.int64)]),
    )


def to_bytes(reference: ReferenceImages) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, images=reference.images, labels=reference.labels)
    return buffer.getvalue()


def from_bytes(payload: bytes, name: str) -> ReferenceImages:
    """The set in `payload`; a ValueError naming `name` when it is not one."""
    try:
        with np.load(io.BytesIO(payload)) as loaded:
            images, labels = loaded["images"], loaded["labels"]
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"{name}: not a reference image set ({err})") from err
    if images.dtype != np.uint8 or images.shape[1:] != IMAGE_SHAPE or len(images) != len(labels):
        raise ValueError(
            f"{name}: not a reference image set (images {images.dtype} {images.shape}, "
            f"{len(labels)} labels)"
        )
    return ReferenceImages(images, labels.astype(np.int64))


def class_accuracy(probabilities: np.ndarray, labels: np.ndarray) -> list[float | None]:
    """Accuracy per true class (None for a class with fewer than MIN_CLASS_IMAGES images)."""
    predicted = np.argmax(probabilities, axis=1)
    out: list[float | None] = []
    for label in range(NUM_CLASSES):
        mine = labels == label
        out.append(float(np.mean(predicted[mine] == label)) if mine.sum() >= MIN_CLASS_IMAGES
                   else None)  # fmt: skip
    return out


@dataclasses.dataclass(frozen=True)
class ClassCheck:
    """Per-class accuracy of the served model and the candidate on the served reference."""

    served: list[float | None]
    candidate: list[float | None]
    images: int
    max_drop: float

    def drops(self) -> list[tuple[int, float]]:
        """(class, how far the candidate falls below the served model) beyond `max_drop`,
        the largest first."""
        found = [
            (label, served - candidate)
            for label, (served, candidate) in enumerate(zip(self.served, self.candidate))
            if served is not None and candidate is not None and served - candidate > self.max_drop
        ]
        return sorted(found, key=lambda item: -item[1])

    def problems(self) -> list[str]:
        return [
            f"class {LABEL_NAMES[label]} on the served version's {self.images:,} reference "
            f"images: {self.served[label]:.1%} served, {self.candidate[label]:.1%} candidate "
            f"(falls {drop * 100:.1f} points; at most {self.max_drop * 100:.0f} allowed, "
            "--max-class-drop)"
            for label, drop in self.drops()
        ]

    def to_json(self) -> str:
        return json.dumps(
            {
                "served": self.served,
                "candidate": self.candidate,
                "images": self.images,
                "max_drop": self.max_drop,
                "problems": self.problems(),
            },
            indent=1,
        )


def check(
    served: np.ndarray, candidate: np.ndarray, labels: np.ndarray, max_drop: float
) -> ClassCheck:
    """Both models' class probabilities on the reference, judged class by class."""
    return ClassCheck(
        class_accuracy(served, labels), class_accuracy(candidate, labels), len(labels), max_drop
    )
