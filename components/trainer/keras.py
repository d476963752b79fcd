"""The one import point for Keras in the trainer: `from components.trainer.keras import keras, tf`.

TFX, TFT and TFMA 1.16 are built on Keras 2 (`tf_keras`); TF 2.16's default
`tf.keras` is Keras 3. The `components` package sets TF_USE_LEGACY_KERAS=1 when it
is imported (always before this module), so `tf.keras` and `tf_keras` are the same
library everywhere in the process. Never import `tensorflow.keras` directly.
"""

import tensorflow as tf
import tf_keras as keras

__all__ = ["keras", "tf"]
