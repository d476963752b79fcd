"""What "the same distribution" looks like to TFDV's comparators on CIFAR-10, against altered
copies: the measurement the schema's skew and drift thresholds are set from.

    python -m benchmarks.drift_thresholds --data cifar-10-binary-train.tar.gz [--draws 20] \
        [--size 1000 --size 25000]

For each size (`--size`, default 1,000, 5,000 and 25,000 images; the archive must hold twice
the largest): disjoint random samples of the training set compared with each other
(`--draws` times), and altered copies of a sample (pixels x0.6 and x1.3, mirrored, blurred,
JPEG quality 20, one class removed, 80% of one class dropped) compared with a disjoint sample.
Distances are TFDV's own (`validate_statistics` with the curated schema's comparators,
thresholds read back from `drift_skew_info`): Jensen-Shannon divergence for the image
summaries, L-infinity for the label. Prints a Markdown table and, with --json, every
distance.
"""

from __future__ import annotations

import argparse
import io
import json
import sys

import numpy as np

from components.cifar10_example_gen import sources
from components.cifar10_example_gen.summaries import summarize
from components.contract import IMAGE_SUMMARY_FEATURES, LABEL_KEY, NUM_CLASSES
from components.validation_gate.comparison import statistics_options

SIZES = (1000, 5000, 25000)


def _blur(images: np.ndarray) -> np.ndarray:
    """3x3 box blur, edges replicated."""
    padded = np.pad(images.astype(np.float32), ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    total = sum(padded[:, i : i + 32, j : j + 32] for i in range(3) for j in range(3))
    return np.round(total / 9).astype(np.uint8)


def _jpeg(images: np.ndarray, quality: int) -> np.ndarray:
    from PIL import Image

    out = np.empty_like(images)
    for i, image in enumerate(images):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
        out[i] = np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    return out


def _scaled(images: np.ndarray, factor: float) -> np.ndarray:
    return np.clip(np.round(images.astype(np.float32) * factor), 0, 255).astype(np.uint8)


def alterations(rng: np.random.Generator) -> dict:
    """name -> f(images, labels) -> (images, labels)."""

    def without(share_kept: float):
        def alter(images, labels):
            target = labels == rng.integers(NUM_CLASSES)
            keep = ~target | (rng.random(len(labels)) < share_kept)
            return images[keep], labels[keep]

        return alter

    return {
        "pixels x0.6": lambda x, y: (_scaled(x, 0.6), y),
        "pixels x1.3": lambda x, y: (_scaled(x, 1.3), y),
        "mirrored": lambda x, y: (x[:, :, ::-1], y),
        "blurred (3x3 box)": lambda x, y: (_blur(x), y),
        "JPEG quality 20": lambda x, y: (_jpeg(x, 20), y),
        "one class removed": without(0.0),
        "80% of one class dropped": without(0.2),
    }


def statistics(images: np.ndarray, labels: np.ndarray, schema):
    import pandas as pd
    import tensorflow_data_validation as tfdv

    frame = pd.DataFrame(summarize(images))
    frame[LABEL_KEY] = labels.astype(np.int64)
    return tfdv.generate_statistics_from_dataframe(frame, statistics_options(schema))


def distances(new, old, schema) -> dict[str, float]:
    """{feature: TFDV's drift distance of `new` from `old`} under `schema`'s comparators."""
    import tensorflow_data_validation as tfdv

    anomalies = tfdv.validate_statistics(new, schema, previous_statistics=old)
    return {
        "/".join(info.path.step): float(info.drift_measurements[0].value)
        for info in anomalies.drift_skew_info
        if info.drift_measurements
    }


def study_schema():
    """The curated schema, reduced to the compared features."""
    from components.validation_gate.comparison import load_schema

    schema = load_schema()
    keep = (*IMAGE_SUMMARY_FEATURES, LABEL_KEY)
    kept = [f for f in schema.feature if f.name in keep]
    del schema.feature[:]
    schema.feature.extend(kept)
    return schema


def measure(data: str, draws: int, seed: int, sizes=SIZES) -> dict:
    arrays = sources.load_arrays(data, eval_fraction=0.1)
    images = np.concatenate([arrays["train"][0], arrays["eval"][0]])
    labels = np.concatenate([arrays["train"][1], arrays["eval"][1]])
    needed = 2 * max(sizes)  # two disjoint samples; fewer would leave the second one short
    if needed > len(labels):
        raise SystemExit(f"size {max(sizes):,} needs {needed:,} images; {data} has {len(labels):,}")
    schema = study_schema()
    rng = np.random.default_rng(seed)
    rows: dict[str, dict[int, list[dict[str, float]]]] = {}
    for size in sizes:
        for draw in range(draws):
            order = rng.permutation(len(labels))
            a, b = order[:size], order[size : 2 * size]
            base = statistics(images[b], labels[b], schema)
            same = distances(statistics(images[a], labels[a], schema), base, schema)
            rows.setdefault("same distribution", {}).setdefault(size, []).append(same)
            if draw:
                continue  # one altered copy per size: each is far from the same-distribution noise
            for name, alter in alterations(rng).items():
                changed = statistics(*alter(images[a], labels[a]), schema)
                rows.setdefault(name, {}).setdefault(size, []).append(
                    distances(changed, base, schema)
                )
            print(f"size {size}: done", file=sys.stderr, flush=True)
    return {"thresholds": thresholds(schema), "rows": rows}


def thresholds(schema) -> dict[str, float]:
    """The curated schema's drift thresholds."""
    found = {}
    for feature in schema.feature:
        comparator = feature.drift_comparator
        if comparator.HasField("jensen_shannon_divergence"):
            found[feature.name] = comparator.jensen_shannon_divergence.threshold
        elif comparator.HasField("infinity_norm"):
            found[feature.name] = comparator.infinity_norm.threshold
    return found


def table(result: dict) -> str:
    """One row per data set and size: the largest distance over the draws for each feature,
    marked * where it passes the schema's threshold; the verdict."""
    limits = result["thresholds"]
    names = list(limits)
    short = [n.removeprefix("image_").replace("_", " ") for n in names]
    lines = [
        "| data | images | " + " | ".join(short) + " | stopped |",
        "|---|---:|" + "---:|" * len(names) + "---|",
        "| threshold | | " + " | ".join(f"{limits[n]:g}" for n in names) + " | |",
    ]
    for label, by_size in result["rows"].items():
        for size, draws in sorted(by_size.items(), key=lambda item: int(item[0])):
            worst = {n: max(d.get(n, 0.0) for d in draws) for n in names}
            over = [n for n in names if worst[n] > limits[n]]
            cells = [f"**{worst[n]:.3f}**" if n in over else f"{worst[n]:.3f}" for n in names]
            verdict = "yes" if over else "no"
            times = f" ({len(draws)} draws)" if len(draws) > 1 else ""
            row = f"| {label}{times} | {int(size):,} | " + " | ".join(cells)
            lines.append(f"{row} | {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, action="append", help="default: 1000, 5000, 25000")
    parser.add_argument("--json", help="also write every distance here")
    args = parser.parse_args(argv)
    result = measure(args.data, args.draws, args.seed, args.size or SIZES)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
