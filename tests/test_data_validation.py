"""Images, not bytes: the per-image summaries, and DataValidationGate's skew and drift checks
called through `Executor().Do()` on statistics TFDV computes from generated images."""

import io
import json
import os
import re
import types

import numpy as np
import pandas as pd
import pytest
import tensorflow_data_validation as tfdv
from PIL import Image
from tfx.types import artifact_utils, standard_artifacts

from components.cifar10_example_gen.summaries import summarize
from components.contract import (
    COMPARISON_FILE,
    IMAGE_KEY,
    IMAGE_SUMMARY_FEATURES,
    LABEL_KEY,
    SERVED_STATISTICS_FILE,
)
from components.validation_gate import executor as gate_executor
from components.validation_gate.checks import DataValidationError
from components.validation_gate.comparison import (
    MIN_COMPARED_EXAMPLES,
    load_schema,
    statistics_options,
)
from components.validation_gate.executor import Executor
from components.validation_gate.spec import (
    ACCEPT_DRIFT_KEY,
)

import cifar_fixtures as fx

# Records per data set: above MIN_COMPARED_EXAMPLES, and enough that two samples of the
# generated images (narrow, two-peaked summaries, unlike photographs) stay within every
# threshold: at 1,500 their sharpness was 0.072 apart, at 3,000 0.044 (threshold 0.06).
SIZE = 3000


# --- the summaries ---


def test_summaries_of_known_images():
    gray = np.full((1, 32, 32, 3), 51, np.uint8)
    black_and_white = np.zeros((1, 32, 32, 3), np.uint8)
    black_and_white[:, :, 16:] = 255
    values = summarize(np.concatenate([gray, black_and_white]))
    assert tuple(values) == IMAGE_SUMMARY_FEATURES
    assert values["image_brightness"][0] == pytest.approx(51 / 255, abs=1 / 255)
    assert values["image_contrast"][0] == 0 and values["image_sharpness"][0] == 0
    assert values["image_blockiness"][0] == 1  # a flat image has no block edges
    assert values["image_clipped_fraction"].tolist() == [0, 1]  # only 0 and 255
    assert values["image_red_mean"][1] == pytest.approx(0.5)
    assert values["image_brightness"][1] == pytest.approx(0.5, abs=1 / 255)


