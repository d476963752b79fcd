"""A local run's spans, decided before TFX loads: which span folders `--data` holds, which the
run takes (`--span`, `--spans`), every record of each checked, and the nothing-stale rule
against the versions already served from this output folder. The ExampleGen applies the same
rules again (components/cifar10_example_gen/spans.py), which is all a cloud run has."""

from __future__ import annotations

import dataclasses
import hashlib

from components.cifar10_example_gen import spans
from components.cifar10_example_gen.sources import SourceError, count_records, fingerprint


@dataclasses.dataclass(frozen=True)
class SpanChoice:
    """What a run ingests: span numbers (0: a plain source), their sources, the records per
    source split, and the cache key of it all."""

    numbers: list[int]
    sources: dict[int, str]
    counts: dict[str, int]
    cache_key: str

    @property
    def settings(self) -> dict:
        """The PipelineConfig fields that make the ExampleGen take exactly these spans."""
        if self.numbers == [0]:
            return {}
        return {"span": max(self.numbers), "span_window": len(self.numbers)}


def choose(
    source: str, span: int | None, window: int | None, force: bool, serving_model_dir: str
) -> SpanChoice:
    """Raises SourceError (a bad or half-copied span, naming its folder), spans.SpanError
    (no such span, a changed published span) or spans.NoNewSpan (nothing new to train)."""
    folders = spans.span_folders(source)
    if not folders:
        if span is not None or window is not None:
            raise spans.SpanError(
                f"{source}: --span and --spans need a folder of span-N folders (TFX's {{SPAN}})"
            )
        return SpanChoice([0], {0: source}, count_records(source), fingerprint(source))
    numbers = spans.select(folders, spans.NEWEST if span is None else span, window or 1)
    found, counts = {}, {"train": 0, "test": 0}
    for number in numbers:
        try:
            found[number] = spans.span_source(folders[number])
            for split, count in count_records(found[number]).items():
                counts[split] += count
        except (SourceError, spans.SpanError) as err:
            raise SourceError(f"span-{number} ({folders[number]}) cannot be used: {err}") from err
    fingerprints = {n: spans.content_fingerprint(path) for n, path in found.items()}
    spans.check_not_stale(fingerprints, spans.served_records(serving_model_dir), force)
    key = hashlib.sha256(spans.record_json(fingerprints).encode()).hexdigest()[:16]
    return SpanChoice(numbers, found, counts, key)
