"""The model's GELU: the same function and gradient as TensorFlow's exact GELU, fused by
XLA in training only, so nothing that serves the model needs XLA."""

import numpy as np
import pytest

from components.trainer.keras import keras, tf
from components.trainer.model import Gelu

POINTS = tf.constant(np.linspace(-6.0, 6.0, 4001), tf.float32)


def _value_and_gradient(fn, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y, tape.gradient(y, x, output_gradients=tf.ones_like(y) * 1.5)


@pytest.mark.parametrize(
    "policy, dtype, tolerance",
    [("float32", tf.float32, 1e-6), ("mixed_bfloat16", tf.bfloat16, 1e-2)],
)
def test_training_path_matches_tensorflows_exact_gelu(policy, dtype, tolerance):
    layer = Gelu(dtype=keras.mixed_precision.Policy(policy))
    x = tf.cast(POINTS, dtype)
    fused, fused_gradient = _value_and_gradient(lambda t: layer(t, training=True), x)
    # the reference in float32 on the same (rounded) inputs, rounded to the dtype once, as
    # the fused path rounds
    reference, reference_gradient = _value_and_gradient(
        lambda t: tf.nn.gelu(t, approximate=False), tf.cast(x, tf.float32)
    )
    assert fused.dtype == dtype and fused_gradient.dtype == dtype
    np.testing.assert_allclose(
        tf.cast(fused, tf.float32),
        tf.cast(tf.cast(reference, dtype), tf.float32),
        atol=tolerance,
        rtol=tolerance,
    )
    np.testing.assert_allclose(
        tf.cast(fused_gradient, tf.float32),
        tf.cast(tf.cast(reference_gradient, dtype), tf.float32),
        atol=tolerance * 4,
        rtol=tolerance,
    )


def _graph_ops(training: bool) -> set[str]:
    traced = tf.function(lambda t: Gelu()(t, training=training)).get_concrete_function(
        tf.TensorSpec([None, 4], tf.float32)
    )
    graph = traced.graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    compiled = {
        n.name
        for f in graph.library.function
        if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b
        for n in f.node_def
    }
    return {n.op for n in nodes} | ({"<xla>"} if compiled else set())


def test_only_training_compiles_with_xla():
    assert "<xla>" in _graph_ops(training=True)
    assert "<xla>" not in _graph_ops(training=False)
    # TensorFlow's own gelu: Erf (TF 2.16) or Erfc (TF 2.21)
    assert {"Erf", "Erfc"} & _graph_ops(training=False)