def _blur(images):
    padded = np.pad(images.astype(np.float32), ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
    return np.round(sum(padded[:, i : i + 32, j : j + 32] for i in range(3) for j in range(3)) / 9)


def _jpeg(images, quality):
    out = np.empty_like(images)
    for i, image in enumerate(images):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
        out[i] = np.asarray(Image.open(buffer).convert("RGB"))
    return out


def test_summaries_move_with_what_happened_to_the_images():
    images = fx.make_images(fx.balanced_labels(20, seed=3), seed=3)
    before = {name: value.mean() for name, value in summarize(images).items()}
    darker = summarize((images * 0.6).astype(np.uint8))
    assert darker["image_brightness"].mean() < 0.65 * before["image_brightness"]
    assert summarize(_blur(images).astype(np.uint8))["image_sharpness"].mean() < (
        0.5 * before["image_sharpness"]
    )
    blocky = summarize(_jpeg(images, 10))["image_blockiness"].mean()
    assert blocky > 1.1 * summarize(_jpeg(images, 95))["image_blockiness"].mean()
    mirrored = summarize(images[:, :, ::-1])  # the same pixels: a mirror changes no summary
    assert mirrored["image_brightness"].mean() == pytest.approx(before["image_brightness"])


# --- the gate ---


def _statistics(images, labels):
    frame = pd.DataFrame(summarize(images))
    frame[LABEL_KEY] = labels.astype(np.int64)
    frame[IMAGE_KEY] = [image.tobytes() for image in images]
    return tfdv.generate_statistics_from_dataframe(frame, statistics_options(load_schema()))


def _sample(seed: int, per_class: int = SIZE // 10):
    labels = fx.balanced_labels(per_class, seed=seed)
    return fx.make_images(labels, seed=seed), labels


def _write(path, message):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(message.SerializeToString())


class _Oracle:
    """A served model for the fixture images, whose colour and stripes give the class away
    (cifar_fixtures.make_images): right on every clean image, as a good model is nearly."""

    @staticmethod
    def logits(images):
        import tensorflow as tf

        x = tf.cast(images, tf.float32)
        rows = tf.range(32) % 4 == 0
        plain = tf.reduce_mean(tf.boolean_mask(x, ~rows, axis=1), axis=[1, 2])  # [N, 3]
        striped = tf.reduce_mean(tf.boolean_mask(x, rows, axis=1), axis=[1, 2, 3])
        channel = tf.argmax(plain, axis=1, output_type=tf.int32)
        estimate = (tf.reduce_max(plain, axis=1) - 149.5) / 10.0
        stripes = striped - tf.reduce_mean(plain, axis=1) > 40.0
        classes = tf.range(10)
        wrong_channel = tf.not_equal(classes[None, :] % 3, channel[:, None])
        wrong_stripes = tf.not_equal(classes[None, :] >= 5, stripes[:, None])
        distance = tf.square(estimate[:, None] - tf.cast(classes[None, :], tf.float32))
        penalty = 50.0 * (tf.cast(wrong_channel, tf.float32) + tf.cast(wrong_stripes, tf.float32))
        return -4.0 * distance - penalty

    @staticmethod
    def features(images):
        """Its logits, and an embedding: the mean of each channel, how much brighter than
        the image every fourth row and every fourth column are (rotated images move stripes
        from rows to columns), and what tells one image of a class from another, as a
        trained model's embedding does (`_detail`)."""
        import tensorflow as tf

        x = tf.cast(images, tf.float32) / 255.0
        lines, mean = tf.range(32) % 4 == 0, tf.reduce_mean(x, axis=[1, 2, 3])

        def striped(axis):
            return 4.0 * (tf.reduce_mean(tf.boolean_mask(x, lines, axis=axis), [1, 2, 3]) - mean)

        embedding = tf.concat(
            [
                tf.reduce_mean(x, axis=[1, 2]),
                tf.stack([striped(1), striped(2)], axis=1),
                _Oracle._detail(x),
            ],
            axis=1,
        )
        return {"embeddings": embedding, "logits": _Oracle.logits(images)}

    @staticmethod
    def _detail(x):
        """The image's own noise, as the magnitudes of its grey level's spectrum without the
        rows and columns a colour or stripes light up, centred, of length 0.5: alike for an
        image and a copy of it shifted (exactly so for a circular shift), unlike for two
        images of one class (without it, their embeddings point one way: copies by the
        gate's embedding check)."""
        import tensorflow as tf

        grey = tf.reduce_mean(x, axis=3)
        spectrum = tf.abs(tf.signal.fft2d(tf.complex(grey, tf.zeros_like(grey))))[:, 1:17, 1:]
        flat = tf.reshape(spectrum, [-1, 16 * 31])
        flat -= tf.reduce_mean(flat, axis=1, keepdims=True)
        return 0.5 * tf.math.l2_normalize(flat, axis=1)


def _save_oracle(folder, reference=True, features=True):
    """The oracle as a SavedModel with a `logits` function (and `features` unless `features`
    is False), and its label reference and embedding sample on a clean sample (as the Trainer
    writes them) unless `reference` is False."""
    import tensorflow as tf

    from components.checks import drift, label_agreement

    module = tf.Module()
    spec = [tf.TensorSpec([None, 32, 32, 3], tf.uint8)]
    module.logits = tf.function(_Oracle.logits, input_signature=spec)
    if features:
        module.features = tf.function(_Oracle.features, input_signature=spec)
    tf.saved_model.save(module, str(folder))
    if reference:
        images, labels = _sample(seed=9, per_class=100)
        probabilities = tf.nn.softmax(_Oracle.logits(images)).numpy()
        found = label_agreement.reference(probabilities, labels)
        (folder / "assets.extra").mkdir(exist_ok=True)
        (folder / label_agreement.REFERENCE_FILE).write_text(found.to_json())
        embeddings = _Oracle.features(images)["embeddings"].numpy()
        (folder / drift.EMBEDDING_FILE).write_bytes(drift.embeddings_to_bytes(embeddings))


def _served(tmp_path, statistics, version="1700000000", reference=True, features=True):
    """A serving folder whose newest version (the oracle) keeps `statistics` (None: keeps
    none)."""
    folder = tmp_path / "serving" / version
    folder.mkdir(parents=True)
    _save_oracle(folder, reference, features)
    if statistics is not None:
        _write(str(folder / SERVED_STATISTICS_FILE), statistics)
    return tmp_path / "serving"


def _served_state(tmp_path, serving_dir):
    from components.served_state import executor as served_state

    served = standard_artifacts.Model()
    served.uri = str(tmp_path / "served_state")
    served_state.Executor().Do(
        {}, {"served_model": [served]}, {"serving_model_dir": str(serving_dir)}
    )
    return served


def _gate(
    tmp_path,
    train,
    evals,
    serving_dir="",
    accept_drift=False,
    schema_proto=None,
    accept_labels=False,
    accept_duplicates=False,
    examples=None,
    validated=False,
):
    """Runs the gate's executor on statistics of (images, labels) per split (`validated`: with
    the anomalies ExampleValidator finds in them against the schema); returns the comparison
    it wrote."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / "statistics")
    statistics.split_names = artifact_utils.encode_split_names(["train", "eval"])
    anomalies = standard_artifacts.ExampleAnomalies()
    anomalies.uri = str(tmp_path / "anomalies")
    anomalies.split_names = statistics.split_names
    for split, data in (("train", train), ("eval", evals)):
        split_statistics = _statistics(*data)
        found = anomalies_pb2.Anomalies()
        if validated:
            found = tfdv.validate_statistics(split_statistics, schema_proto or load_schema())
            del found.anomaly_info["record_id"]  # these frames have no record ids
        _write(f"{statistics.uri}/Split-{split}/FeatureStats.pb", split_statistics)
        _write(f"{anomalies.uri}/Split-{split}/SchemaDiff.pb", found)
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / "schema")
    os.makedirs(schema.uri)
    with open(f"{schema.uri}/schema.pbtxt", "w") as out:
        from google.protobuf import text_format

        out.write(text_format.MessageToString(schema_proto or load_schema()))
    comparison = standard_artifacts.ExampleAnomalies()
    comparison.uri = str(tmp_path / "comparison")
    os.makedirs(comparison.uri)
    inputs = {"statistics": [statistics], "anomalies": [anomalies], "schema": [schema]}
    if serving_dir:  # what the run's first step read from the serving folder
        inputs["served_model"] = [_served_state(tmp_path, serving_dir)]
    if examples is not None:
        inputs["examples"] = [examples]
    properties = {ACCEPT_DRIFT_KEY: int(accept_drift), "accept_labels": int(accept_labels)}
    properties["accept_duplicates"] = int(accept_duplicates)
    Executor().Do(inputs, {"comparison": [comparison]}, properties)
    verdict = json.loads((tmp_path / "comparison" / COMPARISON_FILE).read_text())
    verdict["accepted_stops (MLMD)"] = comparison.get_string_custom_property("accepted_stops")
    return verdict


def test_the_pipelines_statistics_keep_exact_label_counts():
    """StatisticsGen's options (sketches for string top values, statistics_options) must
    leave the label's counts exact: its L-infinity drift distance is computed from them.
    Three classes with different counts, a unique id per record, the schema's features."""
    labels = np.repeat(np.arange(3), [1200, 700, 100])
    frame = pd.DataFrame({LABEL_KEY: labels.astype(np.int64)})
    frame["record_id"] = [f"data_batch_1.bin:{i}".encode() for i in range(len(labels))]
    stats = tfdv.generate_statistics_from_dataframe(frame, statistics_options(load_schema()))
    (label,) = [f for f in stats.datasets[0].features if f.path.step == [LABEL_KEY]]
    top = {v.value: v.frequency for v in label.string_stats.top_values}
    assert top == {"0": 1200, "1": 700, "2": 100}
    assert label.string_stats.unique == 3


@pytest.fixture(scope="module")
def served_statistics():
    return _statistics(*_sample(seed=1))


def test_data_like_the_served_models_passes_and_says_what_it_compared(
    tmp_path, served_statistics, monkeypatch
):
    facts = tmp_path / "facts"  # a compiled night's facts folder: the pass is kept for its report
    monkeypatch.setattr(gate_executor.night_facts, "facts_dir_of", lambda served: str(facts))
    serving = _served(tmp_path, served_statistics)
    verdict = _gate(tmp_path, _sample(seed=2), _sample(seed=3), serving)
    assert json.loads((facts / "DataValidationGate.json").read_text()) == {"passed": True}
    drift = verdict["drift"]
    assert drift["old"] == "the training data of served version 1700000000"
    compared = {d["feature"] for d in drift["distances"]}
    assert compared == {*IMAGE_SUMMARY_FEATURES, LABEL_KEY}
    assert not any(d["over"] for d in drift["distances"] + verdict["skew"]["distances"])
    assert verdict["drift_accepted"] is False


def _darker(data, factor=0.6):
    images, labels = data
    return (images * factor).astype(np.uint8), labels


def _without_class(data, share_kept=0.0, label=3):
    images, labels = data
    keep = (labels != label) | (np.random.default_rng(0).random(len(labels)) < share_kept)
    return images[keep], labels[keep]


ALTERED = {
    "pixels x0.6": (_darker, "image_brightness"),
    "pixels x1.3": (lambda d: (np.clip(d[0] * 1.3, 0, 255).astype(np.uint8), d[1]),
                    "image_brightness"),
    "blurred": (lambda d: (_blur(d[0]).astype(np.uint8), d[1]), "image_sharpness"),
    "JPEG quality 20": (lambda d: (_jpeg(d[0], 20), d[1]), "image_blockiness"),
    "one class removed": (_without_class, LABEL_KEY),
    "80% of one class dropped": (lambda d: _without_class(d, 0.2), LABEL_KEY),
}  # fmt: skip


@pytest.mark.parametrize("alteration", ALTERED, ids=list(ALTERED))
def test_each_altered_copy_is_stopped_naming_the_feature(tmp_path, served_statistics, alteration):
    alter, feature = ALTERED[alteration]
    serving = _served(tmp_path, served_statistics)
    new = alter(_sample(seed=2))
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, new, new, serving)
    lines = str(stopped.value).splitlines()
    [line] = [x for x in lines if x.startswith(f"  - drift: feature '{feature}': ")]
    assert "> threshold" in line
    assert line.endswith(
        "(this run's train split against the training data of served version 1700000000)"
    )
    assert lines[-1] == "(the data drifted: --accept-drift trains on it anyway)"


def test_accept_drift_passes_and_records_it(tmp_path, served_statistics):
    serving = _served(tmp_path, served_statistics)
    darker = _darker(_sample(seed=2))
    verdict = _gate(tmp_path, darker, darker, serving, accept_drift=True)
    assert verdict["accept_drift"] is True and verdict["drift_accepted"] is True
    over = {d["feature"] for d in verdict["drift"]["distances"] if d["over"]}
    assert "image_brightness" in over
    # the served statistics it compared with are kept for the report
    assert (tmp_path / "comparison" / SERVED_STATISTICS_FILE).stat().st_size > 0


def test_an_eval_split_unlike_the_train_split_is_skew_and_not_overridable(tmp_path):
    train = _sample(seed=2)
    with pytest.raises(DataValidationError, match="skew: feature 'image_brightness'"):
        _gate(tmp_path, train, _darker(_sample(seed=3)), accept_drift=True)


def test_no_served_model_has_nothing_to_drift_from(tmp_path):
    verdict = _gate(tmp_path, _sample(seed=2), _sample(seed=3), tmp_path / "serving")
    assert verdict["drift"]["skipped"] == "no served model: nothing to drift from"
    assert verdict["drift"]["distances"] == []


def test_a_served_version_without_statistics_is_named(tmp_path):
    serving = _served(tmp_path, None, version="1700000001")
    verdict = _gate(tmp_path, _sample(seed=2), _sample(seed=3), serving)
    assert verdict["drift"]["skipped"] == (
        "served version 1700000001 keeps no training statistics: nothing to drift from"
    )


def test_small_data_is_not_compared(tmp_path, served_statistics):
    """The tests' tiny archives: a few hundred records say more about the sample than the
    data, so they are reported as not compared rather than as drift."""
    serving = _served(tmp_path, served_statistics)
    small = _darker(_sample(seed=2, per_class=MIN_COMPARED_EXAMPLES // 10 - 1))
    verdict = _gate(tmp_path, small, small, serving)
    for kind in ("skew", "drift"):
        assert verdict[kind]["skipped"].startswith("too few records to compare (990 < 1,000)")


def _without(statistics, feature):
    """A copy of `statistics` without `feature`, as an older pipeline's statistics would be."""
    copy = type(statistics)()
    copy.CopyFrom(statistics)
    dataset = copy.datasets[0]
    kept = [f for f in dataset.features if f.path.step != [feature]]
    del dataset.features[:]
    dataset.features.extend(kept)
    return copy


def test_a_feature_missing_from_the_served_statistics_stops_the_run(tmp_path, served_statistics):
    """TFDV reports a compared feature the served statistics lack as an anomaly, not as a
    distance; the gate used to see no distance and no problem, so the feature went
    unchecked."""
    serving = _served(tmp_path, _without(served_statistics, "image_sharpness"))
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, _sample(seed=2), _sample(seed=3), serving)
    assert (
        "  - drift: feature 'image_sharpness': missing from the training data of served "
        "version 1700000000, so it cannot be compared" in str(stopped.value).splitlines()
    )


def test_a_feature_the_schema_marks_new_is_named_as_not_compared(tmp_path, served_statistics):
    """The one exception: a feature the schema tags `new_feature` (added since the served
    version) is not compared while the served statistics lack it, and says so."""
    from components.validation_gate.comparison import NEW_FEATURE_TAG

    schema = load_schema()
    [sharpness] = [f for f in schema.feature if f.name == "image_sharpness"]
    sharpness.annotation.tag.append(NEW_FEATURE_TAG)
    serving = _served(tmp_path, _without(served_statistics, "image_sharpness"))
    verdict = _gate(tmp_path, _sample(seed=2), _sample(seed=3), serving, schema_proto=schema)
    assert verdict["drift"]["not_compared"] == {
        "image_sharpness": "new in the schema since the served version"
    }
    assert "image_sharpness" not in {d["feature"] for d in verdict["drift"]["distances"]}
    from pipeline.local.report_text import comparison_lines  # what the run's summary shows

    shown = comparison_lines(verdict)
    assert "  image_sharpness: not compared, new in the schema since the served version" in shown


def _span_examples(tmp_path, splits: dict[str, dict[int, tuple]], fingerprints: dict[int, str]):
    """An Examples artifact as the ExampleGen writes it for a window of spans: each split's
    records ({split: {span: (images, labels)}}) with ids `span-N/...` and their summaries,
    the window's fingerprints."""
    import tensorflow as tf

    from components.cifar10_example_gen.executor import to_example
    from components.cifar10_example_gen.shards import Record
    from components.contract import SERVED_SPANS_FILE

    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    for split, window in splits.items():
        folder = tmp_path / "examples" / f"Split-{split}"
        folder.mkdir(parents=True)
        path = str(folder / "data_tfrecord-00000-of-00001.gz")
        with tf.io.TFRecordWriter(path, options="GZIP") as writer:
            for span, (images, labels) in window.items():
                values = np.stack(list(summarize(images).values()), axis=1)
                for i, (image, label) in enumerate(zip(images, labels)):
                    record_id = f"span-{span}/b.bin:{i}"
                    record = Record(record_id, int(label), image.tobytes(), values[i])
                    writer.write(to_example(record).SerializeToString())
    spans = {"spans": sorted(fingerprints), "fingerprints": fingerprints}
    (tmp_path / "examples" / SERVED_SPANS_FILE).write_text(json.dumps(spans))
    return examples


def test_drift_over_a_window_compares_only_the_spans_the_served_model_has_not_seen(
    tmp_path, served_statistics
):
    """`--spans 2` after a push from span 1: span 2 lacks a class. Compared as one train
    split with span 1, which the served model was trained on, the label's distance was
    diluted below its threshold and the run went on; only span 2 is new data."""
    from components.contract import SERVED_SPANS_FILE

    serving = _served(tmp_path, served_statistics)
    record = {"spans": [1], "fingerprints": {"1": "fingerprint-1"}}
    (serving / "1700000000" / SERVED_SPANS_FILE).write_text(json.dumps(record))
    seen = _sample(seed=2, per_class=500)
    unseen = _without_class(_sample(seed=3))  # 2,700 records, no class 3
    window = {1: seen, 2: unseen}
    examples = _span_examples(tmp_path, {"train": window}, {1: "fingerprint-1", 2: "fingerprint-2"})
    train = tuple(np.concatenate(parts) for parts in zip(seen, unseen))
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, train, train, serving, examples=examples)
    lines = str(stopped.value).splitlines()
    [line] = [x for x in lines if x.startswith("  - drift: feature")]
    assert line.startswith("  - drift: feature 'label': L-infinity distance 0.1")
    assert line.endswith(
        "(span 2 of this run's train split (new to the served model) against the training "
        "data of served version 1700000000)"
    )


def _checkerboards(count: int) -> np.ndarray:
    """Images no photograph is like: 1-pixel black and white squares (sharpness 4, far
    outside the schema's domain [0, 0.6])."""
    board = (np.indices((32, 32)).sum(0) % 2 * 255).astype(np.uint8)
    return np.repeat(board[None, :, :, None], 3, axis=-1).repeat(count, axis=0)


@pytest.mark.parametrize("odd", [1, 40])
def test_images_outside_a_summarys_domain_stop_the_run_only_beyond_a_share(tmp_path, odd):
    """One odd image among 3,000 used to fail the whole run (TFDV reports any value out of
    the domain, and nothing could accept it); now it is counted and tolerated, and only more
    than 0.1% of a split stop the run, with the count."""
    from pipeline.local.report_text import comparison_lines

    images, labels = _sample(seed=2)
    images = np.concatenate([images, _checkerboards(odd)])
    labels = np.concatenate([labels, np.zeros(odd, labels.dtype)])
    # The eval split: other images of the same kind, odd ones included (no skew, no copies).
    other, other_labels = _sample(seed=3)
    other = np.concatenate([other, _checkerboards(odd)])
    data, evals = {0: (images, labels)}, {0: (other, np.concatenate([other_labels, labels[-odd:]]))}
    examples = _span_examples(tmp_path, {"train": data, "eval": evals}, {0: "fingerprint-0"})
    total = f"{3000 + odd:,}"
    if odd == 1:
        verdict = _gate(tmp_path, data[0], evals[0], examples=examples, validated=True)
        found = verdict["out_of_domain"]["train"]["image_sharpness"]
        assert found == {"count": 1, "records": 3001, "domain": [0.0, pytest.approx(0.6)]}
        assert (
            f"out of domain  split 'train', image_sharpness: 1 of {total} images outside "
            "[0, 0.6] (tolerated)"
        ) in comparison_lines(verdict)
        return
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, data[0], evals[0], examples=examples, validated=True)
    assert (
        f"  - split 'train', feature 'image_sharpness': 40 of {total} images outside the "
        "schema's domain [0, 0.6] (at most 0.1% are tolerated)"
    ) in str(stopped.value).splitlines()


