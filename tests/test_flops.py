"""The FLOP count matches the arithmetic of the layers it is made of."""

from components.trainer import flops, model
from components.trainer.keras import keras, tf


def _conv_net(width: int) -> keras.Model:
    inputs = keras.Input(shape=(8, 8, 3), dtype=tf.uint8)
    x = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32))(inputs)
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(10, use_bias=False)(x))


def test_conv_and_dense_count_two_flops_per_multiply_add():
    width = 4
    conv = 2 * 8 * 8 * 3 * 3 * 3 * width  # output pixels x kernel x in x out channels
    dense = 2 * 8 * 8 * width * 10
    assert flops.forward_flops_per_image(_conv_net(width)) == conv + dense


def test_training_is_three_forward_passes_per_image():
    assert flops.training_flops(40_000_000, 45_000) == 3 * 40_000_000 * 45_000


def test_default_model_costs_tens_of_megaflops_per_image():
    forward = flops.forward_flops_per_image(model.build(model.RECIPES["airbench"]))
    assert 20e6 < forward < 80e6  # widths 32/64/128 at 32x32: about 40 MFLOP
