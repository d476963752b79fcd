"""What the served model says about a span's labels (issue 55): how often its predictions agree
with the labels, per pair of classes, against how often they agreed on the model's own eval
split (its reference, written beside the model at export), and a confident-learning estimate
of the share of wrong labels.

The Trainer writes the reference (`write_reference`, on its eval split, into the SavedModel's
`assets.extra/`, which TF Serving ignores and every pusher copies), so every pushed version
carries it; DataValidationGate scores a sample of the new span with the served model
(`score`) and judges it (`judge`). Both score with one view (`logits`), not the serving
signature's test-time augmentation: the same function on both sides, at a sixth of the cost.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from components.checks.drift import SHIFT_THRESHOLD, class_shift, every_kth, too_few
from components.contract import LABEL_NAMES, NUM_CLASSES

REFERENCE_FILE = os.path.join("assets.extra", "label_reference.json")
# Judged when the served version keeps no reference (pushed before references existed): how
# often a fair model confuses one class with another at most (CIFAR-10's worst pair for the
# models served here, cat -> dog, is 10-15%).
DEFAULT_CONFUSION = 0.15
# A pair of classes looks exchanged when, in both directions, the share of images labelled
# one and predicted the other exceeds the reference's by this much (docs/data-validation.md
# has the measured values: clean spans stay within a few points of the reference).
EXCHANGE_MARGIN = 0.25
# The span's estimated share of wrong labels may exceed the reference's by this much.
NOISE_MARGIN = 0.08
# At most this many records are scored (a deterministic sample: every k-th record).
SCORED_SAMPLE = 5000
# Class probabilities of at most this many eval images are kept in the reference.
REFERENCE_SAMPLE = 2000
SUSPECTS_KEPT = 100


def confusion(labels: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """counts[i, j]: images labelled i that the model predicts as j."""
    counts = np.zeros((NUM_CLASSES, NUM_CLASSES), np.int64)
    np.add.at(counts, (labels.astype(np.int64), predicted.astype(np.int64)), 1)
    return counts


def rates(counts: np.ndarray) -> np.ndarray:
    """Each row of a confusion matrix as shares of its label (0 where a label is absent)."""
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)


def noise_estimate(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Confident learning's estimate of the share of wrong labels (Northcutt et al., the
    calibrated confident joint): an image counts toward (given i, true j) when its
    probability of j reaches class j's mean self-confidence, j the likeliest such class;
    rows are rescaled to the label counts; the off-diagonal mass is the estimate."""
    labels = labels.astype(np.int64)
    thresholds = np.array(
        [probabilities[labels == j, j].mean() if np.any(labels == j) else 1.0
         for j in range(NUM_CLASSES)]
    )  # fmt: skip
    above = probabilities >= thresholds
    confident = np.where(above, probabilities, -1.0)
    has_any = above.any(axis=1)
    joint = confusion(labels[has_any], confident[has_any].argmax(axis=1)).astype(np.float64)
    label_counts = np.bincount(labels, minlength=NUM_CLASSES)
    row_totals = joint.sum(axis=1, keepdims=True)
    calibrated = np.divide(
        joint * label_counts[:, None], row_totals, out=np.zeros_like(joint), where=row_totals > 0
    )
    total = calibrated.sum()
    return float(1.0 - np.trace(calibrated) / total) if total else 0.0


def suspects(
    probabilities: np.ndarray, labels: np.ndarray, ids: list[str], kept: int = SUSPECTS_KEPT
) -> list[dict]:
    """The images whose label the model believes least (lowest probability of the given
    label, predicted otherwise), most suspect first."""
    labels = labels.astype(np.int64)
    predicted = probabilities.argmax(axis=1)
    given = probabilities[np.arange(len(labels)), labels]
    order = [i for i in np.argsort(given, kind="stable") if predicted[i] != labels[i]][:kept]
    return [
        {
            "record_id": ids[i],
            "given": LABEL_NAMES[labels[i]],
            "predicted": LABEL_NAMES[predicted[i]],
            "confidence": round(float(probabilities[i, predicted[i]]), 4),
        }
        for i in order
    ]


@dataclasses.dataclass(frozen=True)
class Reference:
    """The served model on its own eval split: label-by-prediction counts, its noise estimate
    there (what clean data looks like to it), and a sample of its class probabilities there
    (what clean images look like to it: the representation-shift baseline)."""

    counts: np.ndarray
    noise: float
    sample: np.ndarray | None = None  # [n, NUM_CLASSES] probabilities; None: not kept

    def to_json(self) -> str:
        data = {"confusion": self.counts.tolist(), "noise_estimate": self.noise}
        if self.sample is not None:  # 4 significant digits: tiny probabilities stay apart
            data["probabilities_sample"] = [[float(f"{v:.4g}") for v in row] for row in self.sample]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Reference:
        data = json.loads(text)
        sample = data.get("probabilities_sample")
        return cls(
            np.asarray(data["confusion"], np.int64),
            float(data["noise_estimate"]),
            None if sample is None else np.asarray(sample, np.float64),
        )


