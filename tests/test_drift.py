"""Representation drift on the served model's embeddings (components/checks/drift.py): the
statistic, the sample each export keeps, and the export's `features` function that a next run
embeds a span with, on the same scale as the sample."""

import numpy as np
import pytest
from test_inference import _images, _trained_looking_airbench

from components.checks import drift
from components.contract import EMBEDDINGS_KEY, LOGITS_KEY
from components.trainer import export, inference, model
from components.trainer.keras import tf


def _direct_mmd(x: np.ndarray, y: np.ndarray, width: float) -> float:
    """The unbiased squared MMD written out pair by pair."""

    def k(a, b):
        return np.exp(-np.sum((a - b) ** 2) / width)

    n, m = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    yy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    xy = sum(k(a, b) for a in x for b in y) / (n * m)
    return xx + yy - 2 * xy


def test_the_statistic_is_the_unbiased_squared_mmd_with_the_references_median_width():
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, (40, 3)), rng.normal(0.5, 1.5, (30, 3))
    distances = [np.sum((x[i] - x[j]) ** 2) for i in range(40) for j in range(i + 1, 40)]
    expected = _direct_mmd(x, y, float(np.median(distances)))
    assert drift.mmd(x, y) == pytest.approx(expected, abs=1e-4)
    # The width is the reference's whatever the span: one spread far wider cannot widen it.
    wider = _direct_mmd(x, 10 * y, float(np.median(distances)))
    assert drift.mmd(x, 10 * y) == pytest.approx(wider, abs=1e-4)


def test_one_distribution_reads_near_zero_and_a_shifted_one_does_not():
    rng = np.random.default_rng(1)
    reference = np.abs(rng.normal(0, 1, (2000, 64)))
    clean = np.abs(rng.normal(0, 1, (3000, 64)))
    assert abs(drift.mmd(reference, clean)) < 0.005
    assert drift.mmd(reference, clean * 1.3) > drift.MMD_THRESHOLD


def test_embeddings_of_another_width_are_refused():
    with pytest.raises(ValueError, match="span's embeddings have 8 dimensions, the reference's 4"):
        drift.mmd(np.ones((10, 4)), np.ones((10, 8)))


def test_the_kept_sample_is_at_most_sample_rows_of_float16_and_a_bad_file_is_named():
    rows = np.random.default_rng(2).normal(0, 1, (5000, 16))
    kept = drift.embeddings_from_bytes(drift.embeddings_to_bytes(rows), "x.npz")
    assert kept.shape == (1667, 16)  # every third row: at most SAMPLE
    np.testing.assert_allclose(kept, rows[::3], rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match=r"^bad\.npz: not an embedding sample"):
        drift.embeddings_from_bytes(b"\x00" * 10, "bad.npz")
    infinite = rows.copy()
    infinite[3, 3] = np.inf
    with pytest.raises(ValueError, match=r"^inf\.npz: .*not finite"):
        drift.embeddings_from_bytes(drift.embeddings_to_bytes(infinite), "inf.npz")


@pytest.mark.parametrize("architecture", ["airbench", "seed_cnn"])
def test_the_export_embeds_on_the_scale_of_the_sample_it_keeps(tmp_path, architecture):
    """The exported `features` are the served network's logits and the input of its head; the
    sample the Trainer keeps comes from that same network (airbench's folded one, whose
    activations are scaled unlike the trained network's), so the export's embeddings of the
    eval images are the kept ones."""
    network = _trained_looking_airbench(6) if architecture == "airbench" else model.build_seed_cnn()
    images, labels = tf.constant(_images(7, 96)), tf.constant(np.arange(96) % 10)
    export_dir = str(tmp_path / "export")
    export.export_serving_model(network, export_dir)
    export.write_label_reference(network, images, labels, export_dir)
    loaded = tf.saved_model.load(export_dir)
    found = loaded.features(images)
    head = [layer for layer in network.layers if layer.__class__.__name__ == "Dense"][-1]
    assert found[EMBEDDINGS_KEY].shape == (96, head.input.shape[-1])
    np.testing.assert_allclose(
        found[LOGITS_KEY].numpy(), loaded.logits(images).numpy(), rtol=1e-5, atol=1e-5
    )
    with open(f"{export_dir}/{drift.EMBEDDING_FILE}", "rb") as handle:
        kept = drift.embeddings_from_bytes(handle.read(), "kept")
    np.testing.assert_allclose(kept, found[EMBEDDINGS_KEY].numpy(), rtol=2e-3, atol=2e-3)
    if architecture == "airbench":  # the trained network's activations are on another scale
        trained = inference.with_embeddings(network)(images)[0].numpy()
        assert not np.allclose(trained, kept, rtol=2e-3, atol=2e-3)


def test_a_network_without_a_head_of_its_own_exports_no_features_and_keeps_no_sample(tmp_path):
    """A subclassed wrapper shows no penultimate layer: the export has `logits` but no
    `features`, the reference no embedding sample, and a next run says it did not compare."""
    from test_recipe import _tiny_network, _TraceCounting

    network = _TraceCounting(_tiny_network())
    network(tf.zeros([1, 32, 32, 3], tf.uint8))
    assert inference.with_embeddings(network) is None
    images, labels = tf.constant(_images(8, 20)), tf.constant(np.arange(20) % 10)
    export_dir = str(tmp_path / "export")
    export.export_serving_model(network, export_dir)
    export.write_label_reference(network, images, labels, export_dir)
    loaded = tf.saved_model.load(export_dir)
    assert not hasattr(loaded, "features") and loaded.logits(images).shape == (20, 10)
    assert not (tmp_path / "export" / drift.EMBEDDING_FILE).exists()
    assert (tmp_path / "export" / "assets.extra" / "label_reference.json").exists()


def test_the_shift_baselines_come_from_the_reference_images_a_warm_start_carries(tmp_path):
    """A version fine-tuned on a small span has a small eval split; its class-probability
    and embedding samples are taken on the reference images (the served version's, filled
    up), so they stay large enough to compare; the label counts stay the eval split's."""
    import json

    from components.checks import label_agreement

    network = model.build_seed_cnn()
    images, labels = tf.constant(_images(9, 40)), tf.constant(np.arange(40) % 10)
    carried = _images(10, 300)
    export_dir = str(tmp_path / "export")
    export.write_label_reference(network, images, labels, export_dir, shift_images=carried)
    found = json.loads((tmp_path / "export" / label_agreement.REFERENCE_FILE).read_text())
    assert np.sum(found["confusion"]) == 40 and len(found["probabilities_sample"]) == 300
    with open(f"{export_dir}/{drift.EMBEDDING_FILE}", "rb") as handle:
        assert drift.embeddings_from_bytes(handle.read(), "kept").shape == (300, 512)
