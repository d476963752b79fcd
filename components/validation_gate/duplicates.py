"""The gate's duplicates check: exact and near copies among the run's images (records.py), copies
the served model's embeddings find in the scored sample (embedding_copies.py), and the new
spans' train images the served version was already trained on (the ExampleGen's count);
each stops the run beyond DUPLICATE_SHARE."""

from __future__ import annotations

import json
import os

from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from components.contract import EVAL_DROPPED_FILE, EVAL_SPLIT, TRAIN_SPLIT
from components.validation_gate import embedding_copies, scoring
from components.validation_gate.labels import sample_every
from components.validation_gate.records import DUPLICATE_SHARE, duplicates, image_hashes


def find_duplicates(
    examples: list, output_uri: str, train_records: int, drifted: bool = False
) -> tuple[dict | None, list[str]]:
    """Exact and near copies among the run's train and eval images, with the eval images the
    ExampleGen dropped, and the embedding copies of the sample the gate scored into
    `output_uri` (`embedding_copies`, when it scored one; not judged when the images
    `drifted`); None without the examples. With the problem lines of `duplicate_problems`."""
    if not examples:
        return None, []
    train, evals = (
        image_hashes(artifact_utils.get_split_uri(examples, split))
        for split in (TRAIN_SPLIT, EVAL_SPLIT)
    )
    dropped = os.path.join(examples[0].uri, EVAL_DROPPED_FILE)  # none from older ExampleGens
    recorded = json.loads(io_utils.read_string_file(dropped)) if fileio.exists(dropped) else None
    copies = duplicates(train, evals, recorded)
    embedded = embedded_copies(output_uri, train_records, drifted)
    if embedded is not None:
        copies["embedding_copies"] = embedded
    return copies, duplicate_problems(copies, recorded)


def embedded_copies(output_uri: str, train_records: int, drifted: bool = False) -> dict | None:
    """Copies the served model's embeddings find in the scored sample (None: none scored):
    `found` among its `scored` records, one in `every` of the train split's. `copies`, the
    count judged, is found x every: the sample's share of copies, as for its 5,000 images
    the false positives were measured (benchmarks/embedding_copies.py). Both images of a pair
    are in a 1-in-k sample with a chance of 1 in k², so a sampled span's copies count about
    k times too few; a found x k² estimate would count CIFAR-10's own close pairs as
    copies (0.6% of its 50,000 images at THRESHOLD). On images unlike its training data
    (`drifted`) the served model's embeddings tell images apart less well (darker fixture
    images: 947 of 1,200 were counted as copies), so they are not judged."""
    scored = scoring.read_scored(output_uri)
    if scored is None:
        return None
    if drifted:
        return {"copies": 0, "skipped": _DRIFTED}
    if scored.embeddings is None:
        return {"copies": 0, "skipped": "the served version exports no embeddings"}
    found = embedding_copies.copies(scored.embeddings, scored.near)
    every = sample_every(train_records)
    return {
        "copies": found * every,
        "found": found,
        "scored": len(scored.ids),
        "every": every,
        "threshold": embedding_copies.THRESHOLD,
        "skipped": "",
    }


_DRIFTED = "the images drifted from the served model's training data"


def duplicate_problems(copies: dict, recorded: dict | None) -> list[str]:
    """The problem lines: when exact, near and embedding copies together are more than
    DUPLICATE_SHARE of the run's images, and when more than that share of the new spans'
    train images are ones the served version was trained on (`copies`: find_duplicates';
    `recorded`: the ExampleGen's EVAL_DROPPED_FILE, or None)."""
    return _copies_problems(copies, recorded) + _seen_train_problems(recorded or {})


def _seen_train_problems(recorded: dict) -> list[str]:
    """The ExampleGen's count of the new spans' train images in the served version's index
    (components/cifar10_example_gen/seen_train.py), judged by the same share."""
    seen, new = recorded.get("train_seen_by_served"), recorded.get("new_train_records") or 0
    if seen is None or seen <= DUPLICATE_SHARE * new:
        return []
    spans = ", ".join(
        f"{f'span {n}' if n != '0' else 'the source'}: {count:,}"
        for n, count in recorded.get("train_seen_by_span", {}).items()
        if count
    )
    version = recorded.get("served_version")
    return [
        f"duplicates: {seen:,} of {new:,} train images new to served version {version} "
        f"({spans}) are images it was already trained on: old data sent as new (at most "
        f"{DUPLICATE_SHARE:.0%} accepted)"
    ]


def _embedded_text(embedded: dict) -> str:
    """What the embeddings found, for the problem line ('' when nothing)."""
    if not embedded.get("copies"):
        return ""
    sampled = embedded["every"] > 1
    return f", {embedded['copies']:,} by the served model's embeddings: shifted or cropped" + (
        f", estimated from {embedded['found']:,} in a 1-in-{embedded['every']} sample"
        if sampled
        else ""
    )


def _copies_problems(copies: dict, recorded: dict | None) -> list[str]:
    embedded = copies.get("embedding_copies") or {}
    repeated = copies["copies"] + copies["near_copies"] + embedded.get("copies", 0)
    if repeated <= DUPLICATE_SHARE * copies["images"]:
        return []
    dropped_copies = recorded["copies_of_train"] if recorded else 0
    also = copies["eval_in_train"] + dropped_copies
    return [
        f"duplicates: {repeated:,} of {copies['images']:,} images are copies of another image "
        f"of this run ({copies['copies']:,} exact, {copies['near_copies']:,} near: the same "
        f"picture re-encoded{_embedded_text(embedded)}; {also:,} eval images also in train"
        f"{', dropped' if dropped_copies else ''}; at most {DUPLICATE_SHARE:.0%} accepted)"
    ]
