"""What the gate reads from the ExampleGen's records themselves, for checks the statistics
cannot answer: statistics of some spans of a window, exactly how many images fall outside a
summary's domain (both parse only the label and summary features), and the hashes of each
image's pixels that find exact and near copies (`image_hashes`, the one reader of pixels)."""

from __future__ import annotations

import dataclasses

from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from components.contract import (
    IMAGE_KEY,
    IMAGE_SHAPE,
    IMAGE_SUMMARY_FEATURES,
    LABEL_KEY,
    RECORD_ID_KEY,
    image_digest,
)
from components.validation_gate import near_copies
from components.validation_gate.comparison import statistics_options

_BATCH = 4096
# At most this share of a split's images may fall outside a summary's domain (the schema's
# domains are the whole training set's range with a margin: it has none outside). Beyond it
# the split is refused; up to it the images are counted in the comparison and the summary, so
# one odd image (a test card, pure noise) no longer fails a whole run.
OUT_OF_DOMAIN_TOLERANCE = 0.001
_DOMAIN_TYPES = (
    anomalies_pb2.AnomalyInfo.FLOAT_TYPE_BIG_FLOAT,
    anomalies_pb2.AnomalyInfo.FLOAT_TYPE_SMALL_FLOAT,
)


def read_summaries(split_uri: str, spans: list[int] | None = None):
    """A DataFrame of the label and image summaries of a split folder's records (only those
    of `spans`, by their `span-N/` record ids, when given)."""
    import numpy as np
    import pandas as pd
    import tensorflow as tf

    spec = {RECORD_ID_KEY: tf.io.FixedLenFeature([], tf.string)}
    spec[LABEL_KEY] = tf.io.FixedLenFeature([], tf.int64)
    spec.update((name, tf.io.FixedLenFeature([], tf.float32)) for name in IMAGE_SUMMARY_FEATURES)
    pattern = "span-(" + "|".join(str(int(n)) for n in spans or ()) + ")/.*"
    files = tf.io.gfile.glob(f"{split_uri}/*")
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH)
    columns: dict[str, list] = {name: [] for name in spec if name != RECORD_ID_KEY}
    for batch in records.map(lambda b: tf.io.parse_example(b, spec)):
        keep = tf.strings.regex_full_match(batch[RECORD_ID_KEY], pattern) if spans else None
        for name, values in columns.items():
            values.append(batch[name] if keep is None else tf.boolean_mask(batch[name], keep))
    return pd.DataFrame(
        {name: np.concatenate([v.numpy() for v in values]) if values else np.zeros(0)
         for name, values in columns.items()}
    )  # fmt: skip


def span_statistics(
    split_uri: str, spans: list[int], schema: schema_pb2.Schema
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """TFDV statistics, with StatisticsGen's options, of the compared features of the records
    of `spans` in one split folder."""
    import tensorflow_data_validation as tfdv

    frame = read_summaries(split_uri, spans)
    return tfdv.generate_statistics_from_dataframe(frame, statistics_options(schema))


def domain_features(anomalies: anomalies_pb2.Anomalies) -> list[str]:
    """The image summaries whose only anomaly is values outside the schema's domain."""
    return sorted(
        name
        for name, info in anomalies.anomaly_info.items()
        if name in IMAGE_SUMMARY_FEATURES
        and info.reason
        and all(reason.type in _DOMAIN_TYPES for reason in info.reason)
    )


def out_of_domain(frame, schema: schema_pb2.Schema, features: list[str]) -> dict[str, dict]:
    """{feature: {count, records, domain}}: how many of the frame's images are outside each
    feature's float domain."""
    found = {}
    for feature in schema.feature:
        if feature.name in features and feature.HasField("float_domain"):
            domain = feature.float_domain
            values = frame[feature.name]
            low = domain.min if domain.HasField("min") else float("-inf")
            high = domain.max if domain.HasField("max") else float("inf")
            count = int(((values < low) | (values > high)).sum())
            found[feature.name] = {"count": count, "records": len(frame), "domain": [low, high]}
    return found


def tolerated(count: int, records: int) -> bool:
    return count <= max(1, int(OUT_OF_DOMAIN_TOLERANCE * records))


# More exact or near copies than this share of a run's images stop it (CIFAR-10's 50,000
# training images: no exact copy, one near copy; benchmarks/duplicate_thresholds.py).
DUPLICATE_SHARE = 0.01


@dataclasses.dataclass(frozen=True)
class Hashes:
    """Per record of a split, in file order: the pixels' digest (exact copies) and their
    difference hash (near copies: near_copies.py)."""

    exact: list[bytes]
    near: list[bytes]


def image_hashes(split_uri: str) -> Hashes:
    """Both hashes of each record's pixels in a split folder (the ExampleGen's), in one read.
    An image of the wrong size (the gate stops it anyway) is its own near copy group."""
    import numpy as np
    import tensorflow as tf

    spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
    files = tf.io.gfile.glob(f"{split_uri}/*")
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH)
    found = Hashes([], [])
    size = int(np.prod(IMAGE_SHAPE))
    for batch in records.map(lambda b: tf.io.parse_example(b, spec)):
        images = list(batch[IMAGE_KEY].numpy())
        exact = [image_digest(image) for image in images]
        near = list(exact)
        fit = [i for i, image in enumerate(images) if len(image) == size]
        if fit:
            pixels = np.frombuffer(b"".join(images[i] for i in fit), np.uint8)
            for i, digest in zip(fit, near_copies.hashes(pixels.reshape(-1, *IMAGE_SHAPE))):
                near[i] = digest
        found.exact.extend(exact)
        found.near.extend(near)
    return found


def duplicates(train: Hashes, evals: Hashes, dropped: dict | None = None) -> dict:
    """Copies among a run's images: `copies`, images beyond the first of each set of
    identical ones (across both splits); `near_copies`, the further images beyond the first
    of each set with one difference hash; `eval_in_train`, eval images with an exact copy in
    train. `dropped`: what the ExampleGen dropped from eval (EVAL_DROPPED_FILE), kept as
    `eval_dropped`; its copies of train images count among the run's images and copies."""
    every = train.exact + evals.exact
    near = train.near + evals.near
    seen = set(train.exact)
    copied = dropped["copies_of_train"] if dropped else 0
    exact = len(every) - len(set(every))
    found = {
        "images": len(every) + copied,
        "copies": exact + copied,
        "near_copies": max(0, len(near) - len(set(near)) - exact),
        "eval_in_train": sum(1 for digest in evals.exact if digest in seen),
    }
    return found | ({"eval_dropped": dropped} if dropped else {})
