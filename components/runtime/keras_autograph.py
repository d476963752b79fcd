"""Keeps TensorFlow's AutoGraph out of Keras' own source code.

TF 2.16's AutoGraph leaves the `keras` package alone but not `tf_keras`, so every
`tf.function` over Keras code rewrote Keras itself: 15.5 s to trace one training step
of the default model on a 2-core CPU, against 0.9 s with `tf_keras` excluded as well
(later TensorFlow releases exclude it too), and about 6 s of the Evaluator converting
the accuracy metric's `update_state` once per slice. Code written in this project is
still converted.
"""

from tensorflow.python.autograph.core import config as _autograph_config

_RULE = _autograph_config.DoNotConvert("tf_keras")


def leave_tf_keras_unconverted() -> None:
    """Adds the rule once per process; the Trainer and the Evaluator call it."""
    if _RULE not in _autograph_config.CONVERSION_RULES:
        _autograph_config.CONVERSION_RULES = (*_autograph_config.CONVERSION_RULES, _RULE)
