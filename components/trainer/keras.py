"""The one import point for Keras in the trainer: `from components.trainer.keras import keras, tf`.

TFX, TFT and TFMA 1.16 are built on Keras 2 (`tf_keras`); TF 2.16's default
`tf.keras` is Keras 3. The `components` package sets TF_USE_LEGACY_KERAS=1 when it
is imported (always before this module); importing this module fails loudly if
TensorFlow was loaded before that and `tf.keras` is Keras 3 after all. Never import
`tensorflow.keras` directly.

Importing it also keeps AutoGraph out of `tf_keras` (components.runtime.keras_autograph).
"""

import tensorflow as tf
import tf_keras as keras

from components.runtime.keras_autograph import leave_tf_keras_unconverted

if tf.keras.Model is not keras.Model:
    raise ImportError(
        "tf.keras is Keras 3, but this pipeline needs Keras 2 (tf_keras): TensorFlow was "
        "imported before the `components` package set TF_USE_LEGACY_KERAS=1; import "
        "`components` (or `pipeline`) first, or set TF_USE_LEGACY_KERAS=1 in the environment"
    )

leave_tf_keras_unconverted()

__all__ = ["keras", "tf"]
