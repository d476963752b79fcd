"""Train images the served version was already trained on: the train records of the spans new
to it (a span is seen when the served version recorded it with the same fingerprint) whose
pixels' digest is in its training-image index (SERVED_IMAGES_FILE), counted in the
ExampleGen's Beam graph. A span that re-sends old images would otherwise train as new data;
the gate stops a run where more than its share are (components/validation_gate)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from components.contract import unpack_digests
from components.served_versions import ServedState

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


def _in_index(pair: tuple[int, bytes], index: frozenset[bytes]) -> bool:
    return pair[1] in index


def _seen_by_span(pairs: list[tuple[int, int]], total: int, spans: list[int]) -> dict:
    by_span = {str(span): count for span, count in sorted(pairs)}
    return {
        NEW_SPANS: spans,
        NEW_TRAIN: total,
        TRAIN_SEEN: sum(by_span.values()),
        TRAIN_SEEN_BY_SPAN: by_span,
    }


@beam.ptransform_fn
def CountSeenTrain(
    train_spans: beam.PCollection, served_index: str | None, spans: list[int]
) -> beam.PCollection:
    """From (span, digest) of every train record: one dict {NEW_SPANS, NEW_TRAIN: records
    of the new `spans`, TRAIN_SEEN: of those, how many are in the served version's index
    (at `served_index`; None: none), TRAIN_SEEN_BY_SPAN: {span: count}}."""
    new = set(spans)
    pipeline = train_spans.pipeline
    served = (
        pipeline
        | "ServedIndexPath" >> beam.Create([served_index])
        | "ServedIndex" >> beam.Map(read_index)
    )
    of_new = train_spans | "OfNewSpans" >> beam.Filter(lambda pair: pair[0] in new)
    total = of_new | "CountNew" >> beam.combiners.Count.Globally()
    seen = (
        of_new
        | "Seen" >> beam.Filter(_in_index, beam.pvalue.AsSingleton(served))
        | "SeenSpan" >> beam.Keys()
        | "PerSpan" >> beam.combiners.Count.PerElement()
        | "AllSpans" >> beam.combiners.ToList()
    )
    return seen | "Counted" >> beam.Map(_seen_by_span, beam.pvalue.AsSingleton(total), spans)
