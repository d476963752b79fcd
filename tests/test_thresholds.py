"""Every margin of the gate and the Evaluator, just inside and just outside: a case at the
margin (or one step inside it) passes and one step beyond it stops, so moving a constant
fails here. The measured tables the margins were set from are in docs/data-validation.md;
the class-drop margin's pair is in tests/test_reference_images.py (24 and 25 points pass,
26 stop) and --max-class-drop 0's there too."""

import dataclasses

import numpy as np
import pytest

from components.checks import drift
from components.checks import label_agreement as la
from components.contract import LABEL_NAMES
from components.validation_gate import duplicates as gate_duplicates
from components.validation_gate import labels as gate_labels

CAT, DOG = LABEL_NAMES.index("cat"), LABEL_NAMES.index("dog")
PER_CLASS = 100  # 1,000 images: one image of a class is one point of it


def _labels() -> np.ndarray:
    return np.repeat(np.arange(10), PER_CLASS)


def _one_hot(predicted: np.ndarray) -> np.ndarray:
    """A model sure of each prediction: its confident-learning noise estimate is exactly the
    share of images it predicts otherwise than labelled."""
    return np.eye(10)[predicted]


def _perfect_reference(sample: np.ndarray | None = None) -> la.Reference:
    labels = _labels()
    return la.Reference(la.confusion(labels, labels), 0.0, sample)


def _judge(probabilities, labels, served):
    return la.judge(probabilities, labels, [str(i) for i in range(len(labels))], served, "ref")


@pytest.mark.parametrize("swapped, exchanged", [(25, False), (26, True)])
def test_a_pair_is_exchanged_beyond_25_points_both_ways(swapped, exchanged):
    """The served model never confused cat and dog; now `swapped` of each are predicted as
    the other: 25 points over its reference passes, 26 stop."""
    assert la.EXCHANGE_MARGIN == 0.25
    labels = _labels()
    predicted = labels.copy()
    predicted[np.flatnonzero(labels == CAT)[:swapped]] = DOG
    predicted[np.flatnonzero(labels == DOG)[:swapped]] = CAT
    judged = _judge(_one_hot(predicted), labels, _perfect_reference())
    assert bool(judged.exchanged) is exchanged
    assert any("cat and dog look exchanged" in line for line in judged.problems()) is exchanged


@pytest.mark.parametrize("wrong, stops", [(80, False), (81, True)])
def test_wrong_labels_stop_beyond_8_points_over_the_reference(wrong, stops):
    """`wrong` of 1,000 images predicted as the next class (8 or 9 per class: never a pair
    both ways), against a reference that read no wrong label."""
    assert la.NOISE_MARGIN == 0.08
    labels = _labels()
    predicted = labels.copy()
    picked = np.concatenate([np.flatnonzero(labels == c)[: wrong // 10 + (c < wrong % 10)]
                             for c in range(10)])  # fmt: skip
    predicted[picked] = (labels[picked] + 1) % 10
    judged = _judge(_one_hot(predicted), labels, _perfect_reference())
    assert judged.noise == pytest.approx(wrong / 1000)
    assert judged.noise_over is stops and judged.exchanged == ()
    assert any("labels are wrong" in line for line in judged.problems()) is stops


@pytest.mark.parametrize("moved, stops", [(100, False), (101, True)])
def test_the_class_probabilities_drift_beyond_a_ks_statistic_of_0_1(moved, stops):
    """Class 0's probabilities on the span are the eval split's moved up by `moved` of 1,000
    steps: a Kolmogorov-Smirnov statistic of 0.100 passes, 0.101 stops."""
    assert drift.SHIFT_THRESHOLD == 0.1
    steps = np.arange(1000, dtype=np.float64)
    sample = np.tile(steps[:, None], (1, 10))
    span = sample.copy()
    span[:, 0] += moved
    judged = _judge(span, _labels(), _perfect_reference(sample))
    assert judged.shift == pytest.approx(moved / 1000) and judged.shift_class == 0
    assert bool(judged.shift_problems()) is stops


def _mmd_span(reference: np.ndarray, target: float) -> np.ndarray:
    """Embeddings whose MMD against `reference` is `target` (to the 4 decimals `mmd`
    keeps): fresh draws of the reference's distribution, moved along one axis."""
    fresh = np.random.default_rng(1).normal(size=reference.shape)
    low, high = 0.0, 2.0
    for _ in range(60):
        middle = (low + high) / 2
        moved = fresh + np.eye(reference.shape[1])[0] * middle
        found = drift.mmd(reference, moved)
        if found == target:
            return moved
        low, high = (middle, high) if found < target else (low, middle)
    raise AssertionError(f"no shift reads {target}")


@pytest.mark.parametrize("target, stops", [(0.005, False), (0.0051, True)])
def test_the_embeddings_drift_beyond_an_mmd_of_0_005(tmp_path, target, stops):
    """The gate's embedding check on the served version's kept sample (float16, as the
    Trainer writes it): an MMD of 0.0050 passes, 0.0051 stops."""
    assert drift.MMD_THRESHOLD == 0.005
    written = np.random.default_rng(0).normal(size=(1000, 8))
    (tmp_path / "assets.extra").mkdir()
    (tmp_path / drift.EMBEDDING_FILE).write_bytes(drift.embeddings_to_bytes(written))
    kept = drift.embeddings_from_bytes(drift.embeddings_to_bytes(written), "kept")
    fields = gate_labels._embedding_shift(str(tmp_path), _mmd_span(kept, target), "7")
    assert fields["embedding_shift"] == target
    labels = _labels()
    judged = _judge(_one_hot(labels), labels, _perfect_reference())
    judged = dataclasses.replace(judged, **fields)
    assert bool(judged.shift_problems()) is stops


@pytest.mark.parametrize("repeated, stops", [(10, False), (11, True)])
def test_copies_stop_beyond_1_percent_of_the_images(repeated, stops):
    """Of 1,000 images, 10 copies (exact and near together) pass and 11 stop."""
    exact = repeated // 2
    copies = {"images": 1000, "copies": exact, "near_copies": repeated - exact,
              "eval_in_train": 0}  # fmt: skip
    problems = gate_duplicates.duplicate_problems(copies, None)
    assert bool(problems) is stops
    if stops:
        assert problems[0].startswith("duplicates: 11 of 1,000 images are copies")


@pytest.mark.parametrize("seen, stops", [(10, False), (11, True)])
def test_new_train_images_the_served_version_trained_on_stop_beyond_1_percent(seen, stops):
    """Of 1,000 train images of the new spans, 10 the served version was trained on pass
    and 11 stop (the ExampleGen's count, components/cifar10_example_gen/seen_train.py)."""
    copies = {"images": 1100, "copies": 0, "near_copies": 0, "eval_in_train": 0}
    recorded = {"copies_of_train": 0, "seen_by_served": 0, "served_version": "7",
                "not_checked": "", "new_spans": [3], "new_train_records": 1000,
                "train_seen_by_served": seen, "train_seen_by_span": {"3": seen}}  # fmt: skip
    problems = gate_duplicates.duplicate_problems(copies, recorded)
    assert bool(problems) is stops
    if stops:
        assert problems[0].startswith("duplicates: 11 of 1,000 train images new to served ")
