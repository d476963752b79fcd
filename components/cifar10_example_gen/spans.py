"""Spans: new data arrives as numbered folders `span-1/`, `span-2/`, ... (TFX's {SPAN}), each
holding one source the readers take (an archive, an extracted release, an image folder).

Which spans a run ingests (the newest, one by number, or a window of the newest K), each
span's content fingerprint, and the rule that nothing is stale: a run whose newest span the
served model was already trained on stops, and a span whose content changed under a
published number is refused. Plain functions over paths (local or gs://, through tf.io.gfile
where remote): the CLI runs them before TFX loads, the ExampleGen again on every runner.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
import re

from components.contract import SAVED_MODEL_FILE, SERVED_SPANS_FILE

SPAN_FOLDER = re.compile(r"^span-(\d+)$")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
NEWEST = -1  # the `span` setting that means "the newest span"


class SpanError(ValueError):
    """A span cannot be used (missing, empty, changed under its number); the message names
    the span folder."""


class NoNewSpan(RuntimeError):
    """The newest span selected is already in the served model's record: nothing to train."""


def _gfile():
    from components.cifar10_example_gen.shards import _gfile as gfile

    return gfile()


def _listdir(path: str) -> list[str]:
    if "://" in path:
        return [name.rstrip("/") for name in _gfile().listdir(path)]
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _isdir(path: str) -> bool:
    return _gfile().isdir(path) if "://" in path else os.path.isdir(path)


def _join(*parts: str) -> str:
    return posixpath.join(*parts) if "://" in parts[0] else os.path.join(*parts)


def span_folders(root: str) -> dict[int, str]:
    """{span number: folder} of the `span-N` folders directly under `root`; empty when `root`
    is a plain source (an archive, or a folder without span folders)."""
    if not _isdir(root):
        return {}
    found = {}
    for name in _listdir(root):
        match = SPAN_FOLDER.match(name)
        if match and _isdir(_join(root, name)):
            found[int(match.group(1))] = _join(root, name)
    return dict(sorted(found.items()))


def span_source(folder: str) -> str:
    """The source inside a span folder: its one archive file, else the folder itself (an
    extracted release or an image folder tree, which the readers check)."""
    names = _listdir(folder)
    if not names:
        raise SpanError(f"{folder}: the span folder is empty")
    archives = [n for n in names if n.endswith(ARCHIVE_SUFFIXES)]
    if len(archives) > 1:
        raise SpanError(f"{folder}: more than one archive in the span folder ({archives})")
    return _join(folder, archives[0]) if archives else folder


def select(spans: dict[int, str], span: int = NEWEST, window: int = 1) -> list[int]:
    """The span numbers a run ingests: `span` alone (NEWEST: the newest), or with `window`
    K > 1 the newest K up to and including it."""
    if not spans:
        raise SpanError("no span-N folders")
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
    keeps its fingerprint, a changed byte does not."""
    digest = hashlib.sha256()
    files = [source] if not _isdir(source) else _walk(source)
    for path in files:
        digest.update(os.path.relpath(path, source).encode() + b"\0")
        opener = _gfile().GFile if "://" in path else open
        with opener(path, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:32]


def _walk(root: str) -> list[str]:
    if "://" in root:
        return sorted(
            _join(folder, name) for folder, _, names in _gfile().walk(root) for name in names
        )
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)


@dataclasses.dataclass(frozen=True)
class ServedRecord:
    """The spans (number -> content fingerprint) a served version was trained on."""

    version: str
    spans: dict[int, str]


def served_records(serving_model_dir: str) -> list[ServedRecord]:
    """Every complete served version's record, oldest first (versions pushed from a plain
    source record span 0, which no rule applies to)."""
    if not serving_model_dir or not _isdir(serving_model_dir):
        return []
    records = []
    for name in _listdir(serving_model_dir):
        folder = _join(serving_model_dir, name)
        if not name.isdigit() or not _exists(_join(folder, SAVED_MODEL_FILE)):
            continue
        record = _join(folder, SERVED_SPANS_FILE)
        if _exists(record):
            spans = {int(k): v for k, v in json.loads(_read(record))["fingerprints"].items()}
            records.append(ServedRecord(name, spans))
    return sorted(records, key=lambda r: int(r.version))


def _exists(path: str) -> bool:
    return _gfile().exists(path) if "://" in path else os.path.exists(path)


def _read(path: str) -> str:
    if "://" in path:
        with _gfile().GFile(path) as handle:
            return handle.read()
    with open(path) as handle:
        return handle.read()


def check_not_stale(
    fingerprints: dict[int, str], records: list[ServedRecord], force: bool = False
) -> None:
    """Refuses (SpanError) a span whose fingerprint differs from a published one; raises
    NoNewSpan when the newest span is in the newest served version's record, unless
    `force`. Span 0 (a plain source) has no rule."""
    for record in records:
        for number, fingerprint in fingerprints.items():
            published = record.spans.get(number)
            if number and published is not None and published != fingerprint:
                raise SpanError(
                    f"span-{number}: its content changed since served version {record.version} "
                    f"was trained on it (fingerprint {fingerprint[:12]}, published "
                    f"{published[:12]}); data must not change under a published span: add it "
                    "as a new span"
                )
    newest = max(fingerprints)
    if newest and records and newest in records[-1].spans and not force:
        served = sorted(records[-1].spans)
        raise NoNewSpan(
            f"no new span: served version {records[-1].version} was trained on spans "
            f"{served}, which include span-{newest}; nothing to train (--force retrains)"
        )


def record_json(fingerprints: dict[int, str]) -> str:
    """What a push keeps beside the model (contract.SERVED_SPANS_FILE)."""
    return json.dumps({"spans": sorted(fingerprints), "fingerprints": fingerprints})
