"""Cifar10ExampleGen: the Beam source with assert_that, and Executor.Do on fixture artifacts."""

import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.util import assert_that, equal_to
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import proto_utils

from components.cifar10_example_gen import shards, sources, spans
from components.cifar10_example_gen.component import Cifar10ExampleGen
from components.cifar10_example_gen.executor import Executor, ReadCifar10Splits
from components.cifar10_example_gen.spec import SPAN_KEY
from components.contract import SAVED_MODEL_FILE, SERVED_SPANS_FILE, image_digest

import cifar_fixtures as fx


def _exec_properties(source, fraction=0.1):
    component = Cifar10ExampleGen(
        source_uri=str(source), source_fingerprint="x", eval_fraction=fraction
    )
    return {
        k: v if isinstance(v, (str, int, float)) else proto_utils.proto_to_json(v)
        for k, v in component.exec_properties.items()
    }


def _label_and_image(serialized: bytes) -> tuple[int, bytes]:
    feature = tf.train.Example.FromString(serialized).features.feature
    return feature["label"].int64_list.value[0], feature["image_raw"].bytes_list.value[0]


def test_beam_source_emits_each_split(tmp_path):
    """Each record keyed by its image's digest (for dropping eval copies of train images).
    Written out from the fixture, not from the source's own splitting code: at an eval
    fraction of 1/10 and 10 images per class in each batch file, the tenth image of every
    class in every batch is an eval image, the other nine are training images."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=10)
    expected = {"train": [], "eval": []}
    for batch in (1, 2):  # binary_archive's batch files and seeds
        labels = fx.balanced_labels(10, seed=batch)
        seen = [0] * 10
        for label, image in zip(labels, fx.make_images(labels, seed=batch)):
            seen[label] += 1
            expected["eval" if seen[label] == 10 else "train"].append((label, image.tobytes()))
    assert (len(expected["train"]), len(expected["eval"])) == (180, 20)
    with beam.Pipeline() as pipeline:
        splits = pipeline | ReadCifar10Splits(str(archive), 0.1)
        assert sorted(splits) == ["eval", "train", "train_spans"]
        del splits["train_spans"]
        for split, examples in splits.items():
            records = examples | f"Decode[{split}]" >> beam.MapTuple(
                lambda digest, serialized: (digest, _label_and_image(serialized))
            )
            keyed = [(image_digest(image), (label, image)) for label, image in expected[split]]
            assert_that(records, equal_to(keyed), label=f"Check[{split}]")


def test_an_archive_is_opened_once_to_check_and_once_to_read(tmp_path, monkeypatch):
    """A gzipped tar cannot seek: reading its batch files one by one, per split, opened
    and decompressed the official archive about twelve times over."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=3, per_class=2)
    opened = []
    real_open = shards._open_binary

    def counting_open(path):
        opened.append(path)
        return real_open(path)

    monkeypatch.setattr(shards, "_open_binary", counting_open)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "out")
    Executor().Do({}, {"examples": [examples]}, _exec_properties(archive))
    assert opened == [str(archive)] * 2


def _read_split(artifact, split):
    files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([artifact], split), "*"))
    return [
        tf.train.Example.FromString(r.numpy())
        for r in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]


def test_executor_writes_gzipped_tfrecords_per_split(tmp_path):
    archive = fx.python_archive(tmp_path / "c.tar.gz", batches=1, per_class=6, with_test=True)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "out")
    Executor().Do({}, {"examples": [examples]}, _exec_properties(archive))
    assert artifact_utils.decode_split_names(examples.split_names) == ["train", "eval"]
    train, evals = _read_split(examples, "train"), _read_split(examples, "eval")
    assert (len(train), len(evals)) == (60, 60)  # the test batch is the eval split
    first = train[0].features.feature
    labels = fx.balanced_labels(6, seed=1)  # python_archive's data_batch_1
    assert first["image_raw"].bytes_list.value[0] == fx.make_images(labels, seed=1)[0].tobytes()
    written = [e.features.feature["label"].int64_list.value[0] for e in train]
    assert written == labels.tolist()  # every label as the batch file has it, in order
    ids = [e.features.feature["record_id"].bytes_list.value[0] for e in train + evals]
    assert len(set(ids)) == 120
    assert ids[:2] == [b"data_batch_1:0", b"data_batch_1:1"]  # source order, not shuffled
    assert examples_utils.get_file_format(examples) == "tfrecords_gzip"
    assert examples_utils.get_payload_format(examples) == example_gen_pb2.FORMAT_TF_EXAMPLE
    for split in ("train", "eval"):
        (written,) = os.listdir(artifact_utils.get_split_uri([examples], split))
        assert written == "data_tfrecord-00000-of-00001.gz"


