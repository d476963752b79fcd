"""Load-tested before it is visible (issue 62 item 3): the export carries TF Serving's warmup
records and its own answers to them."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components import warmup
from components.contract import IMAGES_SIGNATURE
from components.trainer import export
from components.trainer.keras import keras


def _network(seed: int) -> keras.Model:
    """Untrained, but shaped like the real thing: uint8 [N,32,32,3] -> 10 logits."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.layers.Input((32, 32, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )


def _images(count: int = 300) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)


def _exported(folder: Path, seed: int) -> Path:
    """A SavedModel as the Trainer leaves it: the export, then its warmup records."""
    module = export.export_serving_model(_network(seed), str(folder))
    assert export.write_warmup_requests(module, _images(), str(folder), "cifar10") == 100
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("exported")
    return {seed: _exported(root / f"model-{seed}", seed) for seed in (1, 2)}


def test_the_warmup_file_is_tf_servings_format_for_this_signature(exported):
    path = exported[1] / warmup.WARMUP_FILE
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert 0 < len(records) <= 1000 and len(records) == len(warmup.BATCH_SIZES) + 1
    loaded = tf.saved_model.load(str(exported[1]))
    inputs = set(loaded.signatures[IMAGES_SIGNATURE].structured_input_signature[1])
    images = 0
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record)
        assert log.WhichOneof("log_type") == "predict_log"
        request = log.predict_log.request
        assert request.model_spec.name == "cifar10"
        assert request.model_spec.signature_name == IMAGES_SIGNATURE
        assert request.model_spec.signature_name in loaded.signatures
        assert set(request.inputs) == inputs
        payloads = tf.make_ndarray(request.inputs["images"])
        assert {tf.io.decode_png(p).shape for p in payloads} == {(32, 32, 3)}
        images += len(payloads)
    kept = warmup.read_answers(str(exported[1]))
    assert images == warmup.WARMUP_IMAGES and kept.shape == (images, 10)
