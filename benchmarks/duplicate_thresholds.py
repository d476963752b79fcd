"""What the gate's copy checks read on CIFAR-10 itself and on copies a faulty export adds: the
measurement DUPLICATE_SHARE (components/validation_gate/records.py) is set from.

    python -m benchmarks.duplicate_thresholds --data cifar-10-binary-train.tar.gz [--share 0.1]

Hashes the archive's images as the gate does (exact: the pixels' digest; near: the difference
hash of components/validation_gate/near_copies.py), then the same with `--share` of them added
again after each kind of change: unchanged, re-encoded as JPEG (quality 75), one level
brighter, mirrored, shifted by one pixel. Prints, per case, the share of images that are an
exact copy and a near copy (not exact) of another, beyond the first of each group, and their
share of the images, as the gate counts them, as a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections import Counter

import numpy as np

from benchmarks.bench_docs import measured_on
from components.cifar10_example_gen import sources
from components.contract import image_digest
from components.validation_gate import near_copies, records


def _beyond_first(keys: list[bytes]) -> int:
    return sum(count - 1 for count in Counter(keys).values() if count > 1)


def _jpeg(images: np.ndarray) -> np.ndarray:
    from PIL import Image

    out = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=75)
        out.append(np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
    return np.stack(out)


def _copies(images: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "copied unchanged": images.copy(),
        "re-encoded as JPEG (quality 75)": _jpeg(images),
        "one level brighter": np.clip(images.astype(np.int16) + 1, 0, 255).astype(np.uint8),
        "mirrored": images[:, :, ::-1].copy(),
        "shifted one pixel": np.roll(images, 1, axis=2),
    }


def measure(data: str, share: float, seed: int) -> list[dict]:
    arrays = sources.load_arrays(data, eval_fraction=0.1)
    images = np.concatenate([arrays["train"][0], arrays["eval"][0]])
    added = np.random.default_rng(seed).choice(len(images), int(share * len(images)), False)
    cases = {"CIFAR-10 as released": images[:0]} | _copies(images[added])
    rows = []
    for case, extra in cases.items():
        every = np.concatenate([images, extra])
        exact = _beyond_first([image_digest(image.tobytes()) for image in every])
        near = _beyond_first(near_copies.hashes(every)) - exact  # as the gate counts them
        rows.append({"case": case, "images": len(every), "exact": exact, "near": near})
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        f"limit: {records.DUPLICATE_SHARE:.0%} of a run's images",
        "",
        "| images | exact copies | near copies | share | stopped |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        share = (r["exact"] + r["near"]) / r["images"]
        lines.append(
            f"| {r['case']} ({r['images']:,}) | {r['exact']:,} | {r['near']:,} | {share:.3%} | "
            f"{'yes' if share > records.DUPLICATE_SHARE else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--share", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(measured_on())
    print(table(measure(args.data, args.share, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
