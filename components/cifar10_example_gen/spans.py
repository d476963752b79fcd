"""Spans: new data arrives as numbered folders `span-1/`, `span-2/`, ... (TFX's {SPAN}), each
holding one source the readers take (an archive, an extracted release, an image folder).

`resolve` owns which spans a run ingests (the newest, one by number, or a window of the
newest K): the folders' naming rules, each span's completeness (an extracted one says so with
a `_SUCCESS` file, an archive reads to its end) and content fingerprint. `check_not_stale`
is the rule that nothing is stale: a run whose newest span the served model was already
trained on stops, and a span whose content changed under a published number is refused.
Plain functions over paths (local, gs:// or s3://, through tf.io.gfile where remote): the CLI runs
them before TFX loads, the ExampleGen again on every runner.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

from components.cifar10_example_gen.sources import SourceError, count_records
from components.storage import paths
from components.storage.served_versions import ServedState

SPAN_FOLDER = re.compile(r"^span-(\d+)$")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
NEWEST = -1  # the `span` setting that means "the newest span"
# Written last into a span folder by whatever copies the span (as Hadoop, Spark and Beam
# jobs mark a finished output): empty, or the record counts per source split as JSON.
SUCCESS_FILE = "_SUCCESS"
SPLIT_NAMES = ("train", "test")


class SpanError(ValueError):
    """A span cannot be used (missing, empty, changed under its number); the message names
    the span folder."""


class NoNewSpan(RuntimeError):
    """The newest span selected is already in the served model's record: nothing to train."""


def span_folders(root: str) -> dict[int, str]:
    """{span number: folder} of the `span-N` folders directly under `root`; empty when `root`
    is a plain source (an archive, or a folder without span folders). A `span-0` folder, or
    a number with a leading zero (`span-01` beside `span-1`), refuses the whole root."""
    if not paths.isdir(root):
        return {}
    found = {}
    for name in paths.listdir(root):
        match = SPAN_FOLDER.match(name)
        if not (match and paths.isdir(paths.join(root, name))):
            continue
        number = int(match.group(1))
        if number == 0:
            problem = "span numbers start at 1; 0 stands for a plain source"
        elif match.group(1).startswith("0"):
            problem = f"a span number has no leading zero; rename it span-{number}"
        else:
            found[number] = paths.join(root, name)
            continue
        raise SpanError(f"{name} ({paths.join(root, name)}): {problem}")
    return dict(sorted(found.items()))


def span_source(folder: str) -> str:
    """The source inside a span folder: its one archive file, else the folder itself (an
    extracted release or an image folder tree, which the readers check). The `_SUCCESS`
    marker is no source."""
    names = [n for n in paths.listdir(folder) if n != SUCCESS_FILE]
    if not names:
        raise SpanError(f"{folder}: the span folder is empty")
    archives = [n for n in names if n.endswith(ARCHIVE_SUFFIXES)]
    if len(archives) > 1:
        raise SpanError(f"{folder}: more than one archive in the span folder ({archives})")
    return paths.join(folder, archives[0]) if archives else folder


def select(spans: dict[int, str], span: int = NEWEST, window: int = 1) -> list[int]:
    """The span numbers a run ingests: `span` alone (NEWEST: the newest), or with `window`
    K > 1 the newest K up to and including it."""
    if not spans:
        raise SpanError("no span-N folders")
    if span != NEWEST and span < 1:
        raise SpanError(f"span {span}: span numbers start at 1 (0 stands for a plain source)")
    if window < 1:
        raise SpanError(f"--spans must be at least 1, got {window}")
    numbers = sorted(spans)
    last = numbers[-1] if span == NEWEST else span
    if last not in spans:
        raise SpanError(f"span-{last}: no such span folder (spans: {numbers})")
    chosen = [n for n in numbers if n <= last][-window:]
    if len(chosen) < window:
        raise SpanError(f"--spans {window}: only {len(chosen)} span(s) up to span-{last}")
    return chosen


def content_fingerprint(source: str) -> str:
    """sha256 of the source's files (relative names and bytes): a copied or touched span
    keeps its fingerprint, a changed byte does not. A span folder's `_SUCCESS` marker is
    not content."""
    digest = hashlib.sha256()
    files = [source] if not paths.isdir(source) else paths.walk(source)
    for path in files:
        name = os.path.relpath(path, source)
        if name == SUCCESS_FILE:
            continue
        digest.update(name.encode() + b"\0")
        with paths.open_binary(path) as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:32]


def _promised_counts(name: str, marker: str) -> dict[str, int] | None:
    """The record counts a `_SUCCESS` file states ({} when empty), None when it is absent."""
    if not paths.exists(marker):
        return None
    text = paths.read_text(marker).strip()
    try:
        counts = json.loads(text) if text else {}
    except ValueError:
        counts = None
    if not isinstance(counts, dict) or any(
        split not in SPLIT_NAMES or type(count) is not int or count < 0
        for split, count in counts.items()
    ):
        raise SpanError(
            f"{name}: {SUCCESS_FILE} must be empty or JSON record counts per split, like "
            f'{{"train": 50000, "test": 10000}}; it holds {text[:60]!r}'
        )
    return counts


