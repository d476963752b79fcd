"""Span folders on tiny generated data: which spans a run takes, their fingerprints, the
nothing-stale rule, a changed or half-copied span; and warm start's weight check."""

import json
import shutil

import numpy as np
import pytest

from components.cifar10_example_gen import spans
from components.cifar10_example_gen.sources import SourceError, count_records
from components.contract import SAVED_MODEL_FILE, SERVED_SPANS_FILE
from components.storage.served_versions import read_served_state
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
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SAVED_MODEL_FILE).write_bytes(b"")
    (folder / SERVED_SPANS_FILE).write_text(spans.record_json(fingerprints))
    return tmp_path / "serving"


def test_nothing_stale_unless_forced(tmp_path):
    served = read_served_state(str(_served(tmp_path, "100", {1: "aaa", 2: "bbb"})))
    with pytest.raises(spans.NoNewSpan) as stale:
        spans.check_not_stale({2: "bbb"}, served)
    assert str(stale.value) == (
        "no new span: served version 100 was trained on spans [1, 2], which include span-2; "
        "nothing to train (--force retrains)"
    )
    spans.check_not_stale({2: "bbb"}, served, force=True)
    spans.check_not_stale({2: "bbb", 3: "ccc"}, served)  # span-3 is new
    spans.check_not_stale({0: ""}, served)  # a plain source has no rule


def test_a_span_changed_under_its_number_is_refused(tmp_path):
    _served(tmp_path, "100", {1: "aaa"})
    served = read_served_state(str(_served(tmp_path, "200", {1: "aaa", 2: "bbb"})))
    with pytest.raises(
        spans.SpanError, match="span-1: its content changed since served version 100 "
    ):
        spans.check_not_stale({1: "zzz", 3: "ccc"}, served, force=True)
    with pytest.raises(spans.SpanError, match="span-2: .* since served version 200 "):
        spans.check_not_stale({2: "zzz", 3: "ccc"}, served)


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


# --- a span is complete only when it says so; span numbers; one resolution ---


def _half_copied(root, number=2):
    """span-N with an extracted release of which 3 of 5 batch files are copied so far."""
    return fx.extracted_release(root / f"span-{number}", batches=3, per_class=1).parent


def test_an_extracted_span_without_success_is_incomplete(tmp_path):
    root = tmp_path / "nightly"
    fx.complete_span(root, 1)
    folder = _half_copied(root)
    incomplete = (
        rf"^span-2 \({folder}\): incomplete: no _SUCCESS file \(write it last, once every "
        r"file of the span is copied\)$"
    )
    with pytest.raises(spans.SpanError, match=incomplete):
        span_choice.choose(str(root), None, None, False, "")
    with pytest.raises(spans.SpanError, match=incomplete):
        spans.resolve(str(root))
    assert spans.resolve(str(root), span=1).numbers == [1]  # the complete span still serves
    (folder / "_SUCCESS").write_text("")  # the copy finished
    chosen = span_choice.choose(str(root), None, None, False, "")
    assert chosen.numbers == [2] and chosen.counts == {"train": 30, "test": 0}


def test_success_counts_must_be_what_the_span_holds(tmp_path):
    root = tmp_path / "nightly"
    folder = _half_copied(root, 1)
    (folder / "_SUCCESS").write_text('{"train": 50000, "test": 10000}')
    with pytest.raises(
        spans.SpanError,
        match=rf"^span-1 \({folder}\): incomplete: _SUCCESS says 50000 train records, "
        r"the span holds 30$",
    ):
        spans.resolve(str(root))
    (folder / "_SUCCESS").write_text('{"train": 30, "test": 0}')
    assert spans.resolve(str(root)).numbers == [1]
    (folder / "_SUCCESS").write_text("50000 images")
    with pytest.raises(spans.SpanError, match=rf"^span-1 \({folder}\): _SUCCESS .*JSON"):
        spans.resolve(str(root))


