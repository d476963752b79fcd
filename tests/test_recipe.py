"""The airbench recipe's parts, each against what it promises: identity filters at
initialisation, a BatchNorm bias that learns 64x faster, the learning-rate shape, the
lookahead average, and test-time augmentation that averages exactly the stated views."""

import numpy as np
import pytest

from components.trainer import export, model
from components.trainer.callbacks import Lookahead
from components.trainer.keras import keras, tf


def test_dirac_init_passes_the_first_channels_through():
    kernel = model.DiracUniform()((3, 3, 4, 6)).numpy()
    for channel in range(4):
        expected = np.zeros((3, 3, 4))
        expected[1, 1, channel] = 1.0
        np.testing.assert_array_equal(kernel[:, :, :, channel], expected)
    bound = 1 / np.sqrt(3 * 3 * 4)
    rest = kernel[:, :, :, 4:]
    assert np.all(np.abs(rest) <= bound) and np.std(rest) > bound / 4  # random, not zero


def test_whitening_filters_whiten_patches_across_chunks():
    """600 images span three accumulation chunks; the result must equal the covariance of
    all patches at once, and the stem must whiten them: unit variance, no correlation."""
    rng = np.random.default_rng(3)
    # Correlated channels and neighbours, as in real images.
    base = rng.normal(120, 40, (600, 33, 33, 1))
    images = np.clip(base[:, 1:, 1:] * [1.0, 0.8, 0.6] + rng.normal(0, 8, (600, 32, 32, 3)), 0, 255)
    images = images.astype(np.uint8)
    filters = model.whitening_filters(images)
    assert filters.shape == (2, 2, 3, 24)
    np.testing.assert_array_equal(filters[..., 12:], -filters[..., :12])

    normalized = (images.astype(np.float64) - model.CIFAR10_MEAN) / model.CIFAR10_STD
    patches = np.stack(
        [normalized[:, i : 31 + i, j : 31 + j] for i in range(2) for j in range(2)], axis=3
    ).reshape(-1, 12)
    whitened = patches @ filters[..., :12].reshape(12, 12)
    covariance = np.cov(whitened, rowvar=False)
    eigenvalues = np.linalg.eigvalsh(np.cov(patches, rowvar=False))
    # Each direction's variance is lambda / (lambda + eps): 1 but for the eps floor.
    np.testing.assert_allclose(
        np.sort(np.diag(covariance)), eigenvalues / (eigenvalues + 5e-4), rtol=1e-6
    )
    off_diagonal = covariance - np.diag(np.diag(covariance))
    assert np.abs(off_diagonal).max() < 1e-6


def test_scaled_bias_learns_scale_squared_faster_and_decays_like_other_weights():
    layer = model.ScaledBias(scale=8.0)
    layer.build((None, 2))
    optimizer = keras.optimizers.SGD(0.01)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(tf.zeros([1, 2])))  # d loss / d effective bias = 1
    optimizer.apply_gradients(zip(tape.gradient(loss, [layer.bias]), [layer.bias]))
    effective = 8.0 * layer.bias.numpy()
    np.testing.assert_allclose(effective, [-0.01 * 64] * 2, rtol=1e-6)


def test_one_cycle_shape():
    schedule = model.one_cycle(2.0, 100, (0.2, 0.25, 0.1))
    values = [float(schedule(step)) for step in (0, 25, 100, 150)]
    np.testing.assert_allclose(values, [0.4, 2.0, 0.2, 0.2], rtol=1e-6)
    assert float(schedule(10)) == pytest.approx(0.4 + (2.0 - 0.4) * 10 / 25)


def test_default_recipe_is_airbench_with_its_parts():
    recipe = model.RECIPES["airbench"]
    network = model.build(
        recipe,
        model.stem_filters(recipe, np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3))),
    )
    names = [layer.name for layer in network.layers]
    assert "block0_conv1_bias" in names and "block2_conv2_norm" in names
    norm = network.get_layer("block0_conv1_norm")
    assert norm.momentum == recipe.batchnorm_momentum and not norm.scale and not norm.center
    assert network.get_layer("block0_conv1_bias").scale == pytest.approx(8.0)
    assert network.get_layer("block1_conv2").filters == recipe.widths[1]


class _Counter:
    """Stands in for the optimizer: Lookahead reads only `iterations`."""

    def __init__(self):
        self.iterations = tf.Variable(0, dtype=tf.int64)