def _swapped(data, first=3, second=5):
    images, labels = data
    swapped = labels.copy()
    swapped[labels == first], swapped[labels == second] = second, first
    return images, swapped


def _label_gate(tmp_path, data, serving, **kwargs):
    examples = _span_examples(tmp_path, {"train": {0: data}}, {0: "fingerprint-0"})
    return _gate(tmp_path, data, data, serving, examples=examples, **kwargs)


def test_the_served_model_judges_clean_labels_and_they_pass(tmp_path, served_statistics):
    verdict = _label_gate(tmp_path, _sample(seed=2), _served(tmp_path, served_statistics))
    labels = verdict["labels"]
    assert labels["scored"] == 3000 and labels["exchanged"] == [] and not labels["noise_over"]
    assert labels["reference"] == "served version 1700000000 on its own eval split"
    assert np.trace(np.array(labels["confusion"])) == 3000  # the oracle is right on each
    # The unbiased estimate: near 0 on either side for one distribution.
    assert abs(labels["embedding_shift"]) < 0.001 and labels["embedding_threshold"] == 0.005
    assert labels["embedding_compared"] == "1,500 scored images against 1,000 of its own eval split"


def test_exchanged_labels_stop_the_run_naming_the_pair(tmp_path, served_statistics):
    """The fault no statistic sees: cat and dog labels exchanged (same images, same class
    counts, so no drift)."""
    serving = _served(tmp_path, served_statistics)
    with pytest.raises(DataValidationError) as stopped:
        _label_gate(tmp_path, _swapped(_sample(seed=2)), serving)
    lines = str(stopped.value).splitlines()
    assert (
        "  - labels: labels of cat and dog look exchanged: 100% of images labelled dog are "
        "predicted cat and 100% the other way; the served model confuses them 0% (served "
        "version 1700000000 on its own eval split)"
    ) in lines
    assert not any(line.startswith("  - drift") for line in lines)
    assert lines[-1] == (
        "(the served model disagrees with the labels: --accept-labels trains on them anyway)"
    )
    comparison = json.loads((tmp_path / "comparison" / COMPARISON_FILE).read_text())
    [suspect, *_] = comparison["labels"]["suspects"]
    assert {suspect["given"], suspect["predicted"]} == {"cat", "dog"}
    assert suspect["record_id"].startswith("span-0/") and suspect["confidence"] > 0.9