def check_complete(number: int, folder: str, source: str) -> None:
    """A span is complete only when it says so: an extracted release or image folder needs
    its `_SUCCESS` file; an archive needs none, but must read to its end. Where `_SUCCESS`
    states record counts, the span must hold exactly those. Raises SpanError (incomplete)
    or SourceError (a bad or truncated source), naming the span folder."""
    name = f"span-{number} ({folder})"
    promised = _promised_counts(name, paths.join(folder, SUCCESS_FILE))
    archive = source != folder
    if promised is None and not archive:
        raise SpanError(
            f"{name}: incomplete: no {SUCCESS_FILE} file (write it last, once every file of "
            "the span is copied)"
        )
    if not (archive or promised):
        return
    try:
        held = count_records(source)
    except SourceError as err:
        raise SourceError(f"{name} cannot be used: {err}") from err
    for split, count in (promised or {}).items():
        if held.get(split, 0) != count:
            raise SpanError(
                f"{name}: incomplete: {SUCCESS_FILE} says {count} {split} records, the span "
                f"holds {held.get(split, 0)}"
            )


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What a run ingests: span numbers ([0] for a plain source), each one's source and
    content fingerprint ("" for span 0, which no staleness rule applies to)."""

    numbers: list[int]
    sources: dict[int, str]
    fingerprints: dict[int, str]


def resolve(root: str, span: int = NEWEST, window: int = 1) -> Resolution:
    """The spans under `root` a run with these settings ingests: the folders and their
    naming rules, `select`, each selected span's source and completeness, its fingerprint.
    Raises SpanError, or SourceError for a selected span that cannot be read."""
    folders = span_folders(root)
    if not folders:
        if span != NEWEST or window != 1:
            raise SpanError(
                f"{root}: span settings (span {span}, window {window}) need a folder of "
                "span-N folders (TFX's {SPAN})"
            )
        if not paths.exists(root):
            raise SourceError(f"{root}: no such file or folder")
        return Resolution([0], {0: root}, {0: content_fingerprint(root)})
    numbers = select(folders, span, window)
    found = {}
    for number in numbers:
        try:
            found[number] = span_source(folders[number])
        except SpanError as err:
            raise SpanError(f"span-{number} ({folders[number]}) cannot be used: {err}") from err
        check_complete(number, folders[number], found[number])
    fingerprints = {n: content_fingerprint(path) for n, path in found.items()}
    return Resolution(numbers, found, fingerprints)


def check_not_stale(fingerprints: dict[int, str], served: ServedState, force: bool = False) -> None:
    """Refuses (SpanError) a span whose fingerprint differs from the one a served version
    published for its number; raises NoNewSpan when the newest span is one the served
    version was trained on (its ancestors' spans included) or one that trained a version
    since rolled back (same content), unless `force`. A plain source
    (span 0) is new unless the served version was trained on exactly its content: another
    archive given as --data is new data, not a changed span."""
    for number, fingerprint in sorted(fingerprints.items()):
        published, version = served.published.get(number, (None, None))
        if number and published is not None and published != fingerprint:
            raise SpanError(
                f"span-{number}: its content changed since served version {version} "
                f"was trained on it (fingerprint {fingerprint[:12]}, published "
                f"{published[:12]}); data must not change under a published span: add it "
                "as a new span"
            )
    newest = max(fingerprints)
    rolled_back = served.rollback_of(newest, fingerprints[newest])
    if rolled_back and not force:
        version, record = rolled_back
        raise NoNewSpan(
            f"no new span: {f'span-{newest}' if newest else 'this source'} trained version "
            f"{version}, which was rolled back ({record.get('who', 'someone')}, "
            f"{record.get('when', '?')}: {record.get('why', 'no reason given')}); nothing is "
            "retrained unattended (--force retrains)"
        )
    if not newest and served.spans.get(0) == fingerprints[0] and not force:
        raise NoNewSpan(
            f"no new data: served version {served.version} was trained on this source "
            f"(content fingerprint {fingerprints[0][:12]}); nothing to train (--force retrains)"
        )
    if newest and newest in served.spans and not force:
        raise NoNewSpan(
            f"no new span: served version {served.version} was trained on spans "
            f"{sorted(served.spans)}, which include span-{newest}; nothing to train "
            "(--force retrains)"
        )


def record_json(fingerprints: dict[int, str]) -> str:
    """What a push keeps beside the model (contract.SERVED_SPANS_FILE)."""
    return json.dumps({"spans": sorted(fingerprints), "fingerprints": fingerprints})
