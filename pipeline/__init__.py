"""CIFAR-10 TFX pipeline: topology, configuration, runners and CLI.

TFX, TFT and TFMA 1.16 are built on Keras 2: every process that imports this
package uses `tf_keras` as `tf.keras` (set before TensorFlow is imported).
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
