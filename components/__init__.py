"""Custom TFX components and the Trainer module of the CIFAR-10 pipeline.

Component executors run in their own processes on Vertex; importing this package
selects Keras 2 (`tf_keras`) there too, before TensorFlow is imported.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
