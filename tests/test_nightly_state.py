"""The ExampleGen against the served state the run read at its start: a night with nothing
new passes through (empty splits, marked, the run succeeds), a new span is ingested and the
fingerprints recorded are those of the data read, and a span that changes while it is read
is refused."""

import json

import pytest
import tensorflow as tf
from tfx.types import artifact_utils, standard_artifacts

from components.cifar10_example_gen import executor as example_gen
from components.cifar10_example_gen import spans
from components.served_state import executor as served_state

import cifar_fixtures as fx


def _spans(tmp_path, count):
    root = tmp_path / "nightly"
    for number in range(1, count + 1):
        (root / f"span-{number}").mkdir(parents=True)
        fx.binary_archive(root / f"span-{number}" / "c.tar.gz", batches=1, per_class=2)
    return root


def _served(tmp_path, version, fingerprints):
    """A serving folder whose one version was trained on `fingerprints`, as the run's first
    step reads it."""
    folder = tmp_path / "serving" / version
    folder.mkdir(parents=True)
    record = {"spans": sorted(fingerprints), "fingerprints": fingerprints}
    (folder / "training_spans.json").write_text(json.dumps(record))
    (folder / "saved_model.pb").write_bytes(b"graph")
    artifact = standard_artifacts.Model()
    artifact.uri = str(tmp_path / "served_state")
    served_state.Executor().Do(
        {}, {"served_model": [artifact]}, {"serving_model_dir": str(tmp_path / "serving")}
    )
    return artifact


def _count(examples, split):
    pattern = f"{artifact_utils.get_split_uri([examples], split)}/*"
    return sum(1 for _ in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), "GZIP"))


def test_a_night_with_nothing_new_passes_through_with_empty_splits(tmp_path):
    root = _spans(tmp_path, 1)
    fingerprint = spans.resolve(str(root)).fingerprints[1]
    examples = fx.ingest(tmp_path, root, _served(tmp_path, "5", {"1": fingerprint}))
    assert examples.get_int_custom_property("no_new_span") == 1
    reason = examples.get_string_custom_property("no_new_span_reason")
    assert reason.startswith("no new span: served version 5 was trained on spans [1]"), reason
    assert [_count(examples, split) for split in ("train", "eval")] == [0, 0]
    assert examples.span == 1


def test_a_new_span_is_ingested_and_recorded(tmp_path):
    root = _spans(tmp_path, 2)
    resolved = spans.resolve(str(root), window=2).fingerprints
    examples = fx.ingest(tmp_path, root, _served(tmp_path, "5", {"1": resolved[1]}))
    assert not examples.get_int_custom_property("no_new_span")
    assert _count(examples, "train") + _count(examples, "eval") == 20
    record = json.loads((tmp_path / "examples" / "training_spans.json").read_text())
    assert record["fingerprints"] == {"2": resolved[2]}


def test_a_span_that_changes_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """The fingerprint recorded must describe the data trained on: here the archive is
    rewritten while the Beam read runs."""
    root = _spans(tmp_path, 2)
    archive = root / "span-2" / "c.tar.gz"
    read = example_gen._tagged_examples

    def read_then_change(unit, fraction):
        yield from read(unit, fraction)
        fx.binary_archive(archive, batches=1, per_class=3)

    monkeypatch.setattr(example_gen, "_tagged_examples", read_then_change)
    with pytest.raises(spans.SpanError, match=r"span-2 .*changed while it was being read"):
        fx.ingest(tmp_path, root, _served(tmp_path, "5", {}))