def test_lookahead_pulls_weights_to_their_moving_average():
    network = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    network.optimizer = _Counter()
    callback = Lookahead(total_steps=100, start_fraction=0.5, every=5)
    callback.set_model(network)

    def step_to(step: int, weight: float) -> float:
        network.optimizer.iterations.assign(step)
        network.set_weights([np.array([[weight]], np.float32)])
        callback.on_train_batch_end(step)
        return float(network.get_weights()[0][0, 0])

    assert step_to(10, 3.0) == 3.0  # before the start: untouched
    assert step_to(50, 1.0) == 1.0  # the average starts here
    assert step_to(52, 5.0) == 5.0  # fewer than `every` steps since: untouched
    decay = 0.95**10 * 0.6**3
    assert step_to(60, 5.0) == pytest.approx(decay * 1.0 + (1 - decay) * 5.0)
    average = network.get_weights()[0][0, 0]
    network.set_weights([np.array([[9.0]], np.float32)])
    callback.on_epoch_end(0)
    assert network.get_weights()[0][0, 0] == pytest.approx(average)


def _tiny_network() -> keras.Model:
    """Position-sensitive, so every view gives different probabilities."""
    inputs = keras.Input((32, 32, 3), dtype=tf.uint8)
    x = keras.layers.Lambda(lambda t: tf.cast(t, tf.float32) / 255.0)(inputs)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(
        10, kernel_initializer=keras.initializers.RandomNormal(0, 0.3, seed=0)
    )(x)
    return keras.Model(inputs, outputs)


def test_flip_translate_averages_the_six_views():
    network = _tiny_network()
    images = np.random.default_rng(1).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")

    def mirror_average(views: np.ndarray) -> np.ndarray:
        probabilities = [tf.nn.softmax(network(v)).numpy() for v in (views, views[:, :, ::-1])]
        return sum(probabilities) / 2

    expected = (
        mirror_average(images) / 2
        + mirror_average(padded[:, :32, :32]) / 4
        + mirror_average(padded[:, 2:, 2:]) / 4
    )
    module = export.ServingModule(network, "flip_translate")
    # float32: one batch of six views and six separate calls sum in different orders (logits
    # of about 10 differ by ~1e-5), so compare relative to the probability, not to 1e-6 flat.
    probabilities = module.probabilities(tf.constant(images))
    np.testing.assert_allclose(probabilities, expected, rtol=1e-4, atol=1e-6)
    flip_only = export.ServingModule(network, "flip").probabilities(tf.constant(images))
    np.testing.assert_allclose(flip_only, mirror_average(images), rtol=1e-4, atol=1e-6)
    assert not np.allclose(flip_only, expected)


class _PassSizeLimited(keras.Model):
    """`network`, failing whenever it is handed more than `limit` images at once."""

    def __init__(self, network: keras.Model, limit: int):
        super().__init__()
        self.network, self.limit = network, limit

    def call(self, images, training=None):
        too_many = tf.debugging.assert_less_equal(tf.shape(images)[0], self.limit)
        with tf.control_dependencies([too_many]):
            return self.network(images)


def test_views_go_through_the_network_a_few_at_a_time(monkeypatch):
    """Large requests (many records x 6 views) run in passes of at most VIEWS_PER_PASS
    images, in order, in the traced signature as well as eagerly."""
    network = _tiny_network()
    images = tf.constant(np.random.default_rng(2).integers(0, 256, (5, 32, 32, 3), np.uint8))
    whole = export.ServingModule(network, "flip_translate").probabilities(images)
    monkeypatch.setattr(export, "VIEWS_PER_PASS", 4)  # 30 views: 7 full passes and one of 2
    module = export.ServingModule(_PassSizeLimited(network, 4), "flip_translate")
    np.testing.assert_allclose(module.probabilities(images), whole, rtol=1e-5, atol=1e-7)
    traced = tf.function(module.probabilities)
    np.testing.assert_allclose(traced(images), whole, rtol=1e-5, atol=1e-7)
    flip_only = tf.function(export.ServingModule(network, "flip").probabilities)
    assert flip_only(images[:0]).shape == (0, 10)  # no pass at all


class _TraceCounting(keras.Model):
    """`network`, counting how often its graph is built (each call while tracing)."""

    def __init__(self, network: keras.Model):
        super().__init__()
        self.network, self.traces = network, 0

    def call(self, images, training=None):
        self.traces += 1
        return self.network(images)


def test_the_export_builds_the_network_graph_once_for_both_signatures(tmp_path):
    """One shared probabilities function for the two signatures, one more graph for
    `logits`; tracing each signature before saving (which traces again) built five."""
    network = _TraceCounting(_tiny_network())
    network(tf.zeros([1, 32, 32, 3], tf.uint8))
    network.traces = 0
    export.export_serving_model(network, str(tmp_path / "model"), "flip_translate")
    assert network.traces == 2
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    assert set(loaded.signatures) == {"serving_default", "serving_examples"}


def test_unknown_test_time_augmentation_is_refused():
    with pytest.raises(ValueError, match="unknown test-time augmentation 'crops'"):
        export.ServingModule(_tiny_network(), "crops")