def test_executor_refuses_bad_source_before_writing_anything(tmp_path):
    payload = bytearray(fx.binary_batch(fx.balanced_labels(1)))
    payload[0] = 10
    archive = fx.write_tar(tmp_path / "c.tar.gz", {"b/data_batch_1.bin": bytes(payload)})
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "out")
    with pytest.raises(sources.SourceError, match=r"data_batch_1\.bin: record 0 has label 10"):
        Executor().Do({}, {"examples": [examples]}, _exec_properties(archive))
    assert not (tmp_path / "out").exists()


def test_the_executor_resolves_spans_by_the_same_rules(tmp_path):
    """The ExampleGen applies spans.resolve and the nothing-stale rule against the served
    state its run read: a half-copied extracted span is refused here too, and a changed
    published one; nothing is written for either."""
    from components.served_state import executor as served_state

    root = tmp_path / "nightly"
    fx.complete_span(root, 1)
    fx.extracted_release(root / "span-2", batches=3, per_class=1)  # no _SUCCESS yet
    serving = tmp_path / "serving"
    (serving / "7").mkdir(parents=True)
    (serving / "7" / SERVED_SPANS_FILE).write_text(spans.record_json({1: "published"}))
    (serving / "7" / SAVED_MODEL_FILE).write_bytes(b"")
    served = standard_artifacts.Model()
    served.uri = str(tmp_path / "served")
    served_state.Executor().Do({}, {"served_model": [served]}, {"serving_model_dir": str(serving)})

    def ingest(span=-1):
        examples = standard_artifacts.Examples()
        examples.uri = str(tmp_path / f"out-{span}")
        properties = {**_exec_properties(root), SPAN_KEY: span}
        Executor().Do({"served_model": [served]}, {"examples": [examples]}, properties)
        return examples

    with pytest.raises(spans.SpanError, match="span-2 .*: incomplete: no _SUCCESS file"):
        ingest()
    with pytest.raises(spans.SpanError, match="span-1: .* since served version 7 "):
        ingest(1)
    assert not (tmp_path / "out--1").exists() and not (tmp_path / "out-1").exists()


def test_the_fast_serialization_is_the_examples_own():
    """`serialize` writes the wire bytes itself: they must parse to exactly the Example
    `to_example` builds, every feature and value, also where a length needs more than one
    byte of varint (a record id of 200 characters, within a span's prefix)."""
    from components.cifar10_example_gen.executor import serialize, to_example
    from components.cifar10_example_gen.shards import Record
    from components.cifar10_example_gen.summaries import summarize

    images = fx.make_images(fx.balanced_labels(1, seed=4), seed=4)
    summaries = np.stack(list(summarize(images).values()), axis=1).tolist()
    for index, (image, summary) in enumerate(zip(images, summaries)):
        record = Record(f"b:{index}", index, image.tobytes(), tuple(summary))
        assert tf.train.Example.FromString(serialize(record)) == to_example(record)
    plain = Record("b:0", 3, images[0].tobytes())
    assert tf.train.Example.FromString(serialize(plain)) == to_example(plain)  # map order varies
    long_id = Record("span-7/" + "x" * 200, 9, images[1].tobytes(), tuple(summaries[1]))
    assert tf.train.Example.FromString(serialize(long_id)) == to_example(long_id)
