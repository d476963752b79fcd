"""A local run's spans, decided before TFX loads: which span folders `--data` holds, which the
run takes (`--span`, `--spans`), every record of each checked, and the nothing-stale rule
against the versions already served from this output folder. The ExampleGen applies the same
rules again (components/cifar10_example_gen/spans.py), which is all a cloud run has."""

from __future__ import annotations

import dataclasses
import hashlib

from components.cifar10_example_gen import spans
from components.cifar10_example_gen.sources import SourceError, count_records
from components.storage.served_versions import read_served_state


@dataclasses.dataclass(frozen=True)
class SpanChoice:
    """What a run ingests: span numbers (0: a plain source), their sources, the records per
    source split, the cache key of it all, and that of the served state it was checked
    against (the ServedState step's read key)."""

    numbers: list[int]
    sources: dict[int, str]
    counts: dict[str, int]
    cache_key: str
    served_key: str = ""

    @property
    def settings(self) -> dict:
        """The PipelineConfig fields that make the ExampleGen take exactly these spans."""
        if self.numbers == [0]:
            return {}
        return {"span": max(self.numbers), "span_window": len(self.numbers)}


def choose(
    source: str, span: int | None, window: int | None, force: bool, serving_model_dir: str
) -> SpanChoice:
    """`spans.resolve` with the run's flags, then the nothing-stale rule against the served
    state. Raises SourceError (a bad span, naming its folder), spans.SpanError (no such span,
    a half-copied or changed published span) or spans.NoNewSpan (nothing new to train)."""
    flagged = span is not None or window is not None
    if flagged and not spans.span_folders(source):
        raise spans.SpanError(
            f"{source}: --span and --spans need a folder of span-N folders (TFX's {{SPAN}})"
        )
    chosen = spans.resolve(
        source, spans.NEWEST if span is None else span, 1 if window is None else window
    )
    counts = {"train": 0, "test": 0}
    for number in chosen.numbers:  # every record checked (an archive's already, by resolve)
        try:
            for split, count in count_records(chosen.sources[number]).items():
                counts[split] += count
        except SourceError as err:
            if not number:
                raise
            folder = spans.span_folders(source)[number]
            raise SourceError(f"span-{number} ({folder}) cannot be used: {err}") from err
    served = read_served_state(serving_model_dir)
    spans.check_not_stale(chosen.fingerprints, served, force)
    key = hashlib.sha256(spans.record_json(chosen.fingerprints).encode()).hexdigest()[:16]
    return SpanChoice(chosen.numbers, chosen.sources, counts, key, served.read_key())
