"""Network definitions and their training recipes.

`airbench` is the default: a small three-block conv net in the style of the
fastest public CIFAR-10 recipes (airbench, ResNet-9 "how to train your ResNet"):
a frozen patch-whitening stem, batch norm, GELU, max-pool, label smoothing and a
one-cycle Nesterov SGD schedule. `seed_cnn` is the classic Colab TPU recipe,
kept for side-by-side comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from components.contract import IMAGE_SHAPE, NUM_CLASSES
from components.trainer.keras import keras, tf

# Per-channel statistics of the CIFAR-10 training set, on the 0..255 scale.
CIFAR10_MEAN = (125.3, 123.0, 113.9)
CIFAR10_STD = (63.0, 62.1, 66.7)


@dataclass(frozen=True)
class Recipe:
    """Defaults that belong to one architecture; the CLI can override the first three."""

    epochs: int
    per_replica_batch_size: int  # on CPU/GPU; TPU always defaults to 128 per core
    learning_rate: float  # at a global batch of `reference_batch_size`
    reference_batch_size: int
    optimizer: str  # "sgd_one_cycle" or "adam"
    label_smoothing: float
    weight_decay: float


def _normalize(images: tf.Tensor) -> tf.Tensor:
    images = tf.cast(images, tf.float32)
    return (images - tf.constant(CIFAR10_MEAN)) / tf.constant(CIFAR10_STD)


def whitening_filters(images: np.ndarray, patch: int = 2, eps: float = 5e-4) -> np.ndarray:
    """Conv filters that whiten `patch`x`patch` pixel patches (ZCA-like, as in airbench).

    Returns [patch, patch, 3, 2 * patch * patch * 3]: each eigenvector scaled by
    1/sqrt(eigenvalue), and its negation, so a following GELU sees both signs.
    """
    x = (images.astype(np.float32) - np.array(CIFAR10_MEAN, np.float32)) / np.array(
        CIFAR10_STD, np.float32
    )
    h, w = x.shape[1:3]
    patches = np.stack(
        [
            x[:, i : h - patch + 1 + i, j : w - patch + 1 + j, :]
            for i in range(patch)
            for j in range(patch)
        ],
        axis=3,
    )
    # patches: [N, H', W', patch*patch, 3] -> rows of patch*patch*3 values in (i, j, c) order.
    patches = patches.reshape(-1, patch * patch * 3).astype(np.float64)
    cov = np.cov(patches, rowvar=False)
    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    filters = eigenvectors / np.sqrt(eigenvalues + eps)
    filters = filters.T.reshape(-1, patch, patch, 3)  # one filter per eigenvector
    filters = np.concatenate([filters, -filters], axis=0)
    return np.transpose(filters, (1, 2, 3, 0)).astype(np.float32)


def build_airbench(
    widths: tuple[int, int, int] = (32, 64, 128), whitening: np.ndarray | None = None
) -> keras.Model:
    """Frozen 2x2 whitening conv, then three conv-pool-conv blocks, then max-pool and a
    scaled linear head. Returns logits."""
    inputs = keras.Input(shape=IMAGE_SHAPE, dtype=tf.uint8, name="image")
    x = keras.layers.Lambda(_normalize, name="normalize")(inputs)
    stem_width = 24 if whitening is None else whitening.shape[-1]
    stem = keras.layers.Conv2D(
        stem_width, 2, padding="valid", use_bias=True, name="whiten", trainable=whitening is None
    )
    x = stem(x)
    if whitening is not None:
        stem.set_weights([whitening, np.zeros(stem_width, np.float32)])
    x = keras.layers.Activation("gelu")(x)
    for index, width in enumerate(widths):
        x = keras.layers.Conv2D(
            width, 3, padding="same", use_bias=False, name=f"block{index}_conv1"
        )(x)
        x = keras.layers.MaxPooling2D(2)(x)
        x = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        x = keras.layers.Activation("gelu")(x)
        x = keras.layers.Conv2D(
            width, 3, padding="same", use_bias=False, name=f"block{index}_conv2"
        )(x)
        x = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)
        x = keras.layers.Activation("gelu")(x)
    x = keras.layers.GlobalMaxPooling2D()(x)
    x = keras.layers.Dense(NUM_CLASSES, use_bias=False, name="head")(x)
    # A fixed temperature, as in airbench: keeps logits small early in training.
    logits = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32) / 9.0, name="logits")(x)
    return keras.Model(inputs, logits, name="airbench")


def build_seed_cnn() -> keras.Model:
    """The classic Colab TPU notebook's network (returns logits; softmax is in the loss)."""
    inputs = keras.Input(shape=IMAGE_SHAPE, dtype=tf.uint8, name="image")
    x = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32) / 255.0, name="rescale")(inputs)
    x = keras.layers.BatchNormalization()(x)
    for width in (32, 64):
        x = keras.layers.Conv2D(width, 3, padding="same", activation="elu")(x)
        x = keras.layers.Conv2D(width, 3, padding="same", activation="elu")(x)
        x = keras.layers.MaxPooling2D(2)(x)
        x = keras.layers.Dropout(0.25)(x)
        if width == 32:
            x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(512, activation="elu")(x)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Dense(NUM_CLASSES)(x)
    logits = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32), name="logits")(x)
    return keras.Model(inputs, logits, name="seed_cnn")


