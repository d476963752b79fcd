"""The one import point for Keras in the trainer: `from components.trainer.keras import keras, tf`.

TFX, TFT and TFMA 1.16 are built on Keras 2 (`tf_keras`); TF 2.16's default
`tf.keras` is Keras 3. The `components` package sets TF_USE_LEGACY_KERAS=1 when it
is imported (always before this module); importing this module fails loudly if
TensorFlow was loaded before that and `tf.keras` is Keras 3 after all. Never import
`tensorflow.keras` directly.

TF 2.16's AutoGraph leaves the `keras` package alone but not `tf_keras`, so every
`tf.function` over a Keras model rewrote Keras' own source: 15.5 s to trace one
training step of the default model on this 2-core CPU, against 0.9 s once
`tf_keras` is excluded as well (later TensorFlow releases exclude it too).
Layer `call` methods written in this project are still converted.
"""

import tensorflow as tf
import tf_keras as keras
from tensorflow.python.autograph.core import config as _autograph_config

if tf.keras.Model is not keras.Model:
    raise ImportError(
        "tf.keras is Keras 3, but this pipeline needs Keras 2 (tf_keras): TensorFlow was "
        "imported before the `components` package set TF_USE_LEGACY_KERAS=1; import "
        "`components` (or `pipeline`) first, or set TF_USE_LEGACY_KERAS=1 in the environment"
    )

_autograph_config.CONVERSION_RULES = (
    *_autograph_config.CONVERSION_RULES,
    _autograph_config.DoNotConvert("tf_keras"),
)

__all__ = ["keras", "tf"]
