"""The served version's reference images (components/checks/reference_images.py): the Trainer keeps
them with every version, the Evaluator scores the candidate and the served model on them class
by class, and a class that falls too far there blocks the push (exit 4, naming the class),
even when the candidate's own eval split, whose labels the new span wrote, says it is better."""

import json
import re

import numpy as np
import pytest
from tfx.components.evaluator import executor as tfx_evaluator
from tfx.types import standard_artifacts

from components.checks import reference_images as ri
from components.contract import LABEL_NAMES, REFERENCE_CHECK_FILE
from components.served_state import class_check
from components.served_state import executor as served_state
from pipeline.local import evaluation as evaluation_facts

CAT, DOG = LABEL_NAMES.index("cat"), LABEL_NAMES.index("dog")


def _images(labels: np.ndarray) -> np.ndarray:
    """Images whose brightness gives their class away: class c is filled with 20 c + 10.
    One pixel numbers the images of each class (0, 1, ...): too little to move the
    brightness, enough for a candidate to miss a chosen share of one class."""
    images = np.broadcast_to((20 * labels + 10).astype(np.uint8)[:, None, None, None],
                             (len(labels), 32, 32, 3)).copy()  # fmt: skip
    for label in range(10):
        where = np.flatnonzero(labels == label)
        images[where, 0, 0, 1] = np.arange(len(where)) % 256
    return images


def _labels(n: int) -> np.ndarray:
    return np.random.default_rng(n).permutation(np.arange(n) % 10)


def _save_model(folder, exchanged: tuple[int, int] | None = None, misses: int = 0):
    """A SavedModel whose `logits` read the class off the brightness; `exchanged` swaps the
    predictions of two classes, as a model trained on labels exchanged between them does;
    `misses` cats (the first of their class, by the numbering pixel) are taken for dogs."""
    import tensorflow as tf

    order = list(range(10))
    if exchanged:
        a, b = exchanged
        order[a], order[b] = b, a

    def logits(images):
        level = tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2, 3])
        guess = tf.cast(tf.round((level - 10.0) / 20.0), tf.int32)
        missed = (guess == CAT) & (tf.cast(images[:, 0, 0, 1], tf.int32) < misses)
        guess = tf.where(missed, DOG, guess)
        return 10.0 * tf.one_hot(tf.gather(tf.constant(order), guess), 10)

    module = tf.Module()
    module.logits = tf.function(
        logits, input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.uint8)]
    )
    tf.saved_model.save(module, str(folder))
    return folder


def _keep_reference(model_dir, labels):
    (model_dir / "assets.extra").mkdir(exist_ok=True)
    (model_dir / ri.REFERENCE_FILE).write_bytes(
        ri.to_bytes(ri.ReferenceImages(_images(labels), labels))
    )


# -- the set --------------------------------------------------------------------------------


def test_the_set_fills_up_with_eval_images_and_keeps_what_it_had():
    first = ri.grow(None, _images(_labels(200)), _labels(200), size=300)
    assert np.array_equal(first.labels, _labels(200))
    later = ri.grow(first, _images(_labels(1000)), _labels(1000), size=300)
    assert len(later) == 300
    assert np.array_equal(later.labels[:200], first.labels)  # kept first, never replaced
    assert np.array_equal(later.labels[200:], _labels(1000)[::10])  # evenly spaced
    full = ri.grow(later, _images(_labels(1000)), _labels(1000), size=300)
    assert np.array_equal(full.labels, later.labels) and np.array_equal(full.images, later.images)


def test_the_set_survives_its_file_and_a_bad_file_is_named():
    labels = _labels(40)
    kept = ri.ReferenceImages(_images(labels), labels)
    back = ri.from_bytes(ri.to_bytes(kept), "x.npz")
    assert np.array_equal(back.images, kept.images) and np.array_equal(back.labels, labels)
    with pytest.raises(ValueError, match=r"reference_images\.npz: not a reference image set"):
        ri.from_bytes(b"not numpy", "v/assets.extra/reference_images.npz")


