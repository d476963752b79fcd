"""Did a CIFAR-10 copy pass through lossy JPEG, and at which quality?

Accuracy published for the official (lossless) release need not hold for a copy decoded from
JPEG files: the artefacts are in the training and the evaluation images alike. This tells the
two apart from the pixels alone. JPEG is nearly idempotent at the settings an image was last
saved with: saving a decoded image again at the same quality and chroma subsampling changes
its pixels far less than at qualities a little above or below. So the trace is a sharp dip in
the re-encoding change at one quality; pixels that never went through JPEG show no such dip.

    python -m benchmarks.jpeg_trace --data ../shared/datasets/cifar10/cifar-10-binary-train.tar.gz
"""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import asdict, dataclass

import numpy as np
from PIL import Image

from components.cifar10_example_gen.sources import SourceError, load_arrays

SUBSAMPLING = {"4:4:4": 0, "4:2:0": 2}  # Pillow's codes
QUALITIES = range(30, 100)
# The dip is measured against qualities NEIGHBOUR_STEP away: on smooth images the next
# quality up or down often quantises to the same values. It counts as a trace below
# DIP_RATIO; the shared copy's is 0.1, lossless images vary smoothly with quality (about 1).
NEIGHBOUR_STEP = 2
DIP_RATIO = 0.5


@dataclass(frozen=True)
class Trace:
    images: int
    jpeg: bool
    quality: int  # where the sharpest dip is, trace or not
    subsampling: str
    change_at_quality: float  # mean absolute pixel change on re-encoding, 0..255 scale
    change_at_neighbours: tuple[float, float]  # at quality -+ NEIGHBOUR_STEP
    dip_ratio: float


def jpeg_round_trip(images: np.ndarray, quality: int, subsampling: str) -> np.ndarray:
    """uint8 [N,H,W,3] images saved as JPEG with Pillow and decoded again."""
    decoded = np.empty_like(images)
    for index, image in enumerate(images):
        buffer = io.BytesIO()
        Image.fromarray(image).save(
            buffer, "JPEG", quality=quality, subsampling=SUBSAMPLING[subsampling]
        )
        decoded[index] = np.asarray(Image.open(buffer))
    return decoded


def reencoding_change(images: np.ndarray, quality: int, subsampling: str) -> float:
    """Mean absolute pixel change of uint8 images when saved as JPEG and decoded."""
    decoded = jpeg_round_trip(images, quality, subsampling)
    return float(np.mean(np.abs(decoded.astype(np.float64) - images)))


def trace(images: np.ndarray) -> Trace:
    """The sharpest dip of the re-encoding change over quality and subsampling; of equal
    dips, the one whose re-encoding changes the pixels least (the subsampling they had)."""
    step = NEIGHBOUR_STEP
    candidates = []  # (dip ratio, change, quality, subsampling, neighbours' changes)
    for subsampling in SUBSAMPLING:
        change = {q: reencoding_change(images, q, subsampling) for q in QUALITIES}
        for quality in QUALITIES[step:-step]:
            neighbours = (change[quality - step], change[quality + step])
            ratio = change[quality] / max(min(neighbours), 1e-9)
            candidates.append((ratio, change[quality], quality, subsampling, neighbours))
    ratio, at_quality, quality, subsampling, neighbours = min(candidates)
    return Trace(
        images=len(images),
        jpeg=ratio < DIP_RATIO,
        quality=quality,
        subsampling=subsampling,
        change_at_quality=round(at_quality, 3),
        change_at_neighbours=(round(neighbours[0], 3), round(neighbours[1], 3)),
        dip_ratio=round(ratio, 3),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the CIFAR-10 release (archive or folder)")
    parser.add_argument(
        "--images",
        type=int,
        default=200,
        metavar="N",
        help="how many training images, evenly spaced (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.images < 1:
        parser.error(f"--images must be at least 1, got {args.images}")
    try:
        images, _ = load_arrays(args.data)["train"]
    except SourceError as err:
        raise SystemExit(f"error: {err}") from None
    sample = images[np.linspace(0, len(images) - 1, min(args.images, len(images))).astype(int)]
    print(json.dumps(asdict(trace(sample))))


if __name__ == "__main__":
    main()
