"""Train images the served version was already trained on: the ExampleGen counts the train
records of the spans new to the served version that are in its training-image index (a
rolling window's seen spans and a forced rerun count none), and the gate stops a run where
more than 1% of them are (issue 64 item 5: a span re-sending 3,000 of the served version's
own training images trained as new)."""

import hashlib
import json

import pytest
from test_data_validation import _gate, _sample
from tfx.types import standard_artifacts

from components.cifar10_example_gen import spans
from components.served_state import executor as served_state
from components.validation_gate.checks import DataValidationError

import cifar_fixtures as fx


def _digest(image) -> bytes:
    return hashlib.sha1(image.tobytes()).digest()[:12]


def _span(root, number, train, test_seed):
    """span-N/c.tar.gz: one data batch of `train` (images, labels), a test batch of its own."""
    test_labels = fx.balanced_labels(3, seed=test_seed)
    members = {
        "cifar-10-batches-bin/data_batch_1.bin": fx.binary_records(*train),
        "cifar-10-batches-bin/test_batch.bin": fx.binary_batch(test_labels, seed=test_seed),
    }
    (root / f"span-{number}").mkdir(parents=True)
    fx.write_tar(root / f"span-{number}" / "c.tar.gz", members)


def _data(seed, per_class=10):
    labels = fx.balanced_labels(per_class, seed=seed)
    return fx.make_images(labels, seed=seed), labels


def _served(tmp_path, root, trained_on: dict[int, tuple]):
    """Served version 5, trained on the spans `trained_on` ({span: (images, labels)}): its
    spans record (their fingerprints under `root`) and its training-image index."""
    folder = tmp_path / "serving" / "5"
    folder.mkdir(parents=True)
    fingerprints = {
        str(n): spans.content_fingerprint(str(root / f"span-{n}" / "c.tar.gz")) for n in trained_on
    }
    record = {"spans": sorted(trained_on), "fingerprints": fingerprints}
    (folder / "training_spans.json").write_text(json.dumps(record))
    index = {_digest(image) for images, _ in trained_on.values() for image in images}
    (folder / "training_images.bin").write_bytes(b"".join(sorted(index)))
    (folder / "saved_model.pb").write_bytes(b"graph")
    artifact = standard_artifacts.Model()
    artifact.uri = str(tmp_path / "served_state")
    served_state.Executor().Do(
        {}, {"served_model": [artifact]}, {"serving_model_dir": str(tmp_path / "serving")}
    )
    return artifact


def _recorded(tmp_path):
    return json.loads((tmp_path / "examples" / "eval_dropped.json").read_text())


def _resent(tmp_path):
    """Served version 5 trained on span 1 (100 images); span 2 sends the same images again
    (with a test batch of its own)."""
    root = tmp_path / "nightly"
    first = _data(seed=1)
    _span(root, 1, first, test_seed=91)
    _span(root, 2, first, test_seed=92)
    return root, _served(tmp_path, root, {1: first})


def test_a_new_span_re_sending_the_served_versions_train_images_is_counted(tmp_path):
    root, served = _resent(tmp_path)
    examples = fx.ingest(tmp_path, root, served, span_window=1)
    recorded = _recorded(tmp_path)
    assert recorded["new_spans"] == [2] and recorded["new_train_records"] == 100
    assert recorded["train_seen_by_served"] == 100
    assert recorded["train_seen_by_span"] == {"2": 100}
    assert examples.get_int_custom_property("train_seen_by_served") == 100


def test_a_rolling_windows_seen_span_is_not_counted(tmp_path):
    """`--spans 2` after a push from span 1: span 1 is re-read (it is in the served index,
    legitimately); only span 2, new images, is judged."""
    root = tmp_path / "nightly"
    first = _data(seed=1)
    _span(root, 1, first, test_seed=91)
    _span(root, 2, _data(seed=2), test_seed=92)
    served = _served(tmp_path, root, {1: first})
    examples = fx.ingest(tmp_path, root, served, span_window=2)
    recorded = _recorded(tmp_path)
    assert recorded["new_spans"] == [2] and recorded["new_train_records"] == 100
    assert recorded["train_seen_by_served"] == 0 and recorded["train_seen_by_span"] == {}
    assert examples.get_int_custom_property("train_seen_by_served") == 0


def test_a_forced_rerun_of_a_seen_span_has_no_new_span_to_count(tmp_path):
    root = tmp_path / "nightly"
    first = _data(seed=1)
    _span(root, 1, first, test_seed=91)
    served = _served(tmp_path, root, {1: first})
    fx.ingest(tmp_path, root, served, span_window=1, force=1)
    recorded = _recorded(tmp_path)
    assert recorded["new_spans"] == [] and recorded["new_train_records"] == 0
    assert recorded["train_seen_by_served"] == 0


def test_the_gate_stops_a_span_of_images_the_served_version_was_trained_on(tmp_path):
    """The issue's fault: the re-sent span trained as new. Now the gate stops it (the run's
    exit status 3, data_invalid) naming the count, the span and the served version;
    --accept-duplicates trains anyway, and the summary's duplicates line counts them."""
    from pipeline.local.report_text import comparison_lines

    root, served = _resent(tmp_path)
    examples = fx.ingest(tmp_path, root, served, span_window=1)
    statistics = _sample(seed=2), _sample(seed=3)
    with pytest.raises(DataValidationError) as stopped:
        _gate(tmp_path, *statistics, examples=examples)
    lines = str(stopped.value).splitlines()
    assert (
        "  - duplicates: 100 of 100 train images new to served version 5 (span 2: 100) are "
        "images it was already trained on: old data sent as new (at most 1% accepted)"
    ) in lines
    assert lines[-1] == "(images repeat: --accept-duplicates trains on them anyway)"
    verdict = _gate(tmp_path / "accepted", *statistics, examples=examples, accept_duplicates=True)
    assert verdict["accepted_stops (MLMD)"] == "duplicates"
    [line] = [x for x in comparison_lines(verdict) if x.startswith("duplicates")]
    assert line.endswith(
        "; train: 100 of 100 new images the served model trained on, ACCEPTED with "
        "--accept-duplicates"
    )