RECIPES: dict[str, Recipe] = {
    # 12 epochs on the 45k/5k split, 2-core CPU: 85.9% TFMA eval accuracy (exported model,
    # with flip averaging), 80% reached at epoch 6; 14 epochs gave 86.2-86.6%.
    "airbench": Recipe(
        epochs=12,
        per_replica_batch_size=512,
        learning_rate=0.4,
        reference_batch_size=512,
        optimizer="sgd_one_cycle",
        label_smoothing=0.2,
        weight_decay=5e-3,
    ),
    "seed_cnn": Recipe(
        epochs=50,
        per_replica_batch_size=1024,
        learning_rate=1e-3,
        reference_batch_size=1024,
        optimizer="adam",
        label_smoothing=0.0,
        weight_decay=0.0,
    ),
}


def one_cycle(
    peak: float, total_steps: int, warmup_fraction: float = 0.2
) -> Callable[[tf.Tensor], tf.Tensor]:
    """Linear warm-up to `peak`, then linear decay to zero (a triangular one-cycle)."""
    warmup = max(1, int(total_steps * warmup_fraction))

    class _Triangle(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            up = peak * step / warmup
            down = peak * tf.maximum(0.0, (total_steps - step) / max(1, total_steps - warmup))
            return tf.where(step < warmup, up, down)

        def get_config(self):
            return {"peak": peak, "total_steps": total_steps, "warmup": warmup}

    return _Triangle()


def scaled_learning_rate(
    recipe: Recipe, global_batch_size: int, override: float | None = None
) -> float:
    """Linear scaling with the global batch (SGD); square-root scaling for Adam."""
    base = recipe.learning_rate if override is None else override
    ratio = global_batch_size / recipe.reference_batch_size
    return base * (math.sqrt(ratio) if recipe.optimizer == "adam" else ratio)


def compile_model(
    model: keras.Model,
    recipe: Recipe,
    learning_rate: float,
    steps_per_epoch: int,
    epochs: int,
    steps_per_execution: int = 1,
) -> None:
    """`steps_per_execution` > 1 runs that many steps per call (fewer TPU round trips)."""
    if recipe.optimizer == "adam":
        optimizer = keras.optimizers.Adam(learning_rate)
    else:
        optimizer = keras.optimizers.SGD(
            one_cycle(learning_rate, steps_per_epoch * epochs),
            momentum=0.9,
            nesterov=True,
            weight_decay=recipe.weight_decay,
        )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if recipe.label_smoothing == 0.0
        else _smoothed_loss(recipe.label_smoothing),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        steps_per_execution=steps_per_execution,
    )


def _smoothed_loss(smoothing: float) -> keras.losses.Loss:
    """Label-smoothed cross-entropy on integer labels (Keras only smooths one-hot labels)."""

    class _Smoothed(keras.losses.Loss):
        def call(self, y_true, y_pred):
            one_hot = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), NUM_CLASSES)
            return keras.losses.categorical_crossentropy(
                one_hot, y_pred, from_logits=True, label_smoothing=smoothing
            )

    return _Smoothed(name="smoothed_crossentropy")


def build(name: str, whitening_images: np.ndarray | None = None) -> keras.Model:
    if name == "airbench":
        return build_airbench(
            whitening=None if whitening_images is None else whitening_filters(whitening_images)
        )
    if name == "seed_cnn":
        return build_seed_cnn()
    raise ValueError(f"unknown model '{name}'; choose one of {', '.join(RECIPES)}")