def test_many_wrong_labels_stop_the_run(tmp_path, served_statistics):
    images, labels = _sample(seed=2)
    rng = np.random.default_rng(0)
    noisy = labels.copy()
    chosen = rng.random(len(labels)) < 0.25
    noisy[chosen] = rng.integers(0, 10, chosen.sum())
    serving = _served(tmp_path, served_statistics)
    with pytest.raises(DataValidationError, match=r"labels: an estimated 2\d\.\d% of the span"):
        _label_gate(tmp_path, (images, noisy), serving)


def test_accept_labels_trains_anyway_and_records_it(tmp_path, served_statistics):
    serving = _served(tmp_path, served_statistics)
    verdict = _label_gate(tmp_path, _swapped(_sample(seed=2)), serving, accept_labels=True)
    assert verdict["labels_accepted"] is True and verdict["accepted_stops (MLMD)"] == "labels"
    assert verdict["labels"]["exchanged"][0]["labels"] == ["cat", "dog"]
    from pipeline.local.report_text import comparison_lines

    shown = comparison_lines(verdict)
    assert "  exchanged: cat and dog" in shown and "  ACCEPTED with --accept-labels" in shown


def test_labels_without_a_served_model_or_its_reference(tmp_path, served_statistics):
    verdict = _label_gate(tmp_path, _sample(seed=2), tmp_path / "serving")
    assert verdict["labels"] == {"skipped": "no served model: nothing to ask"}
    from pipeline.local.report_text import comparison_lines

    assert "labels         no served model: nothing to ask" in comparison_lines(verdict)
    # A version pushed before references existed is judged against a default confusion.
    serving = _served(tmp_path / "old", served_statistics, reference=False)
    with pytest.raises(DataValidationError, match="keeps no reference: judged against 15%"):
        _label_gate(tmp_path / "old", _swapped(_sample(seed=2)), serving)


