"""CIFAR-10 TFX pipeline: topology, configuration, runners and CLI.

Importing `components` first selects Keras 2 (`tf_keras`) for this process, before
anything imports TensorFlow (see components/__init__.py).
"""

import components  # noqa: F401
