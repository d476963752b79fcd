"""The records of a finished run's Examples artifact, decoded the way the Trainer decodes
them: the report shows samples and mistakes from them, `predict --samples` classifies them."""

from __future__ import annotations

import os

import numpy as np

from components.contract import IMAGE_SHAPE
from components.storage.tfx_files import split_uri


def read_split(
    examples_uri: str, split: str, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
    """The first `limit` records of a split (all of them without a limit), in file order."""
    import tensorflow as tf

    from components.trainer import data

    files = sorted(tf.io.gfile.glob(os.path.join(split_uri(examples_uri, split), "*")))
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if limit is not None:
        records = records.take(limit)
    serialized = [r.numpy() for r in records]
    if not serialized:
        return np.zeros((0, *IMAGE_SHAPE), np.uint8), np.zeros(0, np.int64), []
    images, labels = data.decode_examples(tf.constant(serialized))
    return images.numpy(), labels.numpy(), serialized


def read_by_id(examples_uri: str, split: str, record_ids: list[str]) -> dict[str, np.ndarray]:
    """record id -> image of the records named that the split holds, in one batched pass."""
    import tensorflow as tf

    from components.contract import IMAGE_KEY, RECORD_ID_KEY

    wanted = {record_id.encode() for record_id in record_ids}
    spec = {
        IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        RECORD_ID_KEY: tf.io.FixedLenFeature([], tf.string),
    }
    files = sorted(tf.io.gfile.glob(os.path.join(split_uri(examples_uri, split), "*")))
    found: dict[str, np.ndarray] = {}
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096)
    for batch in records.map(lambda b: tf.io.parse_example(b, spec)) if wanted else []:
        for record_id, image in zip(batch[RECORD_ID_KEY].numpy(), batch[IMAGE_KEY].numpy()):
            if record_id in wanted:
                found[record_id.decode()] = np.frombuffer(image, np.uint8).reshape(IMAGE_SHAPE)
    return found
