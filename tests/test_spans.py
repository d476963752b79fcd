"""Span folders on tiny generated data: which spans a run takes, their fingerprints, the
nothing-stale rule, a changed or half-copied span; and warm start's weight check."""

import json
import shutil

import numpy as np
import pytest

from components.cifar10_example_gen import spans
from components.cifar10_example_gen.sources import SourceError
from components.contract import SAVED_MODEL_FILE, SERVED_SPANS_FILE
from pipeline.local import span_choice

import cifar_fixtures as fx


def _span_root(tmp_path, count=3):
    root = tmp_path / "spans"
    for number in range(1, count + 1):
        (root / f"span-{number}").mkdir(parents=True)
        fx.binary_archive(root / f"span-{number}" / "c.tar.gz", batches=1, per_class=2)
    return root


def test_span_folders_and_their_sources(tmp_path):
    root = _span_root(tmp_path)
    (root / "notes").mkdir()  # other names are not spans
    found = spans.span_folders(str(root))
    assert list(found) == [1, 2, 3]
    assert spans.span_source(found[2]) == str(root / "span-2" / "c.tar.gz")
    assert spans.span_folders(str(root / "span-1" / "c.tar.gz")) == {}  # a plain source


def test_the_newest_span_one_span_and_a_window(tmp_path):
    found = spans.span_folders(str(_span_root(tmp_path)))
    assert spans.select(found) == [3]
    assert spans.select(found, span=1) == [1]
    assert spans.select(found, window=2) == [2, 3]
    assert spans.select(found, span=2, window=2) == [1, 2]
    with pytest.raises(
        spans.SpanError, match=r"span-7: no such span folder \(spans: \[1, 2, 3\]\)"
    ):
        spans.select(found, span=7)
    with pytest.raises(spans.SpanError, match="--spans 3: only 2 span"):
        spans.select(found, span=2, window=3)


def test_a_fingerprint_follows_the_bytes_not_the_copy(tmp_path):
    root = _span_root(tmp_path, 1)
    source = str(root / "span-1" / "c.tar.gz")
    copy = tmp_path / "copy.tar.gz"
    shutil.copy(source, copy)  # a new mtime, the same bytes
    assert spans.content_fingerprint(str(copy)) == spans.content_fingerprint(source)
    fx.binary_archive(copy, batches=1, per_class=3)
    assert spans.content_fingerprint(str(copy)) != spans.content_fingerprint(source)


def _served(tmp_path, version, fingerprints):
    folder = tmp_path / "serving" / version
    folder.mkdir(parents=True)
    (folder / SAVED_MODEL_FILE).write_bytes(b"")
    (folder / SERVED_SPANS_FILE).write_text(spans.record_json(fingerprints))
    return tmp_path / "serving"


def test_nothing_stale_unless_forced(tmp_path):
    serving = _served(tmp_path, "100", {1: "aaa", 2: "bbb"})
    records = spans.served_records(str(serving))
    assert [(r.version, r.spans) for r in records] == [("100", {1: "aaa", 2: "bbb"})]
    with pytest.raises(spans.NoNewSpan) as stale:
        spans.check_not_stale({2: "bbb"}, records)
    assert str(stale.value) == (
        "no new span: served version 100 was trained on spans [1, 2], which include span-2; "
        "nothing to train (--force retrains)"
    )
    spans.check_not_stale({2: "bbb"}, records, force=True)
    spans.check_not_stale({2: "bbb", 3: "ccc"}, records)  # span-3 is new
    spans.check_not_stale({0: ""}, records)  # a plain source has no rule


def test_a_span_changed_under_its_number_is_refused(tmp_path):
    records = spans.served_records(str(_served(tmp_path, "100", {1: "aaa"})))
    with pytest.raises(
        spans.SpanError, match="span-1: its content changed since served version 100"
    ):
        spans.check_not_stale({1: "zzz", 2: "bbb"}, records, force=True)


def test_a_half_copied_span_is_refused_naming_its_folder(tmp_path):
    root = _span_root(tmp_path)
    archive = root / "span-3" / "c.tar.gz"
    archive.write_bytes(archive.read_bytes()[:5000])  # the copy was cut short
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    with pytest.raises(SourceError, match=rf"span-3 \({root / 'span-3'}\) cannot be used: "):
        span_choice.choose(str(root), None, None, False, str(tmp_path / "serving"))
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before  # nothing touched
    chosen = span_choice.choose(str(root), 2, 2, False, str(tmp_path / "serving"))
    assert chosen.numbers == [1, 2] and chosen.settings == {"span": 2, "span_window": 2}
    assert chosen.counts == {"train": 40, "test": 0}


def test_span_flags_need_span_folders(tmp_path):
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=1, per_class=2)
    plain = span_choice.choose(str(archive), None, None, False, "")
    assert plain.numbers == [0] and plain.settings == {}
    with pytest.raises(spans.SpanError, match="--span and --spans need a folder of span-N"):
        span_choice.choose(str(archive), 1, None, False, "")


def test_the_served_record_is_what_the_example_gen_writes(tmp_path):
    record = json.loads(spans.record_json({2: "bbb", 1: "aaa"}))
    assert record == {"spans": [1, 2], "fingerprints": {"2": "bbb", "1": "aaa"}}


# --- warm start: the served weights fit this network, or the reason they do not ---


def test_warm_start_checks_every_shape_and_count():
    from components.trainer import model, warm_start

    network = model.build(model.RECIPES["airbench"])
    values = [np.full(v.shape, 0.5, np.float32) for v in network.variables]
    assert warm_start.mismatch(network, values) == ""
    assert "variables" in warm_start.mismatch(network, values[:-1])
    wider = model.build(model.RECIPES["airbench94"])
    assert "the served network differs" in warm_start.mismatch(
        wider, [v.numpy() for v in network.variables]
    )
