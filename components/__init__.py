"""Custom TFX components and the Trainer module of the CIFAR-10 pipeline.

The one place that chooses the Keras flavour: TFX, TFT and TFMA 1.16 are built on
Keras 2 (`tf_keras`), while TF 2.16's default `tf.keras` is Keras 3. Every process
of the pipeline (the CLI, LocalDagRunner, a component's container on Vertex or
Kubeflow, a Dataflow worker) imports this package before TensorFlow, so setting
TF_USE_LEGACY_KERAS here makes `tf.keras` and `tf_keras` one library everywhere.
`components.trainer.keras` checks that it took effect.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
