"""Both training precisions end to end, on every kind of CPU: float32 (the shared first
run) and mixed_bfloat16 (native with AVX512_BF16 or AMX, emulated and slow on AVX2-only
CPUs, so one epoch on the tiny archive). Whatever the precision, the pushed model is a
float32 SavedModel with both signatures, serving the recipe's test-time views averaged.
Where bf16 cannot run at all (`cpu_bf16_blocked`: an AVX-512 CPU with oneDNN capped at
AVX2, the AVX2 stand-in) the bf16 run must be refused with that reason instead."""

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.contract import (
    CLASSES_KEY,
    EXAMPLES_INPUT,
    EXAMPLES_SIGNATURE,
    IMAGES_INPUT,
    IMAGES_SIGNATURE,
    LABEL_NAMES,
    PROBABILITIES_KEY,
)
from components.storage.served_versions import complete_versions
from components.trainer import model
from components.trainer.hardware import cpu_bf16_blocked, detect
from components.trainer.keras import tf
from pipeline.local.summary import RunSummary

import cifar_fixtures as fx
from conftest import cli

pytestmark = pytest.mark.integration  # full pipeline runs in subprocesses


@pytest.fixture(scope="session")
def bf16_run(tiny_archive, tmp_path_factory):
    out = tmp_path_factory.mktemp("bf16")
    done = cli(
        "run", "--data", tiny_archive, "--output-dir", out, "--accuracy-gate", "0",
        "--epochs", "1", "--per-replica-batch-size", "64", "--precision", "mixed_bfloat16",
    )  # fmt: skip
    return out, done


def expected_probabilities(network, images: np.ndarray, augmentation: str) -> np.ndarray:
    """The test-time average written out view by view in numpy, independently of the
    export's graph: the image and its mirror image, and for "flip_translate" both again
    shifted one pixel up-left and down-right (reflect padding) at half the weight."""

    def softmax_of(views: np.ndarray) -> np.ndarray:
        logits = network(tf.constant(views)).numpy().astype(np.float64)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def mirror_average(views: np.ndarray) -> np.ndarray:
        return (softmax_of(views) + softmax_of(views[:, :, ::-1])) / 2

    if augmentation == "flip":
        return mirror_average(images)
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    up_left, down_right = padded[:, :32, :32], padded[:, 2:, 2:]
    return (
        mirror_average(images) / 2
        + mirror_average(np.ascontiguousarray(up_left)) / 4
        + mirror_average(np.ascontiguousarray(down_right)) / 4
    )


def check_pushed_model(out: Path, precision: str) -> None:
    summary = RunSummary.load(out)
    assert summary.training.precision == precision
    assert summary.blessed and summary.push.pushed
    pushed = Path(summary.push.pushed_version_dir)
    assert pushed.parent == out / "serving" / "cifar10" and (pushed / "saved_model.pb").exists()

    loaded = tf.saved_model.load(str(pushed))
    assert set(loaded.signatures) == {IMAGES_SIGNATURE, EXAMPLES_SIGNATURE}
    for name, key in ((IMAGES_SIGNATURE, IMAGES_INPUT), (EXAMPLES_SIGNATURE, EXAMPLES_INPUT)):
        signature = loaded.signatures[name]
        [spec] = signature.structured_input_signature[1].values()
        assert spec.name == key and spec.dtype == tf.string and spec.shape.as_list() == [None]
        outputs = signature.structured_outputs
        assert outputs[PROBABILITIES_KEY].dtype == tf.float32
        assert outputs[CLASSES_KEY].dtype == tf.string
    # Rebuilt in float32 for serving, whatever it was trained in: no bf16 in any graph.
    graph = loaded.signatures[EXAMPLES_SIGNATURE].graph.as_graph_def()
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    dtypes = {a.type for n in nodes for a in n.attr.values()}
    dtypes |= {t for n in nodes for a in n.attr.values() for t in a.list.type}
    assert tf.float32.as_datatype_enum in dtypes
    assert tf.bfloat16.as_datatype_enum not in dtypes

    labels = fx.balanced_labels(1, seed=11)
    images = fx.make_images(labels, seed=11)
    by_example = loaded.signatures[EXAMPLES_SIGNATURE](
        examples=tf.constant(fx.serialized_examples(images, labels))
    )
    probabilities = by_example[PROBABILITIES_KEY].numpy()
    augmentation = model.RECIPES[summary.training.model].test_time_augmentation
    if augmentation == "flip_translate_shared":
        # The same six views, whose first convolution sees the padded image's next pixels
        # along each view's edge instead of zeros (test_inference checks it view by view):
        # close to the separate views' average, and nearer to it than to the mirror's alone.
        separate = expected_probabilities(loaded.logits, images, "flip_translate")
        flip_only = expected_probabilities(loaded.logits, images, "flip")
        assert np.abs(probabilities - separate).max() < 0.05
        assert np.abs(probabilities - separate).sum() < np.abs(probabilities - flip_only).sum()
    else:
        np.testing.assert_allclose(
            probabilities, expected_probabilities(loaded.logits, images, augmentation), atol=1e-5
        )
    assert [c.decode() for c in by_example[CLASSES_KEY].numpy()] == [
        LABEL_NAMES[i] for i in probabilities.argmax(axis=1)
    ]

    pngs = []
    for image in images:
        encoded = io.BytesIO()
        Image.fromarray(image).save(encoded, format="PNG")
        pngs.append(encoded.getvalue())
    by_image = loaded.signatures[IMAGES_SIGNATURE](images=tf.constant(pngs))
    np.testing.assert_allclose(by_image[PROBABILITIES_KEY].numpy(), probabilities, atol=1e-6)


def test_float32_run_pushes_a_model_serving_the_test_time_views(first_run):
    out, _, _ = first_run
    check_pushed_model(out, "float32")


def test_bfloat16_run_pushes_a_float32_model_serving_the_test_time_views(bf16_run):
    out, done = bf16_run
    blocked = cpu_bf16_blocked(detect("cpu"))
    if blocked:  # e.g. ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU: refused, not crashed
        assert done.returncode == 2, done.stderr[-4000:]
        assert f"error: {blocked}" in done.stderr and "Traceback" not in done.stderr
        # refused before any step: nothing ran, nothing pushed; the night's record says so
        assert not (out / "artifacts").exists()
        assert complete_versions(str(out / "serving" / "cifar10")) == []
        return
    assert done.returncode == 0, done.stderr[-4000:]
    check_pushed_model(out, "mixed_bfloat16")
    assert "precision      mixed_bfloat16 (--precision mixed_bfloat16)" in done.stdout
