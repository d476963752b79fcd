"""The network the export serves: airbench with normalisation, BatchNorm, biases and the
head's temperature folded into its weights must compute the trained network's logits."""

import numpy as np
import pytest

from components.trainer import export, inference, model
from components.trainer.keras import keras, tf


def _trained_looking_airbench(seed: int) -> keras.Model:
    """An airbench whose BatchNorm statistics and biases are far from their initial values
    (a fresh network's are 0 and 1, which would hide a wrong fold)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (300, 32, 32, 3), dtype=np.uint8)
    network = model.build_airbench((8, 16, 16), model.whitening_filters(images))
    for layer in network.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            size = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(0.0, 2.0, size))
            layer.moving_variance.assign(rng.uniform(0.2, 5.0, size))
        elif isinstance(layer, model.ScaledBias):
            layer.bias.assign(rng.normal(0.0, 0.2, layer.bias.shape[0]))
    return network


def _images(seed: int, count: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)


def test_the_folded_network_computes_the_trained_logits():
    network = _trained_looking_airbench(0)
    folded = inference.folded(network)
    images = _images(1)
    expected = network(images, training=False).numpy()
    logits = folded(images).numpy()
    assert np.abs(expected).max() > 0.05  # not a degenerate network
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(logits.argmax(axis=1), expected.argmax(axis=1))
    kinds = {type(layer) for layer in folded.layers}
    assert keras.layers.BatchNormalization not in kinds and model.ScaledBias not in kinds
    # 7 convolutions with a bias each and the head: no moving statistics left.
    assert len(folded.variables) == 2 * 7 + 1


def test_the_folded_network_is_float32_under_a_mixed_precision_policy():
    network = _trained_looking_airbench(2)
    images = _images(3)
    expected = network(images, training=False).numpy()
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        folded = inference.folded(network)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert {v.dtype for v in folded.variables} == {tf.float32}
    # bf16 compute would be off by about 1e-2; float32 is within rounding.
    np.testing.assert_allclose(folded(images).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_other_networks_are_served_as_they_are():
    network = model.build_seed_cnn()
    assert inference.folded(network) is network


@pytest.mark.parametrize("views", export.TEST_TIME_AUGMENTATIONS)
def test_the_serving_module_averages_views_of_the_folded_network(views):
    """The exported probabilities are the views of the trained network, folded or not; the
    trained network's own variables stay in the module for a warm start."""
    network = _trained_looking_airbench(4)
    images = tf.constant(_images(5, 8))
    module = export.ServingModule(network, views)
    assert module.network is not network
    unfolded = export.ServingModule(network, views)
    unfolded.network = network  # the same module over the trained network itself
    np.testing.assert_allclose(
        module.probabilities(images), unfolded.probabilities(images), rtol=1e-4, atol=1e-6
    )
    assert [v.name for v in module.network_variables] == [v.name for v in network.variables]
