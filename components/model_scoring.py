"""Class probabilities of images by an exported SavedModel, batched: the served model scoring a
new span (DataValidationGate) and both models scoring the served reference images (Evaluator)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from components.contract import EXAMPLES_SIGNATURE, NUM_CLASSES, PROBABILITIES_KEY

BATCH = 512


def probabilities(
    model_dir: str, images: np.ndarray, serialized: np.ndarray | None = None
) -> np.ndarray:
    """Class probabilities by the SavedModel in `model_dir`: its one-view `logits` function,
    or, for a model exported without it, its tf.Example signature on `serialized`."""
    loaded = tf.saved_model.load(model_dir)
    logits_fn = getattr(loaded, "logits", None)
    if logits_fn is None and serialized is None:
        raise ValueError(f"{model_dir}: the model has no `logits` function to score images with")
    out = []
    for start in range(0, len(images), BATCH):
        if logits_fn is not None:
            logits = logits_fn(tf.constant(images[start : start + BATCH]))
            out.append(tf.nn.softmax(tf.cast(logits, tf.float32)).numpy())
        else:
            batch = tf.constant(list(serialized[start : start + BATCH]))
            signature = loaded.signatures[EXAMPLES_SIGNATURE]
            out.append(signature(examples=batch)[PROBABILITIES_KEY].numpy())
    return np.concatenate(out) if out else np.zeros((0, NUM_CLASSES), np.float32)
