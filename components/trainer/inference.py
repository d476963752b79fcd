"""The trained airbench network rewritten for inference, with every affine step folded into
the convolution before it.

At inference BatchNorm is a fixed per-channel affine map, (x - mean) / sqrt(var + eps),
followed here by the scaled bias; the input normalisation is one too, and the head's
fixed temperature a scale. Each goes into the weights of the convolution (or head) next
to it:

- the input normalisation into the whitening stem (a "valid" convolution, so no padding
  sees the unnormalised zero);
- each BatchNorm and its bias into the convolution before it. The first BatchNorm of a
  block follows the max-pool, and a per-channel affine map with a positive scale commutes
  with a max, so it moves before the pool into the convolution's weights and bias;
- the 1/9 temperature into the head.

The result computes the same function up to float rounding, with about 8-19% less time
per view (6 views per record for `flip_translate`); see docs/performance.md. Only
networks built by `model.build_airbench` are rewritten; any other network is served as
it is.
"""

from __future__ import annotations

import numpy as np

from components.contract import IMAGE_SHAPE, NUM_CLASSES
from components.trainer import model
from components.trainer.keras import keras, tf

# The temperature `model.build_airbench` divides the head's output by.
_LOGIT_SCALE = 1.0 / 9.0


def _is_airbench(network: keras.Model) -> bool:
    if not isinstance(network, keras.Model) or network.name != "airbench":
        return False
    names = {layer.name for layer in network.layers}
    return {"whiten", "head", "block0_conv1", "block0_conv1_norm"} <= names


def _convolutions(network: keras.Model) -> list[str]:
    """The block convolutions' names in network order: block0_conv1, block0_conv2, ..."""
    names, layers = [], {layer.name for layer in network.layers}
    while f"block{len(names) // 2}_conv1" in layers:
        names.extend(f"block{len(names) // 2}_conv{conv}" for conv in (1, 2))
    return names


def _folded_stem(network: keras.Model) -> tuple[np.ndarray, np.ndarray]:
    """Stem weights that take uint8 pixels: conv(W, (x - m) / s) + b = conv(W / s, x) + b'."""
    kernel, bias = (np.asarray(w, np.float64) for w in network.get_layer("whiten").get_weights())
    mean = np.asarray(model.CIFAR10_MEAN, np.float64)
    std = np.asarray(model.CIFAR10_STD, np.float64)
    folded_kernel = kernel / std[None, None, :, None]
    folded_bias = bias - np.einsum("hwco,c->o", kernel, mean / std)
    return folded_kernel.astype(np.float32), folded_bias.astype(np.float32)


def _folded_convolution(network: keras.Model, name: str) -> tuple[np.ndarray, np.ndarray]:
    """conv(W, x) -> BatchNorm -> + scale * bias as one convolution with a bias."""
    (kernel,) = network.get_layer(name).get_weights()
    norm = network.get_layer(f"{name}_norm")
    shift = network.get_layer(f"{name}_bias")
    mean = np.asarray(norm.moving_mean.numpy(), np.float64)
    variance = np.asarray(norm.moving_variance.numpy(), np.float64)
    scale = 1.0 / np.sqrt(variance + norm.epsilon)  # > 0: commutes with the max-pool
    bias = shift.scale * np.asarray(shift.bias.numpy(), np.float64) - mean * scale
    folded_kernel = np.asarray(kernel, np.float64) * scale[None, None, None, :]
    return folded_kernel.astype(np.float32), bias.astype(np.float32)


def folded(network: keras.Model) -> keras.Model:
    """`network` (a float32 airbench) for inference: uint8 images -> the same logits, with
    normalisation, BatchNorm, biases and temperature folded into the weights. Any other
    network comes back unchanged. Every layer is float32 whatever the global policy."""
    if not _is_airbench(network):
        return network
    weights = {}  # layer -> its folded weights, set once the model is built

    def layer(kind, name: str, folded_weights, **options):
        new = kind(dtype="float32", name=name, **options)
        weights[new] = folded_weights
        return new

    inputs = keras.Input(shape=IMAGE_SHAPE, dtype=tf.uint8, name="image")
    x = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32), dtype="float32", name="pixels")(
        inputs
    )
    kernel, bias = _folded_stem(network)
    x = layer(
        keras.layers.Conv2D,
        "whiten",
        [kernel, bias],
        filters=kernel.shape[-1],
        kernel_size=2,
        padding="valid",
    )(x)
    x = model.Gelu(dtype="float32")(x)
    for name in _convolutions(network):
        kernel, bias = _folded_convolution(network, name)
        x = layer(
            keras.layers.Conv2D,
            name,
            [kernel, bias],
            filters=kernel.shape[-1],
            kernel_size=3,
            padding="same",
        )(x)
        if name.endswith("conv1"):
            x = keras.layers.MaxPooling2D(2, dtype="float32")(x)
        x = model.Gelu(dtype="float32")(x)
    x = keras.layers.GlobalMaxPooling2D(dtype="float32")(x)
    (head,) = network.get_layer("head").get_weights()
    head = np.asarray(head, np.float32) * np.float32(_LOGIT_SCALE)
    logits = layer(keras.layers.Dense, "head", [head], units=NUM_CLASSES, use_bias=False)(x)
    inference = keras.Model(inputs, logits, name="airbench_inference")
    for built, values in weights.items():
        built.set_weights(values)
    return inference
