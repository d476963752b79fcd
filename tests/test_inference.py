"""The network the export serves: airbench with normalisation, BatchNorm, biases and the
head's temperature folded into its weights must compute the trained network's logits."""

import numpy as np
import pytest
from test_recipe import _PassSizeLimited

from components.trainer import export, inference, model
from components.trainer.keras import keras, tf


def _trained_looking_airbench(seed: int) -> keras.Model:
    """An airbench whose BatchNorm statistics and biases are far from their initial values
    (a fresh network's are 0 and 1, which would hide a wrong fold). Keras is seeded too: the
    head's initial weights came from the process's random state, so a test's network was
    another in every process (and its margins with it)."""
    keras.utils.set_random_seed(seed)
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


def _sensitive_airbench(seed: int) -> keras.Model:
    """A trained-looking airbench whose convolutions mix neighbouring pixels (a fresh one's
    Dirac filters look at the centre tap only), so every view's probabilities differ; its
    head scaled to logits of about one unit, far from a saturated softmax."""
    network = _trained_looking_airbench(seed)
    rng = np.random.default_rng(seed + 100)
    for layer in network.layers:
        if layer.name.startswith("block") and isinstance(layer, keras.layers.Conv2D):
            (kernel,) = layer.get_weights()
            layer.set_weights([kernel + rng.normal(0.0, 0.3, kernel.shape).astype(np.float32)])
    head = network.get_layer("head")
    head.set_weights([head.get_weights()[0] * 0.02])
    return network


def test_the_two_halves_compose_to_the_folded_network():
    folded = inference.folded(_trained_looking_airbench(6))
    stem, rest = inference.split(folded)
    images = _images(7, 16)
    pooled = keras.layers.MaxPooling2D(2)(stem(images))
    np.testing.assert_allclose(rest(pooled).numpy(), folded(images).numpy(), rtol=1e-5, atol=1e-6)
    assert inference.split(model.build_seed_cnn()) is None


def test_shared_views_differ_from_separate_views_only_along_their_edge():
    """Each view's first feature map, cut from the map of the padded image, is the view's own
    map inside; only its outermost ring (where the view's own convolution pads with zeros)
    differs."""
    stem, _ = inference.split(inference.folded(_sensitive_airbench(8)))
    images = _images(9, 4)
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    shared = stem(padded).numpy()
    assert shared.shape[1:3] == (33, 33)
    for row, column in ((0, 0), (1, 1), (2, 2), (0, 2)):
        view = np.ascontiguousarray(padded[:, row : row + 32, column : column + 32])
        own, cut = stem(view).numpy(), shared[:, row : row + 31, column : column + 31]
        np.testing.assert_allclose(cut[:, 1:-1, 1:-1], own[:, 1:-1, 1:-1], rtol=1e-5, atol=1e-5)
        ring = np.abs(cut - own).max(axis=(0, 3))
        ring[1:-1, 1:-1] = 0
        # Where the padded image goes on past the view, its edge sees those pixels, not zeros.
        assert ring.max() > 1e-3


def test_shared_views_average_the_six_views_of_flip_translate():
    """flip_translate_shared, view by view: the 31 x 31 window of the padded image's (or its
    mirror image's) first feature map at each view's offset, pooled, through the rest of the
    network; the centre pair at 1/4 each, the four shifted views at 1/8."""
    network = _sensitive_airbench(10)
    module = export.ServingModule(network, "flip_translate_shared")
    stem, rest = inference.split(module.network)
    images = _images(11, 5)
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    maps = {False: stem(padded).numpy(), True: stem(padded[:, :, ::-1]).numpy()}

    def view(row: int, column: int, mirrored: bool) -> np.ndarray:
        window = maps[mirrored][:, row : row + 31, column : column + 31]
        logits = rest(keras.layers.MaxPooling2D(2)(window)).numpy().astype(np.float64)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    # The up-left view of the mirror image is the mirrored up-left view: offset (0, 2).
    centre = view(1, 1, False) + view(1, 1, True)
    shifted = view(0, 0, False) + view(0, 2, True) + view(2, 2, False) + view(2, 0, True)
    expected = centre / 4 + shifted / 8
    probabilities = module.probabilities(tf.constant(images)).numpy()
    np.testing.assert_allclose(probabilities, expected, rtol=1e-4, atol=1e-6)
    # Not the mirror average alone, and close to the separate views' average.
    flip_only = export.ServingModule(network, "flip").probabilities(tf.constant(images))
    assert np.abs(probabilities - flip_only).max() > 1e-3
    separate = export.ServingModule(network, "flip_translate").probabilities(tf.constant(images))
    assert np.abs(probabilities - separate).max() < np.abs(separate - flip_only).max()


def test_shared_views_run_a_few_records_at_a_time(monkeypatch):
    """At most VIEWS_PER_PASS views through the network's rest at once (and a sixth as
    many records, twice that many padded images, through its stem), eagerly and traced."""
    network = _sensitive_airbench(12)
    images = tf.constant(_images(13, 7))
    whole = export.ServingModule(network, "flip_translate_shared").probabilities(images)
    monkeypatch.setattr(export, "VIEWS_PER_PASS", 12)  # 2 records a pass: 3 of 2 and 1 of 1
    module = export.ServingModule(network, "flip_translate_shared")
    stem, rest = module.halves
    module.halves = (_PassSizeLimited(stem, 4), _PassSizeLimited(rest, 12))
    np.testing.assert_allclose(module.probabilities(images), whole, rtol=1e-5, atol=1e-7)
    traced = tf.function(module.probabilities)
    np.testing.assert_allclose(traced(images), whole, rtol=1e-5, atol=1e-7)
    assert traced(images[:0]).shape == (0, 10)


def test_shared_views_need_an_airbench_network():
    with pytest.raises(ValueError, match="needs an airbench network"):
        export.ServingModule(model.build_seed_cnn(), "flip_translate_shared")
