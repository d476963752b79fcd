"""The label check: a sample of the span's new records scored by the served model (batched, on
the records' raw pixels), judged by components/label_agreement.py against the reference the
served version keeps."""

from __future__ import annotations

import math
import os

import numpy as np
import tensorflow as tf
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from components import label_agreement, model_scoring
from components.contract import (
    IMAGE_KEY,
    IMAGE_SHAPE,
    LABEL_KEY,
    RECORD_ID_KEY,
    TRAIN_SPLIT,
)
from components.served_versions import load_served_state

# Fewer scored records than this say more about the sample than about the labels.
MIN_SCORED = 500


def _sample(split_uri: str, every: int, spans: list[int] | None):
    """(serialized, images uint8, labels, record ids) of every `every`-th record of the
    split (of `spans` only, when given), in file order."""
    spec = {
        IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
        RECORD_ID_KEY: tf.io.FixedLenFeature([], tf.string),
    }
    pattern = "span-(" + "|".join(str(int(n)) for n in spans or ()) + ")/.*"
    files = tf.io.gfile.glob(f"{split_uri}/*")
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if spans:
        ids = records.map(
            lambda r: tf.io.parse_single_example(r, {RECORD_ID_KEY: spec[RECORD_ID_KEY]})
        )
        records = (
            tf.data.Dataset.zip((records, ids))
            .filter(lambda r, parsed: tf.strings.regex_full_match(parsed[RECORD_ID_KEY], pattern))
            .map(lambda r, _: r)
        )
    records = records.shard(every, 0).batch(4096)
    parts = {"serialized": [], IMAGE_KEY: [], LABEL_KEY: [], RECORD_ID_KEY: []}
    for batch in records:
        parsed = tf.io.parse_example(batch, spec)
        parts["serialized"].append(batch.numpy())
        pixels = tf.io.decode_raw(parsed[IMAGE_KEY], tf.uint8)
        parts[IMAGE_KEY].append(tf.reshape(pixels, [-1, *IMAGE_SHAPE]).numpy())
        parts[LABEL_KEY].append(parsed[LABEL_KEY].numpy())
        parts[RECORD_ID_KEY].extend(x.decode() for x in parsed[RECORD_ID_KEY].numpy())
    if not parts[LABEL_KEY]:
        return np.zeros(0, object), np.zeros((0, *IMAGE_SHAPE), np.uint8), np.zeros(0, int), []
    return (
        np.concatenate(parts["serialized"]),
        np.concatenate(parts[IMAGE_KEY]),
        np.concatenate(parts[LABEL_KEY]),
        parts[RECORD_ID_KEY],
    )


def check_labels(
    examples: list, served: list, train_records: int, spans: list[int] | None
) -> tuple[label_agreement.Judgement | None, str]:
    """(judgement, '') or (None, why the labels were not judged)."""
    state = load_served_state(served[0].uri) if served else None
    if state is None or state.version is None:
        return None, "no served model: nothing to ask"
    model_dir = path_utils.serving_model_dir(served[0].uri)
    every = max(1, math.ceil(train_records / label_agreement.SCORED_SAMPLE))
    split_uri = artifact_utils.get_split_uri(examples, TRAIN_SPLIT)
    serialized, images, labels, ids = _sample(split_uri, every, spans)
    if len(labels) < MIN_SCORED:
        return None, f"too few records to judge the labels ({len(labels):,} < {MIN_SCORED:,})"
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
    probabilities = model_scoring.probabilities(model_dir, images, serialized)
    return label_agreement.judge(probabilities, labels, ids, reference, name), ""
