"""components/checks/label_agreement.py on a simulated served model: right on 80% of images, its
errors spread over the other classes, its probabilities peaked on what it predicts. Pure
numpy: the judgement's rules, thresholds and messages; tests/test_data_validation.py runs
them in the gate with a real SavedModel."""

import re

import numpy as np
import pytest

from components.checks import drift
from components.checks import label_agreement as la


def _model(true: np.ndarray, seed: int, accuracy: float = 0.8, blur: float = 0.0):
    """Class probabilities of a model right on `accuracy` of `true` (`blur` flattens them)."""
    rng = np.random.default_rng(seed)
    predicted = np.where(
        rng.random(len(true)) < accuracy, true, (true + rng.integers(1, 10, len(true))) % 10
    )
    logits = rng.normal(0, 1, (len(true), 10))
    logits[np.arange(len(true)), predicted] += 4.0 * (1.0 - blur)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exp / exp.sum(axis=1, keepdims=True)


def _labels(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.arange(n) % 10)


@pytest.fixture(scope="module")
def served():
    true = _labels(2000, 0)
    return la.reference(_model(true, 1), true)


def _judge(probabilities, labels, served):
    return la.judge(probabilities, labels, [str(i) for i in range(len(labels))], served, "ref")


def test_a_clean_span_passes_every_check(served):
    true = _labels(3000, 2)
    judged = _judge(_model(true, 3), true, served)
    assert judged.problems() == [] and judged.shift_problems() == []
    assert judged.exchanged == () and abs(judged.noise - judged.reference_noise) < 0.03
    assert judged.shift < drift.SHIFT_THRESHOLD


def test_exchanged_classes_are_named_with_both_directions(served):
    true = _labels(3000, 2)
    given = true.copy()
    given[true == 3], given[true == 5] = 5, 3
    [line] = [x for x in _judge(_model(true, 3), given, served).problems() if "exchanged" in x]
    assert re.match(r"labels: labels of cat and dog look exchanged: [78]\d% ", line), line
    assert "of images labelled dog are predicted cat" in line and line.endswith("(ref)")


def test_a_quarter_of_random_labels_is_estimated_and_stops(served):
    true = _labels(3000, 2)
    rng = np.random.default_rng(4)
    given = np.where(rng.random(3000) < 0.25, rng.integers(0, 10, 3000), true)
    judged = _judge(_model(true, 3), given, served)
    assert judged.noise_over and judged.noise - judged.reference_noise > 0.15
    assert judged.exchanged == ()


def test_a_less_sure_model_is_a_shift_and_small_samples_are_not_compared(served):
    true = _labels(3000, 2)
    judged = _judge(_model(true, 3, blur=0.6), true, served)
    [line] = judged.shift_problems()
    assert line.startswith("drift: the served model's class probabilities: Kolmogorov-Smirnov")
    few = _judge(_model(true[:800], 3), true[:800], served)
    assert few.shift is None and few.shift_skipped.startswith("too few images (2,000 of its")
    assert la.judge(_model(true, 3), true, [""] * 3000, None, "x").shift_skipped == (
        "the served version keeps no sample"
    )


def test_a_version_served_from_10000_images_is_checked_for_shift():
    """Its eval split (the class-balanced carve of 10,000 images) holds 994-996 images; with
    a minimum of 1,000 a side the shift check never ran for such a version."""
    true = _labels(996, 5)
    small = la.reference(_model(true, 6), true)
    assert small.sample is not None and len(small.sample) == 996
    judged = _judge(_model(_labels(3000, 2), 3), _labels(3000, 2), small)
    assert judged.shift is not None and judged.shift_skipped == ""


def test_the_reference_keeps_tiny_probabilities_apart():
    """Rounded to decimals, the many near-zero probabilities became ties at 0, which made a
    clean span read as a shift of about 0.5."""
    true = _labels(1000, 0)
    found = la.reference(_model(true, 1), true)
    back = la.Reference.from_json(found.to_json())
    assert (back.sample > 0).all()
    assert drift.ks_statistic(back.sample[:, 0], found.sample[:, 0]) < 0.01
