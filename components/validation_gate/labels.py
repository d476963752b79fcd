"""The label check: a sample of the span's new records scored by the served model (a Beam
step, components/validation_gate/scoring.py, on the records' raw pixels), judged by
components/checks/label_agreement.py against the reference the served version keeps, and its
embeddings compared with the served version's (components/checks/drift.py)."""

from __future__ import annotations

import dataclasses
import math
import os

import apache_beam as beam
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from components.checks import drift, label_agreement
from components.contract import TRAIN_SPLIT
from components.storage.served_versions import load_served_state
from components.validation_gate import scoring

# Fewer scored records than this say more about the sample than about the labels.
MIN_SCORED = 500


def sample_every(train_records: int) -> int:
    """One record in this many is scored (scoring.kept): at most SCORED_SAMPLE of them."""
    return max(1, math.ceil(train_records / label_agreement.SCORED_SAMPLE))


def check_labels(
    examples: list,
    served: list,
    train_records: int,
    spans: list[int] | None,
    output_dir: str,
    make_pipeline=beam.Pipeline,
) -> tuple[label_agreement.Judgement | None, str]:
    """(judgement, '') or (None, why the labels were not judged). The scoring is a Beam
    pipeline from `make_pipeline` (components/validation_gate/scoring.py) that leaves the
    scored sample in `output_dir`."""
    state = load_served_state(served[0].uri) if served else None
    if state is None or state.version is None:
        return None, "no served model: nothing to ask"
    model_dir = path_utils.serving_model_dir(served[0].uri)
    every = sample_every(train_records)
    split_uri = artifact_utils.get_split_uri(examples, TRAIN_SPLIT)
    scored = scoring.score_sample(split_uri, model_dir, every, spans, output_dir, make_pipeline)
    if len(scored.labels) < MIN_SCORED:
        return None, (
            f"too few records to judge the labels ({len(scored.labels):,} < {MIN_SCORED:,})"
        )
    reference_path = os.path.join(model_dir, label_agreement.REFERENCE_FILE)
    if fileio.exists(reference_path):
        with fileio.open(reference_path) as handle:
            reference = label_agreement.Reference.from_json(handle.read())
        name = f"served version {state.version} on its own eval split"
    else:
        reference = None
        name = (
            f"served version {state.version} keeps no reference: judged against "
            f"{label_agreement.DEFAULT_CONFUSION:.0%} confusion"
        )
    judgement = label_agreement.judge(
        scored.probabilities, scored.labels, scored.ids, reference, name
    )
    shift = _embedding_shift(model_dir, scored.embeddings, state.version)
    return dataclasses.replace(judgement, **shift), ""


def _embedding_shift(model_dir: str, embeddings, version: str) -> dict:
    """The Judgement's embedding fields: the scored images' embeddings against the served
    version's sample of its eval split's (components/checks/drift.py), or why not."""
    path = os.path.join(model_dir, drift.EMBEDDING_FILE)
    if embeddings is None:
        return {"embedding_skipped": f"served version {version} exports no embeddings"}
    if not fileio.exists(path):
        return {"embedding_skipped": f"served version {version} keeps no embedding sample"}
    try:
        with fileio.open(path, "rb") as handle:
            kept = drift.embeddings_from_bytes(handle.read(), path)
        value, said = drift.compare_embeddings(kept, embeddings)
    except ValueError as err:  # a damaged sample, or one of another network's width
        return {"embedding_skipped": f"not compared: {err}"}
    if value is None:
        return {"embedding_skipped": said}
    return {
        "embedding_shift": value,
        "embedding_threshold": drift.MMD_THRESHOLD,
        "embedding_compared": said,
        "embedding_skipped": "",
    }