def reference(probabilities: np.ndarray, labels: np.ndarray) -> Reference:
    return Reference(
        confusion(labels, probabilities.argmax(axis=1)),
        noise_estimate(probabilities, labels),
        every_kth(probabilities, REFERENCE_SAMPLE),
    )


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What the served model says about a span's labels, and what stops the run."""

    scored: int
    reference: str  # where the expected agreement came from
    counts: np.ndarray
    exchanged: tuple[
        tuple[int, int, float, float, float, float], ...
    ]  # i, j, o_ij, o_ji, r_ij, r_ji
    noise: float
    reference_noise: float | None
    suspects: list[dict]
    shift: float | None = None  # drift.class_shift; None: the reference keeps no sample
    shift_class: int = 0
    shift_skipped: str = ""  # why the shift was not measured
    # The embeddings' maximum mean discrepancy (components/checks/drift.py), measured by
    # the gate; None: not measured, and why.
    embedding_shift: float | None = None
    embedding_threshold: float = 0.0
    embedding_compared: str = ""  # what was compared, e.g. "3,000 scored images against ..."
    embedding_skipped: str = "not measured"

    def shift_problems(self) -> list[str]:
        """The images' drift as the served model sees it (overridden with --accept-drift)."""
        lines = []
        if self.shift is not None and self.shift > SHIFT_THRESHOLD:
            lines.append(
                f"drift: the served model's class probabilities: Kolmogorov-Smirnov statistic "
                f"{self.shift:.3f} > threshold {SHIFT_THRESHOLD:g} (class "
                f"'{LABEL_NAMES[self.shift_class]}'; {self.scored:,} scored images against its "
                "own eval split): the images look unlike the data it was trained on"
            )
        if self.embedding_shift is not None and self.embedding_shift > self.embedding_threshold:
            lines.append(
                f"drift: the served model's embeddings (its penultimate layer): maximum mean "
                f"discrepancy {self.embedding_shift:.4f} > threshold "
                f"{self.embedding_threshold:g} ({self.embedding_compared}): the images look "
                "unlike the data it was trained on"
            )
        return lines

    @property
    def noise_over(self) -> bool:
        baseline = self.reference_noise if self.reference_noise is not None else 0.0
        return self.noise - baseline > NOISE_MARGIN

    def problems(self) -> list[str]:
        lines = []
        for i, j, o_ij, o_ji, r_ij, r_ji in self.exchanged:
            lines.append(
                f"labels: labels of {LABEL_NAMES[i]} and {LABEL_NAMES[j]} look exchanged: "
                f"{o_ji:.0%} of images labelled {LABEL_NAMES[j]} are predicted "
                f"{LABEL_NAMES[i]} and {o_ij:.0%} the other way; the served model confuses "
                f"them {max(r_ij, r_ji):.0%} ({self.reference})"
            )
        if self.noise_over:
            baseline = (
                f"{self.reference_noise:.1%} on its own eval split"
                if self.reference_noise is not None
                else "no reference kept"
            )
            lines.append(
                f"labels: an estimated {self.noise:.1%} of the span's labels are wrong "
                f"(confident learning on {self.scored:,} scored images; {baseline}; at most "
                f"{NOISE_MARGIN:.0%} more is accepted)"
            )
        return lines

    def to_json(self) -> dict:
        return {
            "skipped": "",
            "scored": self.scored,
            "reference": self.reference,
            "confusion": self.counts.tolist(),
            "exchanged": [
                {"labels": [LABEL_NAMES[i], LABEL_NAMES[j]], "observed": [o_ij, o_ji],
                 "reference": [r_ij, r_ji]}
                for i, j, o_ij, o_ji, r_ij, r_ji in self.exchanged
            ],
            "noise_estimate": self.noise,
            "reference_noise_estimate": self.reference_noise,
            "noise_over": self.noise_over,
            "shift": self.shift,
            "shift_class": LABEL_NAMES[self.shift_class],
            "shift_threshold": SHIFT_THRESHOLD,
            "shift_skipped": self.shift_skipped,
            "embedding_shift": self.embedding_shift,
            "embedding_threshold": self.embedding_threshold,
            "embedding_compared": self.embedding_compared,
            "embedding_skipped": self.embedding_skipped if self.embedding_shift is None else "",
            "suspects": self.suspects,
        }  # fmt: skip


def judge(
    probabilities: np.ndarray,
    labels: np.ndarray,
    ids: list[str],
    served: Reference | None,
    reference_name: str,
) -> Judgement:
    """Exchanged pairs (both directions beyond the reference by EXCHANGE_MARGIN) and the
    estimated share of wrong labels, of the scored sample."""
    counts = confusion(labels, probabilities.argmax(axis=1))
    observed = rates(counts)
    if served is None:
        expected = np.full(observed.shape, DEFAULT_CONFUSION)
    else:
        expected = rates(served.counts)
    exchanged = []
    for i in range(NUM_CLASSES):
        for j in range(i + 1, NUM_CLASSES):
            if (observed[i, j] - expected[i, j] > EXCHANGE_MARGIN
                    and observed[j, i] - expected[j, i] > EXCHANGE_MARGIN):  # fmt: skip
                exchanged.append(
                    (i, j, *(round(float(x), 4) for x in (
                        observed[i, j], observed[j, i], expected[i, j], expected[j, i])))
                )  # fmt: skip
    shift, shift_class, shift_skipped = None, 0, "the served version keeps no sample"
    if served is not None and served.sample is not None:
        shift_skipped = too_few(len(served.sample), len(probabilities))
        if not shift_skipped:
            shift, shift_class = class_shift(probabilities, served.sample)
    return Judgement(
        shift=shift,
        shift_class=shift_class,
        shift_skipped=shift_skipped,
        scored=int(len(labels)),
        reference=reference_name,
        counts=counts,
        exchanged=tuple(exchanged),
        noise=round(noise_estimate(probabilities, labels), 4),
        reference_noise=None if served is None else round(served.noise, 4),
        suspects=suspects(probabilities, labels, ids),
    )