def test_labels_are_not_judged_on_drifted_images(tmp_path, served_statistics):
    """Darker images make the served model disagree with correct labels: the drift lines say
    what happened, and accepting the drift (--accept-drift) is not stopped by the labels."""
    serving = _served(tmp_path, served_statistics)
    darker = _darker(_sample(seed=2))
    verdict = _label_gate(tmp_path, darker, serving, accept_drift=True)
    assert verdict["drift_accepted"] is True and verdict["labels_accepted"] is False
    labels = verdict["labels"]
    assert labels["noise_estimate"] > 0.3  # what would have read as wrong labels
    # said wherever the run is read, not left to a missing line (dd83add said only
    # "not judged", and the HTML report nothing)
    expected = (
        "NOT JUDGED: the images drifted from the served model's training data and "
        "--accept-drift trains on them; the served model read "
        f"{100 * labels['noise_estimate']:.1f}% of the labels as wrong"
    )
    assert labels["skipped"] == expected
    from pipeline.local import report_data
    from pipeline.local.report_text import comparison_lines

    assert f"labels         {expected}" in comparison_lines(verdict)
    run = types.SimpleNamespace(data_comparison=verdict, artifacts={})  # what the report reads
    section = report_data.comparison_section(run)
    assert f"labels: {expected}" in section["notes"]


