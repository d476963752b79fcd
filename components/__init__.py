"""Custom TFX components and the Trainer module of the CIFAR-10 pipeline.

The one place that chooses the Keras flavour: TFX, TFT and TFMA 1.16 are built on
Keras 2 (`tf_keras`), while TF 2.16's default `tf.keras` is Keras 3. Every process
of the pipeline (the CLI, LocalDagRunner, a component's container on Vertex or
Kubeflow, a Dataflow worker) imports this package before TensorFlow, so setting
TF_USE_LEGACY_KERAS here makes `tf.keras` and `tf_keras` one library everywhere.
`components.trainer.keras` checks that it took effect.

It is also where TensorFlow's oneDNN CPU kernels are switched on. TF 2.16 enables them
by default only on CPUs with AVX-512 VNNI/BF16 or AMX; on an AVX2-only CPU (AMD Zen 3,
most laptops) it falls back to Eigen, and the default model trained at 480 images/s
there against 613-687 with oneDNN (`benchmarks.throughput`, float32, batch 512). A
value the user set (0 to compare) wins.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
