"""How often the served model's embeddings call two of CIFAR-10's own images copies, and how many
real copies they find: the measurement THRESHOLD (components/validation_gate/
embedding_copies.py) is chosen from.

    python -m benchmarks.embedding_copies --data cifar-10-binary-train.tar.gz \\
        --model outputs/serving/cifar10/<version> [--share 0.03]

Embeds the archive's 50,000 images with the model's `features` function, and `--share` of
them again after each change: shifted by one pixel (the edge column repeated), cropped by 2
pixels (one a side) and resized back, mirrored. Counts copies as the gate does (pairs at or
above a cosine similarity, grouped, beyond the first distinct difference hash of each
group) at a few thresholds, over two views: all 50,000 at once, and the ten slices of 5,000
(the most the gate scores at once, SCORED_SAMPLE: a span of 5,000 is all scored, a larger
one is sampled to 5,000) with the copies of each slice's images added to that slice. Prints
the shares of the images counted as copies as a Markdown table: on clean images they are
false positives.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.bench_docs import measured_on
from components.checks import model_scoring
from components.cifar10_example_gen import sources
from components.validation_gate import embedding_copies, near_copies, records

THRESHOLDS = (0.98, 0.985, 0.99, 0.995, 0.998)
SLICES = 10


def _changed(images: np.ndarray) -> dict[str, np.ndarray]:
    import tensorflow as tf

    cropped = tf.image.resize(images[:, 1:-1, 1:-1], (32, 32)).numpy()
    return {
        "shifted one pixel": np.concatenate([images[:, :, :1], images[:, :, :-1]], axis=2),
        "cropped 2 pixels, resized": np.clip(np.round(cropped), 0, 255).astype(np.uint8),
        "mirrored": images[:, :, ::-1].copy(),
    }


def _pairs(embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs at or above the lowest threshold, with their similarities."""
    pairs = embedding_copies.similar_pairs(embeddings, min(THRESHOLDS))
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    return pairs, np.einsum("ij,ij->i", unit[pairs[:, 0]], unit[pairs[:, 1]])


def _shares(embeddings: np.ndarray, keys: list[bytes]) -> dict[float, float]:
    """{threshold: share of the images counted as copies}."""
    pairs, similarity = _pairs(embeddings)
    return {
        t: embedding_copies.grouped_copies(pairs[similarity >= t], keys) / len(keys)
        for t in THRESHOLDS
    }


def _case(embedded: np.ndarray, keys: list[bytes], added: np.ndarray, extra, slices) -> dict:
    """The whole set and each slice, with `extra` (embeddings, keys) of the copies of the
    images `added` (None: clean), as {"all": shares, "slices": [shares, ...]}."""
    rows = {"all": _shares(*_with(embedded, keys, np.arange(len(keys)), added, extra))}
    rows["slices"] = [_shares(*_with(embedded, keys, part, added, extra)) for part in slices]
    return rows


def _with(embedded, keys, part: np.ndarray, added: np.ndarray, extra):
    if extra is None:
        return embedded[part], [keys[i] for i in part]
    mine = np.isin(added, part)
    vectors = np.concatenate([embedded[part], extra[0][mine]])
    return vectors, [keys[i] for i in part] + [k for k, m in zip(extra[1], mine) if m]


def measure(data: str, model: str, share: float, seed: int) -> dict[str, dict]:
    arrays = sources.load_arrays(data, eval_fraction=0.1)
    images = np.concatenate([arrays["train"][0], arrays["eval"][0]])
    rng = np.random.default_rng(seed)
    added = np.sort(rng.choice(len(images), int(share * len(images)), replace=False))
    changed = _changed(images[added])
    every = np.concatenate([images, *changed.values()])
    embedded = model_scoring.scores(model, every)[1]
    if embedded is None:
        raise SystemExit(f"{model}: the model exports no embeddings (no `features` function)")
    keys = near_copies.hashes(every)
    slices = np.array_split(rng.permutation(len(images)), SLICES)
    clean = embedded[: len(images)], keys[: len(images)]
    found = {"CIFAR-10 as released": _case(*clean, added, None, slices)}
    for n, case in enumerate(changed):
        start = len(images) + n * len(added)
        extra = embedded[start : start + len(added)], keys[start : start + len(added)]
        found[case] = _case(*clean, added, extra, slices)
    return found


def table(found: dict[str, dict], share: float) -> str:
    lines = [
        f"copies added: {share:.0%} of the images; limit: {records.DUPLICATE_SHARE:.0%} of a "
        "run's images (with exact and near copies); slices: 5,000 images, mean (max)",
        "",
        "| images | view | " + " | ".join(f"cosine >= {t}" for t in THRESHOLDS) + " |",
        "|---|---|" + "---:|" * len(THRESHOLDS),
    ]
    for case, rows in found.items():
        whole = [f"{rows['all'][t]:.3%}" for t in THRESHOLDS]
        sliced = [
            f"{np.mean([s[t] for s in rows['slices']]):.3%} "
            f"({max(s[t] for s in rows['slices']):.2%})"
            for t in THRESHOLDS
        ]
        lines.append(f"| {case} | all at once | " + " | ".join(whole) + " |")
        lines.append(f"| {case} | slices of 5,000 | " + " | ".join(sliced) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", required=True, help="a pushed version's folder")
    parser.add_argument("--share", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(measured_on())
    print(table(measure(args.data, args.model, args.share, args.seed), args.share))
    return 0


if __name__ == "__main__":
    sys.exit(main())
