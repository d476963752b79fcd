"""The served model scoring a sample of a split's records as a Beam step
(components/validation_gate/scoring.py): RunInference with the served SavedModel on the
records' pixels, the same probabilities and embeddings as scoring them directly."""

import numpy as np
import pytest
import tensorflow as tf
from test_data_validation import _Oracle, _sample, _save_oracle

from components.checks import model_scoring
from components.cifar10_example_gen.executor import to_example
from components.cifar10_example_gen.shards import Record
from components.cifar10_example_gen.summaries import summarize
from components.validation_gate import scoring


def _split(folder, spans: dict[int, tuple]) -> str:
    """A split folder of gzipped TFRecords, one file per span, as the ExampleGen writes."""
    folder.mkdir(parents=True)
    for span, (images, labels) in spans.items():
        values = np.stack(list(summarize(images).values()), axis=1)
        with tf.io.TFRecordWriter(str(folder / f"span-{span}.gz"), options="GZIP") as writer:
            for i, (image, label) in enumerate(zip(images, labels)):
                record = Record(
                    f"span-{span}/b.bin:{i:04d}", int(label), image.tobytes(), values[i]
                )
                writer.write(to_example(record).SerializeToString())
    return str(folder)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served") / "1"
    folder.mkdir()
    _save_oracle(folder, reference=False)
    return str(folder)


def test_every_record_scored_in_beam_as_the_model_scores_it_directly(tmp_path, model_dir):
    images, labels = _sample(seed=2, per_class=30)
    split = _split(tmp_path / "train", {0: (images, labels)})
    scored = scoring.score_sample(split, model_dir, 1, None, str(tmp_path))
    assert scored.ids == sorted(f"span-0/b.bin:{i:04d}" for i in range(300))
    order = [int(x.rsplit(":", 1)[1]) for x in scored.ids]
    np.testing.assert_array_equal(scored.labels, labels[order])
    probabilities, embeddings = model_scoring.scores(model_dir, images[order])
    np.testing.assert_allclose(scored.probabilities, probabilities, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scored.embeddings, embeddings, rtol=1e-5, atol=1e-6)
    assert (tmp_path / scoring.SCORED_FILE).exists()  # left in the gate's output


def test_a_sample_is_one_record_in_k_the_same_each_time_and_of_the_spans_asked(tmp_path, model_dir):
    spans = {1: _sample(seed=2, per_class=60), 2: _sample(seed=3, per_class=60)}
    split = _split(tmp_path / "train", spans)
    first = scoring.score_sample(split, model_dir, 4, None, str(tmp_path / "a"))
    again = scoring.score_sample(split, model_dir, 4, None, str(tmp_path / "b"))
    assert first.ids == again.ids and 240 <= len(first.ids) <= 360  # 1,200 records / 4
    only_two = scoring.score_sample(split, model_dir, 4, [2], str(tmp_path / "c"))
    assert only_two.ids == [x for x in first.ids if x.startswith("span-2/")]


def test_a_model_without_features_is_scored_without_embeddings(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    _save_oracle(folder, reference=False, features=False)
    images, labels = _sample(seed=2, per_class=5)
    split = _split(tmp_path / "train", {0: (images, labels)})
    scored = scoring.score_sample(split, str(folder), 1, None, str(tmp_path))
    assert scored.embeddings is None and scored.probabilities.shape == (50, 10)
    expected = tf.nn.softmax(_Oracle.logits(images)).numpy()
    order = [int(x.rsplit(":", 1)[1]) for x in scored.ids]
    np.testing.assert_allclose(scored.probabilities, expected[order], rtol=1e-5, atol=1e-6)