def _rotated(data):
    images, labels = data
    return np.rot90(images, 1, axes=(1, 2)).copy(), labels


def test_images_the_served_model_sees_differently_stop_the_run_as_drift(
    tmp_path, served_statistics
):
    """Rotated images keep every per-image summary (brightness, contrast, sharpness...), so
    TFDV sees no drift; the served model's class probabilities do change (black-box shift
    detection). It is drift: --accept-drift lets it through."""
    serving = _served(tmp_path, served_statistics)
    rotated = _rotated(_sample(seed=2))
    with pytest.raises(DataValidationError) as stopped:
        _label_gate(tmp_path, rotated, serving)
    lines = str(stopped.value).splitlines()
    [line, embedded] = [x for x in lines if x.startswith("  - drift: ")]
    assert line.startswith("  - drift: the served model's class probabilities: Kolmogorov-Smirnov")
    assert "> threshold 0.1 (class" in line and "3,000 scored images" in line
    assert re.fullmatch(
        r"  - drift: the served model's embeddings \(its penultimate layer\): maximum mean "
        r"discrepancy \d\.\d{4} > threshold 0\.005 \(1,500 scored images against 1,000 of its "
        r"own eval split\): the images look unlike the data it was trained on",
        embedded,
    )
    assert not any("feature" in x for x in lines if x.startswith("  - drift"))  # TFDV saw none
    assert lines[-1] == "(the data drifted: --accept-drift trains on it anyway)"
    verdict = _label_gate(tmp_path / "accepted", rotated, serving, accept_drift=True)
    assert verdict["drift_accepted"] is True and verdict["labels"]["shift"] > 0.1
    # On drifted images the served model's embeddings tell images apart less well.
    skipped = "the images drifted from the served model's training data"
    assert verdict["duplicates"]["embedding_copies"] == {"copies": 0, "skipped": skipped}
    assert verdict["accepted_stops (MLMD)"] == "drift"


