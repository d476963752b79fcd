"""CIFAR-10 TFX pipeline: one topology (`topology.create_pipeline`) and the targets that run it.

`settings/` and `common/` at the bottom, then `topology` and `kfp_ir` (the KFP v2 compile both
cloud targets share), then one subpackage per target (`local/`, `vertex/`, `kubeflow/`,
`kfp_local/`), each independent of the others, and `cli/` on top (pyproject.toml's contracts).

Importing `components` first selects Keras 2 (`tf_keras`) for this process, before
anything imports TensorFlow (see components/__init__.py).
"""

import components  # noqa: F401
