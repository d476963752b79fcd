"""Train images the served version was already trained on: the train records of the spans new
to it (a span is seen when the served version recorded it with the same fingerprint) whose
pixels' digest is in its training-image index (SERVED_IMAGES_FILE), counted in the
ExampleGen's Beam graph. A span that re-sends old images would otherwise train as new data;
the gate stops a run where more than its share are (components/validation_gate)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from components.contract import unpack_digests
from components.storage.served_versions import ServedState

# In EVAL_DROPPED_FILE, beside the eval counts: the new spans' train records, how many of
# them the served version was trained on (None when its index could not be read), per span.
NEW_SPANS, NEW_TRAIN = "new_spans", "new_train_records"
TRAIN_SEEN, TRAIN_SEEN_BY_SPAN = "train_seen_by_served", "train_seen_by_span"


def new_spans(fingerprints: dict[int, str], served: ServedState) -> list[int]:
    """The spans of a window the served version was not trained on (as recorded, with the
    same fingerprint): all of them when nothing is served, none on a forced rerun of a seen
    span; a plain source (span 0) is new unless it is the content trained on."""
    return sorted(n for n, print_ in fingerprints.items() if served.spans.get(n) != print_)


def read_index(path: str | None) -> frozenset[bytes]:
    """The digests of a training-image index file (none for None)."""
    if not path:
        return frozenset()
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return unpack_digests(handle.read())


def _counted(unit: tuple[int, list[bytes]], index: frozenset[bytes]) -> tuple[int, int, int]:
    """(span, its train records in the unit, how many of them are in the index)."""
    span, digests = unit
    return span, len(digests), sum(1 for digest in digests if digest in index)


def _seen_by_span(counted: list[tuple[int, int, int]], spans: list[int]) -> dict:
    by_span: dict[str, int] = {}
    for span, _, seen in sorted(counted):
        if seen:
            by_span[str(span)] = by_span.get(str(span), 0) + seen
    return {
        NEW_SPANS: spans,
        NEW_TRAIN: sum(records for _, records, _ in counted),
        TRAIN_SEEN: sum(by_span.values()),
        TRAIN_SEEN_BY_SPAN: by_span,
    }


@beam.ptransform_fn
def CountSeenTrain(
    train_spans: beam.PCollection, served_index: str | None, spans: list[int]
) -> beam.PCollection:
    """From (span, digests of train records) per unit read: one dict {NEW_SPANS, NEW_TRAIN:
    records of the new `spans`, TRAIN_SEEN: of those, how many are in the served version's
    index (at `served_index`; None: none), TRAIN_SEEN_BY_SPAN: {span: count}}."""
    new = set(spans)
    served = (
        train_spans.pipeline
        | "ServedIndexPath" >> beam.Create([served_index])
        | "ServedIndex" >> beam.Map(read_index)
    )
    return (
        train_spans
        | "OfNewSpans" >> beam.Filter(lambda unit: unit[0] in new)
        | "Count" >> beam.Map(_counted, beam.pvalue.AsSingleton(served))
        | "AllUnits" >> beam.combiners.ToList()
        | "Counted" >> beam.Map(_seen_by_span, spans)
    )