def test_the_trainer_carries_the_served_set_into_the_new_version(tmp_path):
    import tensorflow as tf

    from components.trainer import export

    served = tmp_path / "served"
    served.mkdir()
    _keep_reference(served, _labels(100))
    new_labels = _labels(5000)
    export.write_reference_images(
        str(served),
        tf.constant(_images(new_labels)),
        tf.constant(new_labels),
        str(tmp_path / "new"),
    )
    written = ri.from_bytes((tmp_path / "new" / ri.REFERENCE_FILE).read_bytes(), "new")
    assert len(written) == ri.REFERENCE_SIZE
    assert np.array_equal(written.labels[:100], _labels(100))
    # the first version starts the set from its own eval images
    export.write_reference_images(
        str(tmp_path / "nothing"), tf.constant(_images(new_labels)), tf.constant(new_labels),
        str(tmp_path / "first"),
    )  # fmt: skip
    first = ri.from_bytes((tmp_path / "first" / ri.REFERENCE_FILE).read_bytes(), "first")
    assert np.array_equal(first.labels, new_labels[np.arange(2000) * 5000 // 2000])


def test_a_class_falling_beyond_the_margin_is_named():
    labels = _labels(400)
    right = np.eye(10)[labels]
    swapped = np.eye(10)[np.where(labels == CAT, DOG, np.where(labels == DOG, CAT, labels))]
    found = ri.check(right, swapped, labels, 0.15)
    assert [label for label, _ in found.drops()] == [CAT, DOG] or [
        label for label, _ in found.drops()
    ] == [DOG, CAT]
    pattern = r"class (cat|dog) on the served version's 400 reference images: 100.0% served"
    assert re.search(pattern + r", 0.0% candidate \(falls 100.0 points", found.problems()[0])
    assert ri.check(right, right, labels, 0.15).problems() == []
    # a class with too few images is not judged
    few = np.array([0] * 10 + [1] * 30)
    assert ri.class_accuracy(np.eye(10)[few], few)[0] is None


# -- the Evaluator --------------------------------------------------------------------------


def _evaluate(tmp_path, monkeypatch, candidate_exchanged=None, reference=True, blessed=True,
              misses=0, properties=None, images=400):  # fmt: skip
    """The Evaluator with TFMA replaced by a blessing (or not) of the candidate's own eval
    split; the baseline is the served model keeping its reference images."""

    def tfma_verdict(self, inputs, outputs, props):
        name = "BLESSED" if blessed else "NOT_BLESSED"
        (tmp_path / "blessing" / name).write_text("")
        outputs["blessing"][0].set_int_custom_property("blessed", int(blessed))

    monkeypatch.setattr(tfx_evaluator.Executor, "Do", tfma_verdict)
    baseline = standard_artifacts.Model()
    baseline.uri = str(tmp_path / "served")
    _save_model(tmp_path / "served" / "Format-Serving")
    if reference:
        _keep_reference(tmp_path / "served" / "Format-Serving", _labels(images))
    candidate = standard_artifacts.Model()
    candidate.uri = str(tmp_path / "candidate")
    _save_model(tmp_path / "candidate" / "Format-Serving", candidate_exchanged, misses)
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(tmp_path / "evaluation"), str(tmp_path / "blessing")
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "blessing").mkdir()
    served_state.EvaluatorExecutor().Do(
        {"model": [candidate], "baseline_model": [baseline],
         "examples": [standard_artifacts.Examples()]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        {"max_class_drop": 0.15} if properties is None else properties,
    )  # fmt: skip
    return evaluation, blessing


def test_a_candidate_that_learned_exchanged_labels_is_not_pushed(tmp_path, monkeypatch):
    evaluation, blessing = _evaluate(tmp_path, monkeypatch, candidate_exchanged=(CAT, DOG))
    assert blessing.get_int_custom_property("blessed") == 0
    assert (tmp_path / "blessing" / "NOT_BLESSED").exists()
    assert not (tmp_path / "blessing" / "BLESSED").exists()
    assert re.match(r"class (cat|dog) on the served", blessing.get_string_custom_property(
        class_check.CLASS_REGRESSION_KEY))  # fmt: skip
    line, problems = evaluation_facts.reference_facts(evaluation.uri)
    assert len(problems) == 2 and "100.0 points below the served model" in line
    assert (
        json.loads((tmp_path / "evaluation" / REFERENCE_CHECK_FILE).read_text())["served"][CAT]
        == 1.0
    )


def test_a_candidate_as_good_per_class_stays_blessed(tmp_path, monkeypatch):
    evaluation, blessing = _evaluate(tmp_path, monkeypatch)
    assert blessing.get_int_custom_property("blessed") == 1
    assert (tmp_path / "blessing" / "BLESSED").exists()
    line, problems = evaluation_facts.reference_facts(evaluation.uri)
    assert problems == [] and line.startswith("no class below the served model")


def test_a_candidate_tfma_refused_stays_refused_with_its_classes_named(tmp_path, monkeypatch):
    evaluation, blessing = _evaluate(
        tmp_path, monkeypatch, candidate_exchanged=(CAT, DOG), blessed=False
    )
    assert blessing.get_int_custom_property("blessed") == 0
    assert evaluation_facts.reference_facts(evaluation.uri)[1]


def test_a_served_version_without_reference_images_blocks_the_push_saying_why(
    tmp_path, monkeypatch
):
    """The one check the new labels cannot move fails closed: at dd83add a served version
    without its reference images let an exchanged candidate through, blessed."""
    evaluation, blessing = _evaluate(
        tmp_path, monkeypatch, candidate_exchanged=(CAT, DOG), reference=False
    )
    assert blessing.get_int_custom_property("blessed") == 0
    assert (tmp_path / "blessing" / "NOT_BLESSED").exists()
    assert not (tmp_path / "blessing" / "BLESSED").exists()
    line, problems = evaluation_facts.reference_facts(evaluation.uri)
    assert line.startswith("not checked: the served version keeps no")
    assert problems == [blessing.get_string_custom_property(class_check.CLASS_REGRESSION_KEY)]
    assert "--max-class-drop 1" in problems[0] and "keeps no reference images" in problems[0]


def test_a_damaged_reference_set_is_named_and_blocks_the_push(tmp_path, monkeypatch):
    (tmp_path / "served" / "Format-Serving" / "assets.extra").mkdir(parents=True)
    (tmp_path / "served" / "Format-Serving" / ri.REFERENCE_FILE).write_bytes(b"half a file")
    evaluation, blessing = _evaluate(tmp_path, monkeypatch, reference=False)
    assert blessing.get_int_custom_property("blessed") == 0
    line, problems = evaluation_facts.reference_facts(evaluation.uri)
    assert line.startswith("not checked: ") and "reference_images.npz: not a reference" in line
    assert len(problems) == 1 and "reference_images.npz: not a reference" in problems[0]


def test_a_margin_of_1_checks_nothing_and_keeps_the_blessing(tmp_path, monkeypatch):
    """No class can fall more than 100 points: `--max-class-drop 1` is how a team pushes
    over a served version that keeps no reference images."""
    margin = {"max_class_drop": 1.0}
    evaluation, blessing = _evaluate(tmp_path, monkeypatch, reference=False, properties=margin)
    assert blessing.get_int_custom_property("blessed") == 1
    line, problems = evaluation_facts.reference_facts(evaluation.uri)
    assert line == "not checked: --max-class-drop 1 (no class can fall further)" and not problems


# 1,000 reference images hold 100 cats: a cat taken for a dog is one point of that class.
@pytest.mark.parametrize("misses, blessed", [(24, 1), (25, 1), (26, 0)])
def test_the_default_margin_lets_a_class_fall_25_points_and_no_further(
    tmp_path, monkeypatch, misses, blessed
):
    assert ri.MAX_CLASS_DROP == 0.25
    _, blessing = _evaluate(tmp_path, monkeypatch, misses=misses, properties={}, images=1000)
    assert blessing.get_int_custom_property("blessed") == blessed


@pytest.mark.parametrize("misses, blessed", [(0, 1), (1, 0)])
def test_a_margin_of_0_is_honoured_not_read_as_the_default(tmp_path, monkeypatch, misses, blessed):
    """`--max-class-drop 0` became 0.25 at dd83add (`float(value or default)`)."""
    margin = {"max_class_drop": 0.0}
    _, blessing = _evaluate(tmp_path, monkeypatch, misses=misses, properties=margin, images=1000)
    assert blessing.get_int_custom_property("blessed") == blessed