def test_an_archive_span_needs_no_success_but_its_counts_are_checked(tmp_path):
    root = _span_root(tmp_path, 1)
    assert spans.resolve(str(root)).numbers == [1]
    (root / "span-1" / "_SUCCESS").write_text('{"train": 21}')
    with pytest.raises(spans.SpanError, match="_SUCCESS says 21 train records, the span holds 20"):
        spans.resolve(str(root))


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_an_archive_cut_between_its_members_is_refused(tmp_path, suffix):
    """A plain tar copied up to a member's end reads as a smaller archive unless its
    end-of-archive marker is required; a gzip one unless its trailer is."""
    import io
    import tarfile

    members = {
        f"cifar-10-batches-bin/data_batch_{b}.bin": fx.binary_batch(
            fx.balanced_labels(1, seed=b), seed=b
        )
        for b in (1, 2, 3)
    }
    whole = tmp_path / f"whole{suffix}"
    with tarfile.open(whole, "w:gz" if suffix == ".tar.gz" else "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    data = whole.read_bytes()
    size = len(members["cifar-10-batches-bin/data_batch_1.bin"])
    member_end = 2 * (512 + -(-size // 512) * 512)  # two members: header and padded data
    cut = data[:member_end] if suffix == ".tar" else data[:-4]  # the gzip trailer's size
    (tmp_path / "nightly" / "span-1").mkdir(parents=True)
    archive = tmp_path / "nightly" / "span-1" / f"c{suffix}"
    archive.write_bytes(cut)
    with pytest.raises(SourceError, match=rf"span-1 .*{archive}: corrupt or truncated archive"):
        spans.resolve(str(tmp_path / "nightly"))


def test_success_is_no_content_and_no_source(tmp_path):
    root = tmp_path / "nightly"
    folder = fx.complete_span(root, 1)
    unmarked = spans.content_fingerprint(str(folder))
    (folder / "_SUCCESS").write_text('{"train": 20, "test": 0}')
    assert spans.content_fingerprint(str(folder)) == unmarked  # the marker is not data
    assert spans.span_source(str(folder)) == str(folder)
    assert count_records(str(folder)) == {"train": 20, "test": 0}
    images = fx.image_folder(root / "span-2", per_class=1)
    (images / "_SUCCESS").write_text("")
    assert count_records(str(images)) == {"train": 10, "test": 10}
    assert spans.resolve(str(root)).sources == {2: str(images)}
    only_marker = tmp_path / "other" / "span-1"
    only_marker.mkdir(parents=True)
    (only_marker / "_SUCCESS").write_text("")
    with pytest.raises(spans.SpanError, match="span folder is empty"):
        spans.span_source(str(only_marker))  # the marker alone is no source


@pytest.mark.parametrize(
    "name, problem",
    [
        ("span-0", "span numbers start at 1; 0 stands for a plain source"),
        ("span-01", "a span number has no leading zero; rename it span-1"),
        ("span-007", "a span number has no leading zero; rename it span-7"),
    ],
)
def test_span_zero_and_leading_zeros_refuse_the_root(tmp_path, name, problem):
    root = _span_root(tmp_path, 1)
    shutil.copytree(root / "span-1", root / name)
    message = rf"^{name} \({root / name}\): {problem}$"
    with pytest.raises(spans.SpanError, match=message):
        spans.span_folders(str(root))
    with pytest.raises(spans.SpanError, match=message):
        span_choice.choose(str(root), None, None, False, "")


@pytest.mark.parametrize("number", [0, -2])
def test_a_span_number_below_1_is_refused(tmp_path, number):
    found = spans.span_folders(str(_span_root(tmp_path, 1)))
    with pytest.raises(spans.SpanError, match=f"span {number}: span numbers start at 1"):
        spans.select(found, span=number)


def test_resolve_owns_the_span_rules(tmp_path):
    root = tmp_path / "nightly"
    for number in (1, 2, 3):
        fx.complete_span(root, number, per_class=number)
    resolution = spans.resolve(str(root), span=3, window=2)
    folders = {n: str(root / f"span-{n}") for n in (2, 3)}
    assert resolution == spans.Resolution(
        numbers=[2, 3],
        sources=folders,
        fingerprints={n: spans.content_fingerprint(f) for n, f in folders.items()},
    )
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=1, per_class=1)
    fingerprint = spans.content_fingerprint(str(archive))  # a plain source: its content
    assert spans.resolve(str(archive)) == spans.Resolution([0], {0: str(archive)}, {0: fingerprint})
    with pytest.raises(spans.SpanError, match="need a folder of span-N folders"):
        spans.resolve(str(archive), span=2)


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


def test_a_plain_source_is_nothing_new_only_when_served_exactly(tmp_path):
    """Span 0 (a plain archive) is identified by its content: the same bytes the served
    version was trained on are nothing new, any other archive is new data (not a changed
    span), and --force trains anyway."""
    from components.storage.served_versions import ServedState

    archive = fx.binary_archive(tmp_path / "a.tar.gz", batches=1, per_class=2)
    other = fx.binary_archive(tmp_path / "b.tar.gz", batches=1, per_class=3)
    resolved = spans.resolve(str(archive))
    assert resolved.numbers == [0] and len(resolved.fingerprints[0]) == 32
    served = ServedState(
        version="9",
        spans={0: resolved.fingerprints[0]},
        published={0: (resolved.fingerprints[0], "9")},
    )
    with pytest.raises(
        spans.NoNewSpan, match=r"^no new data: served version 9 was trained on this source"
    ):
        spans.check_not_stale(resolved.fingerprints, served)
    spans.check_not_stale(resolved.fingerprints, served, force=True)
    spans.check_not_stale(spans.resolve(str(other)).fingerprints, served)  # new data
    with pytest.raises(SourceError, match="nope.tar.gz: no such file or folder"):
        spans.resolve(str(tmp_path / "nope.tar.gz"))