@pytest.mark.parametrize(
    "served_as, says",
    [
        ({"features": False}, "served version 1700000000 exports no embeddings"),
        ({"damaged": True}, "not compared: .*embedding_reference.npz: not an embedding sample .*"),
        ({"reference": False}, "served version 1700000000 keeps no embedding sample"),
    ],
)
def test_a_served_version_without_usable_embeddings_says_the_check_did_not_run(
    tmp_path, served_statistics, served_as, says
):
    """An older export (no `features` function, or no sample kept) or a damaged sample: the
    embedding check says why it did not run, and the rest of the gate goes on."""
    from components.checks import drift
    from pipeline.local.report_text import comparison_lines

    damaged = served_as.pop("damaged", False)
    serving = _served(tmp_path, served_statistics, **served_as)
    if damaged:
        (serving / "1700000000" / drift.EMBEDDING_FILE).write_bytes(b"not numpy")
    verdict = _label_gate(tmp_path, _sample(seed=2), serving)
    labels = verdict["labels"]
    assert labels["embedding_shift"] is None and re.fullmatch(says, labels["embedding_skipped"])
    [line] = [x for x in comparison_lines(verdict) if "embeddings" in x and "copies" not in x]
    assert line.startswith("  the served model's embeddings: not compared, ")


def test_the_shift_statistic_is_kolmogorov_smirnovs():
    from scipy import stats

    from components.checks.drift import ks_statistic

    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 700), rng.normal(0.3, 1.2, 500)
    assert ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic)
    assert ks_statistic(a, a.copy()) == 0.0


def _with_copies(data, copies: int, seed: int = 0):
    """`data` with its first `copies` images repeated (labels too) at the end."""
    images, labels = data
    return np.concatenate([images, images[:copies]]), np.concatenate([labels, labels[:copies]])


@pytest.mark.parametrize("copies, stops", [(20, False), (90, True)])
def test_more_than_one_percent_of_exact_copies_stop_the_run(tmp_path, copies, stops):
    """A span exported twice over (the issue's "every image twice") or partly so; a few
    copies are counted and pass, as in CIFAR-10 (no exact copy among its 50,000 images)."""
    from pipeline.local.report_text import comparison_lines

    train = _with_copies(_sample(seed=2), copies)
    evals = (train[0][:10], train[1][:10])  # eval images that are also in train
    examples = _span_examples(tmp_path, {"train": {0: train}, "eval": {0: evals}}, {0: "fp"})
    total = f"{3000 + copies + 10:,}"
    if not stops:
        verdict = _gate(tmp_path, train, train, examples=examples)
        assert verdict["duplicates"] == {
            "images": 3030, "copies": 30, "near_copies": 0, "eval_in_train": 10,
        }  # fmt: skip
        assert (
            f"duplicates     30 exact copies and 0 near among {total} images (10 eval images "
            "also in train)"
        ) in comparison_lines(verdict)
        return
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, train, train, examples=examples)
    lines = str(stopped.value).splitlines()
    assert (
        f"  - duplicates: 100 of {total} images are copies of another image of this run (100 "
        "exact, 0 near: the same picture re-encoded; 10 eval images also in train; at most 1% "
        "accepted)"
    ) in lines
    assert lines[-1] == "(images repeat: --accept-duplicates trains on them anyway)"
    verdict = _gate(tmp_path / "accepted", train, train, examples=examples, accept_duplicates=True)
    assert verdict["duplicates_accepted"] is True
    assert verdict["accepted_stops (MLMD)"] == "duplicates"


@pytest.mark.parametrize(
    "dropped, says",
    [
        (
            {"copies_of_train": 3, "seen_by_served": 12, "served_version": "7", "not_checked": ""},
            "eval: 3 copies of train images dropped, 12 images the served model trained on dropped",
        ),
        (
            {
                "copies_of_train": 0,
                "seen_by_served": None,
                "served_version": "7",
                "not_checked": "served version 7 has no index",
            },
            "eval: 0 copies of train images dropped; eval images the served model trained on: "
            "not checked, served version 7 has no index",
        ),
    ],
)
def test_the_duplicates_line_shows_what_the_example_gen_dropped_from_eval(tmp_path, dropped, says):
    """The ExampleGen drops eval copies of train images and images the served model was
    trained on (tests/test_eval_leaks.py) and counts them; the gate's one duplicates line
    (summary and report) says so, and the dropped copies count among the run's copies."""
    from pipeline.local.report_text import comparison_lines

    train, evals = _sample(seed=2), _sample(seed=3)
    examples = _span_examples(tmp_path, {"train": {0: train}, "eval": {0: evals}}, {0: "fp"})
    (tmp_path / "examples" / "eval_dropped.json").write_text(json.dumps(dropped))
    verdict = _gate(tmp_path, train, evals, examples=examples)
    copies = dropped["copies_of_train"]
    assert verdict["duplicates"]["eval_dropped"] == dropped
    line = f"duplicates     {copies} exact copies and 0 near among {6000 + copies:,} images; {says}"
    assert line in comparison_lines(verdict)


