"""Drift as the served model sees it: the two detectors that compare what it makes of a new
span with what it made of its own eval split.

- Its class probabilities, class by class, by the two-sample Kolmogorov-Smirnov statistic
  (`class_shift`; black-box shift detection, Lipton et al. 2018; Rabanser et al., "Failing
  Loudly", 2019). The sample of the eval split's probabilities is kept in the label
  reference (components/checks/label_agreement.py).
- Its embeddings (the penultimate layer), by the maximum mean discrepancy (`mmd`).

The Trainer keeps a sample of the eval split's embeddings beside every export
(`assets.extra/embedding_reference.npz`, which TF Serving ignores and every pusher copies);
DataValidationGate embeds the records it scores with the served model in the same pass
(`features`, components/checks/model_scoring.py) and compares. The eval split, not the training
data: the model has fitted its training images, so their embeddings sit apart from any new
image's, clean or not.
"""

from __future__ import annotations

import io

import numpy as np

from components.contract import NUM_CLASSES

# The span's images look unlike the served model's eval split when a class's probabilities
# are further apart than this (the largest Kolmogorov-Smirnov statistic over the classes;
# docs/data-validation.md has the measured values).
SHIFT_THRESHOLD = 0.1
# Below this many images on either side a statistic's sampling noise nears its threshold.
# 900, not 1,000: the eval split carved from 10,000 images holds 994-996 (class-balanced
# floors), and a version served from them read 0.034-0.042 on clean spans
# (docs/data-validation.md), well below the threshold.
MIN_SHIFT_SAMPLE = 900

EMBEDDING_FILE = "assets.extra/embedding_reference.npz"
# Rows of the eval split's embeddings kept (float16) and rows of a span compared: the kernel
# matrices are EMBEDDING_SAMPLE x EMBEDDING_SAMPLE (32 MB each at 2,000).
EMBEDDING_SAMPLE = 2000
# The span's embeddings look unlike the eval split's when the (unbiased) squared MMD exceeds
# this (docs/data-validation.md has the measured values: clean spans under 0.0005, rotated,
# recoloured or noised ones 0.011 and more).
MMD_THRESHOLD = 0.005
_PAIRS_FOR_BANDWIDTH = 500


def every_kth(rows: np.ndarray, kept: int) -> np.ndarray:
    """At most `kept` rows, evenly spaced (deterministic)."""
    return rows[:: max(1, -(-len(rows) // kept))]


def too_few(reference: int, scored: int) -> str:
    """Why a shift statistic is not computed on samples of these sizes ('' when it is)."""
    if min(reference, scored) >= MIN_SHIFT_SAMPLE:
        return ""
    return (
        f"too few images ({reference:,} of its eval split, {scored:,} scored; "
        f"{MIN_SHIFT_SAMPLE:,} each needed)"
    )


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two
    empirical distribution functions."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    gap = np.searchsorted(a, points, side="right") / len(a) - np.searchsorted(
        b, points, side="right"
    ) / len(b)
    return float(np.abs(gap).max())


def class_shift(probabilities: np.ndarray, served_sample: np.ndarray) -> tuple[float, int]:
    """The largest per-class Kolmogorov-Smirnov statistic between the served model's class
    probabilities on the span and on its own eval split (`served_sample`), and that class."""
    statistics = [
        ks_statistic(probabilities[:, k], served_sample[:, k]) for k in range(NUM_CLASSES)
    ]
    worst = int(np.argmax(statistics))
    return round(statistics[worst], 4), worst


def embeddings_to_bytes(embeddings: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, embeddings=every_kth(embeddings, EMBEDDING_SAMPLE).astype(np.float16)
    )
    return buffer.getvalue()


def embeddings_from_bytes(data: bytes, name: str) -> np.ndarray:
    """The kept sample; ValueError naming `name` when it is not one."""
    try:
        with np.load(io.BytesIO(data)) as archive:
            embeddings = archive["embeddings"]
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{name}: not an embedding sample ({err})") from err
    if embeddings.ndim != 2 or not len(embeddings):
        raise ValueError(f"{name}: expected [images, dimensions], found shape {embeddings.shape}")
    if not np.isfinite(embeddings).all():
        raise ValueError(f"{name}: the embedding sample holds values that are not finite")
    return embeddings.astype(np.float64)


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(
        (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * a @ b.T, 0.0
    )


def mmd(reference: np.ndarray, span: np.ndarray) -> float:
    """The unbiased squared maximum mean discrepancy (Gretton et al. 2012) between the
    reference's embeddings and at most EMBEDDING_SAMPLE of the span's, with a Gaussian kernel whose
    width is the median distance between reference embeddings (fixed by the reference, so a
    span cannot widen it). 0 for samples of one distribution (give or take sampling noise),
    up to 2 for samples that share nothing."""
    x, y = every_kth(reference, EMBEDDING_SAMPLE), every_kth(span, EMBEDDING_SAMPLE)
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            f"the span's embeddings have {y.shape[1]} dimensions, the reference's {x.shape[1]}"
        )
    pairs = every_kth(x, _PAIRS_FOR_BANDWIDTH)
    within = _squared_distances(pairs, pairs)[np.triu_indices(len(pairs), k=1)]
    width = float(np.median(within)) or 1.0

    def mean_kernel(a, b, same: bool) -> float:
        kernel = np.exp(-_squared_distances(a, b) / width)
        if not same:
            return float(kernel.mean())
        n = len(a)
        return float((kernel.sum() - np.trace(kernel)) / (n * (n - 1)))

    between = mean_kernel(x, y, False)
    return round(mean_kernel(x, x, True) + mean_kernel(y, y, True) - 2 * between, 4)


def compare_embeddings(reference: np.ndarray, span: np.ndarray) -> tuple[float | None, str]:
    """(`mmd`, what was compared), or (None, why not: a sample too small to compare, as for
    the class probabilities' statistic)."""
    sizes = (len(every_kth(reference, EMBEDDING_SAMPLE)), len(every_kth(span, EMBEDDING_SAMPLE)))
    why = too_few(*sizes)
    if why:
        return None, why
    compared = f"{sizes[1]:,} scored images against {sizes[0]:,} of its own eval split"
    return mmd(reference, span), compared
