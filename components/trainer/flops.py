"""How much arithmetic training costs: the model's own FLOP count, from TensorFlow's
graph profiler, so that figures compare across models, batch sizes and machines.

Counted as the profiler counts: one multiply-add is 2 FLOPs; convolutions and matrix
products dominate, element-wise ops with a registered count (bias adds, batch norm
arithmetic) are included, ops without one (activations' transcendental functions,
pooling, data movement) are not. Training is taken as 3x the forward pass: the
backward pass computes gradients with respect to both the activations and the
weights, each about one forward pass of multiply-adds.
"""

from __future__ import annotations

from components.trainer.keras import keras, tf

TRAINING_TO_FORWARD = 3


def forward_flops_per_image(network: keras.Model) -> int:
    """FLOPs of one inference of `network` on one image (batch of 1, float32 weights)."""
    spec = tf.TensorSpec([1, *network.input_shape[1:]], network.inputs[0].dtype)
    graph = (
        tf.function(lambda images: network(images, training=False))
        .get_concrete_function(spec)
        .graph
    )
    options = (
        tf.compat.v1.profiler.ProfileOptionBuilder(
            tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        )
        .with_empty_output()
        .build()
    )
    return int(tf.compat.v1.profiler.profile(graph, options=options).total_float_ops)


def training_flops(forward_per_image: int, images_seen: int) -> int:
    """Forward plus backward FLOPs of training on `images_seen` images."""
    return TRAINING_TO_FORWARD * forward_per_image * images_seen
