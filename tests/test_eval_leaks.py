"""Eval images that would inflate a gate: exact copies of this run's train images (the 80%
accuracy gate) and images the served model was trained on (the regression baseline) are
dropped from the eval split by the ExampleGen and counted; the train split's digests are
written beside the splits, the served version's training-image index."""

import hashlib
import json

import apache_beam as beam
import tensorflow as tf
from apache_beam.testing.util import assert_that, equal_to
from test_example_gen import _exec_properties
from tfx.types import artifact_utils, standard_artifacts

from components.cifar10_example_gen.executor import Executor

import cifar_fixtures as fx


def _digest(image: bytes) -> bytes:
    return hashlib.sha1(image).digest()[:12]


def test_the_transform_drops_eval_copies_of_train_and_images_the_served_model_saw(tmp_path):
    from components.cifar10_example_gen.executor import DropEvalLeaks

    a, b, c, e = (bytes([n]) * 3072 for n in range(4))
    index = tmp_path / "training_images.bin"
    index.write_bytes(b"".join(sorted([_digest(c), _digest(b"another image")])))
    with beam.Pipeline() as pipeline:
        train = pipeline | "Train" >> beam.Create([(_digest(a), b"ta"), (_digest(b), b"tb")])
        evals = pipeline | "Eval" >> beam.Create(
            [(_digest(a), b"ea"), (_digest(c), b"ec"), (_digest(e), b"ee")]
        )
        out = {"train": train, "eval": evals} | DropEvalLeaks(str(index))
        assert_that(out["train"], equal_to([b"ta", b"tb"]), label="CheckTrain")
        assert_that(out["eval"], equal_to([b"ee"]), label="CheckEval")
        assert_that(
            out["index"], equal_to([b"".join(sorted([_digest(a), _digest(b)]))]), label="CheckIndex"
        )
        assert_that(
            out["dropped"],
            equal_to([{"copies_of_train": 1, "seen_by_served": 1}]),
            label="CheckDropped",
        )


def _archive(tmp_path, copied=(), test_images=None):
    """A binary archive: one batch of 30 training images and a test batch of 30 others, whose
    first images are replaced by the training images at `copied`."""
    labels = fx.balanced_labels(3, seed=1)
    images = fx.make_images(labels, seed=1)
    test_labels = fx.balanced_labels(3, seed=99)
    tests = fx.make_images(test_labels, seed=99) if test_images is None else test_images
    for slot, index in enumerate(copied):
        tests[slot], test_labels[slot] = images[index], labels[index]
    members = {
        "cifar-10-batches-bin/data_batch_1.bin": fx.binary_records(images, labels),
        "cifar-10-batches-bin/test_batch.bin": fx.binary_records(tests, test_labels),
    }
    return fx.write_tar(tmp_path / "c.tar.gz", members), images, tests


def _served(tmp_path, version="5", index=None):
    """The ServedState step's output for a serving folder whose version keeps `index` (the
    digests of the images it was trained on; None: no index, pushed before it existed)."""
    from components.served_state import executor as served_state

    folder = tmp_path / "serving" / version
    folder.mkdir(parents=True)
    if index is not None:
        (folder / "training_images.bin").write_bytes(b"".join(sorted(index)))
    (folder / "saved_model.pb").write_bytes(b"graph")
    served = standard_artifacts.Model()
    served.uri = str(tmp_path / "served_state")
    served_state.Executor().Do(
        {}, {"served_model": [served]}, {"serving_model_dir": str(tmp_path / "serving")}
    )
    return served


def _ingest(tmp_path, archive, served=None):
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    inputs = {"served_model": [served]} if served is not None else {}
    Executor().Do(inputs, {"examples": [examples]}, _exec_properties(archive))
    return examples


def _images(examples, split):
    pattern = f"{artifact_utils.get_split_uri([examples], split)}/*"
    records = tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), "GZIP")
    return [
        tf.train.Example.FromString(r.numpy()).features.feature["image_raw"].bytes_list.value[0]
        for r in records
    ]


def _dropped(tmp_path):
    return json.loads((tmp_path / "examples" / "eval_dropped.json").read_text())


def test_an_eval_image_copied_from_train_is_dropped_and_counted(tmp_path):
    archive, images, tests = _archive(tmp_path, copied=(0, 7))
    examples = _ingest(tmp_path, archive)
    kept = _images(examples, "eval")
    assert len(kept) == 28 and images[0].tobytes() not in kept
    assert kept == [image.tobytes() for image in tests[2:]]  # source order kept
    assert len(_images(examples, "train")) == 30
    dropped = _dropped(tmp_path)
    assert dropped["copies_of_train"] == 2
    assert dropped["seen_by_served"] is None and dropped["not_checked"] == "nothing served"
    assert examples.get_int_custom_property("eval_copies_of_train_dropped") == 2
    index = (tmp_path / "examples" / "training_images.bin").read_bytes()
    assert index == b"".join(sorted(_digest(image.tobytes()) for image in images))


def test_an_eval_image_the_served_model_was_trained_on_is_dropped_and_counted(tmp_path):
    archive, _, tests = _archive(tmp_path)
    seen = [_digest(image.tobytes()) for image in tests[[3, 4, 9]]]
    examples = _ingest(tmp_path, archive, _served(tmp_path, index=seen + [_digest(b"other")]))
    assert len(_images(examples, "eval")) == 27
    dropped = _dropped(tmp_path)
    assert (dropped["copies_of_train"], dropped["seen_by_served"]) == (0, 3)
    assert dropped["served_version"] == "5" and not dropped["not_checked"]
    assert examples.get_int_custom_property("eval_seen_by_served_dropped") == 3


def test_a_served_version_without_an_index_is_named_as_not_checked(tmp_path):
    archive, _, _ = _archive(tmp_path, copied=(1,))
    examples = _ingest(tmp_path, archive, _served(tmp_path, version="17", index=None))
    assert len(_images(examples, "eval")) == 29
    dropped = _dropped(tmp_path)
    assert dropped["copies_of_train"] == 1 and dropped["seen_by_served"] is None
    assert dropped["not_checked"] == "served version 17 has no index"


def test_cifar_like_clean_data_drops_nothing(tmp_path):
    """Distinct images throughout, as in CIFAR-10 (no test image is a copy of a training one),
    against a served index of other images: nothing is dropped."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=5, with_test=True)
    other = fx.make_images(fx.balanced_labels(5, seed=50), seed=50)
    index = [_digest(image.tobytes()) for image in other]
    examples = _ingest(tmp_path, archive, _served(tmp_path, index=index))
    assert (len(_images(examples, "train")), len(_images(examples, "eval"))) == (100, 50)
    dropped = _dropped(tmp_path)
    assert (dropped["copies_of_train"], dropped["seen_by_served"]) == (0, 0)
    assert len((tmp_path / "examples" / "training_images.bin").read_bytes()) == 100 * 12