def test_eval_copies_the_example_gen_dropped_count_toward_the_duplicates_stop(tmp_path):
    """A duplicated eval split is dropped by the ExampleGen, and still stops the run as exact
    copies (more than 1% of the run's images), as it did before it was dropped."""
    train, evals = _sample(seed=2), _sample(seed=3)
    examples = _span_examples(tmp_path, {"train": {0: train}, "eval": {0: evals}}, {0: "fp"})
    dropped = {"copies_of_train": 100, "seen_by_served": None}
    dropped |= {"served_version": None, "not_checked": "nothing served"}
    (tmp_path / "examples" / "eval_dropped.json").write_text(json.dumps(dropped))
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, train, evals, examples=examples)
    assert (
        "  - duplicates: 100 of 6,100 images are copies of another image of this run (100 exact, "
        "0 near: the same picture re-encoded; 100 eval images also in train, dropped; at most 1% "
        "accepted)"
    ) in str(stopped.value).splitlines()


@pytest.mark.parametrize("copies, stops", [(20, False), (90, True)])
def test_near_copies_count_with_exact_ones(tmp_path, copies, stops):
    """The same pictures exported again one level brighter (as a re-encode leaves them): no
    exact copy, each a near copy (the same difference hash); beyond 1% they stop the run."""
    from pipeline.local.report_text import comparison_lines

    images, labels = _sample(seed=2)
    brighter = np.clip(images[:copies].astype(np.int16) + 1, 0, 255).astype(np.uint8)
    train = np.concatenate([images, brighter]), np.concatenate([labels, labels[:copies]])
    evals = _sample(seed=3, per_class=30)
    examples = _span_examples(tmp_path, {"train": {0: train}, "eval": {0: evals}}, {0: "fp"})
    total = 3000 + copies + 300
    if not stops:
        verdict = _gate(tmp_path, train, evals, examples=examples)
        assert verdict["duplicates"]["copies"] == 0
        # a brighter copy keeps its difference hash unless two neighbours' grey levels tie
        assert copies * 0.9 <= verdict["duplicates"]["near_copies"] <= copies
        copies = verdict["duplicates"]["near_copies"]
        line = f"duplicates     0 exact copies and {copies} near among {total:,} images"
        assert any(x.startswith(line) for x in comparison_lines(verdict))
        return
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, train, evals, examples=examples)
    [line] = [x for x in str(stopped.value).splitlines() if x.startswith("  - duplicates: ")]
    found = re.fullmatch(
        rf"  - duplicates: (\d+) of {total:,} images are copies of another image of this run "
        r"\(0 exact, (\d+) near: the same picture re-encoded; 0 eval images also in train; at "
        r"most 1% accepted\)",
        line,
    )
    assert found and found[1] == found[2] and copies * 0.9 <= int(found[1]) <= copies, line


@pytest.mark.parametrize("copies, stops", [(20, False), (1500, True)])
def test_copies_shifted_by_one_pixel_are_found_by_the_served_models_embeddings(
    tmp_path, served_statistics, copies, stops
):
    """The issue's span of 1,500 images and their copies shifted by one pixel passed as 0
    copies (a shift changes the difference hash). In the scored sample (all of a span this
    small) the served model's embeddings of a shifted copy and its picture are alike: they
    count with the near copies, and beyond 1% stop the run."""
    from pipeline.local.report_text import comparison_lines

    images, labels = _sample(seed=2, per_class=150 if stops else 300)
    shifted = np.roll(images[:copies], 1, axis=2)
    data = np.concatenate([images, shifted]), np.concatenate([labels, labels[:copies]])
    total = len(data[1])
    serving = _served(tmp_path, served_statistics)
    if not stops:
        verdict = _label_gate(tmp_path, data, serving)
        found = verdict["duplicates"]["embedding_copies"]
        assert found["every"] == 1 and found["scored"] == total and found["threshold"] == 0.99
        near = verdict["duplicates"]["near_copies"]
        assert found["copies"] + near == copies  # each copy found once, by one of the two
        line = f"duplicates     0 exact copies and {near} near, {found['copies']} by the served"
        assert any(x.startswith(line) for x in comparison_lines(verdict))
        return
    with pytest.raises(DataValidationError) as stopped:
        _label_gate(tmp_path, data, serving)
    [line] = [x for x in str(stopped.value).splitlines() if x.startswith("  - duplicates: ")]
    found = re.fullmatch(
        rf"  - duplicates: 1,500 of {total:,} images are copies of another image of this run "
        r"\(0 exact, (\d+) near: the same picture re-encoded, ([\d,]+) by the served model's "
        r"embeddings: shifted or cropped; 0 eval images also in train; at most 1% accepted\)",
        line,
    )
    assert found and int(found[1]) < 100, line  # the difference hash alone: a few
