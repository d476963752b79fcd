"""The records of a finished run's Examples artifact, decoded the way the Trainer decodes
them: the report shows samples and mistakes from them, `predict --samples` classifies them."""

from __future__ import annotations

import os

import numpy as np

from components.contract import IMAGE_SHAPE
from components.tfx_files import split_uri


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
