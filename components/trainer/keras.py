"""The one place that picks the Keras flavour.

TFX, TFT and TFMA 1.16 are built on Keras 2 (`tf_keras`); TF 2.16's default
`tf.keras` is Keras 3. Setting TF_USE_LEGACY_KERAS before TensorFlow is imported
makes `tf.keras` and `tf_keras` the same library everywhere in the process.
Import `keras` and `tf` from here, never `tensorflow.keras` directly.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

__all__ = ["keras", "tf"]
