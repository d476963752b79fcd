"""Class probabilities (and embeddings) of images by an exported SavedModel, batched: the
served model scoring a new span (DataValidationGate) and both models scoring the served
reference images (Evaluator)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from components.contract import (
    EMBEDDINGS_KEY,
    EXAMPLES_SIGNATURE,
    LOGITS_KEY,
    NUM_CLASSES,
    PROBABILITIES_KEY,
)

BATCH = 512


def score_batch(
    loaded, images: np.ndarray, serialized: np.ndarray | None = None, name: str = "the model"
) -> tuple[np.ndarray, np.ndarray | None]:
    """(class probabilities, penultimate-layer embeddings) of one batch by a loaded
    SavedModel, in one pass: its one-view `features` function; for a model exported without
    it, its `logits` function or its tf.Example signature on `serialized`, and no
    embeddings."""
    features_fn = getattr(loaded, "features", None)
    if features_fn is not None:
        found = features_fn(tf.constant(images))
        probabilities = tf.nn.softmax(tf.cast(found[LOGITS_KEY], tf.float32)).numpy()
        return probabilities, tf.cast(found[EMBEDDINGS_KEY], tf.float32).numpy()
    logits_fn = getattr(loaded, "logits", None)
    if logits_fn is not None:
        return tf.nn.softmax(tf.cast(logits_fn(tf.constant(images)), tf.float32)).numpy(), None
    if serialized is None:
        raise ValueError(f"{name}: the model has no `logits` function to score images with")
    signature = loaded.signatures[EXAMPLES_SIGNATURE]
    return signature(examples=tf.constant(list(serialized)))[PROBABILITIES_KEY].numpy(), None


def scores(
    model_dir: str, images: np.ndarray, serialized: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """`score_batch` over `images` in batches of BATCH, by the SavedModel in `model_dir`."""
    loaded = tf.saved_model.load(model_dir)
    probabilities, embeddings = [np.zeros((0, NUM_CLASSES), np.float32)], []
    for start in range(0, len(images), BATCH):
        part = None if serialized is None else serialized[start : start + BATCH]
        found, embedded = score_batch(loaded, images[start : start + BATCH], part, model_dir)
        probabilities.append(found)
        embeddings.append(embedded)
    found = np.concatenate(probabilities).astype(np.float32)
    if getattr(loaded, "features", None) is None:
        return found, None
    return found, np.concatenate(embeddings) if embeddings else np.zeros((0, 0), np.float32)


def probabilities(
    model_dir: str, images: np.ndarray, serialized: np.ndarray | None = None
) -> np.ndarray:
    """The class probabilities of `scores`."""
    return scores(model_dir, images, serialized)[0]
