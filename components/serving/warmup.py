"""Warmup records (issue 62 item 3): what TF Serving replays when it loads a version, and what
the Pusher's load test (components/serving/load_test.py) replays before it commits one.

The Trainer writes into the export's `assets.extra/`:

- `tf_serving_warmup_requests` (WARMUP_FILE): a TFRecord of
  `tensorflow_serving.apis.prediction_log_pb2.PredictionLog`, each a `predict_log` whose
  PredictRequest asks `serving_default` about a batch of PNG-encoded images under the
  signature's input name. TF Serving reads at most 1,000 records from it and runs each before
  it marks the version available, so the first users' requests are not the ones that build
  the kernels for their batch size. WARMUP_IMAGES (100) images go in records of the batch
  sizes clients send most (BATCH_SIZES: 1, 2, 4, ..., 32, then the rest): 8 records, one
  call each, which warms each of those shapes once (the first call of a shape is the slow
  one; a second record of the same shape would warm nothing) and keeps the load test's
  replay to a few tenths of a second (100 one-image records took 1.5 s on a busy 2-core
  host).
- `warmup_answers.npz` (ANSWERS_FILE): the answers (probabilities, one row per record) of
  the exported `serving_default` for the same records, computed in the Trainer right after
  the export. They stand for the Evaluator's answers for the same images: TFMA scores the
  same exported function (`serving_examples` and `serving_default` share it, export.py) and
  keeps no per-image output to read back, so the Trainer's own call is the one record of what
  this model answered before it was copied anywhere.

The images are PNG (lossless), so the signature decodes exactly the pixels sampled: evenly
spaced images of the reference set (components/checks/reference_images.py), eval images that stay
the same from version to version.
"""

from __future__ import annotations

import io
import os

import numpy as np

from components.contract import IMAGES_INPUT, IMAGES_SIGNATURE, PROBABILITIES_KEY

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
ANSWERS_FILE = os.path.join("assets.extra", "warmup_answers.npz")
WARMUP_IMAGES = 100
BATCH_SIZES = (1, 1, 2, 4, 8, 16, 32)  # then one record of the rest: 36 images
# TF Serving reads no more records than this from a warmup file (saved_model_warmup_util).
MAX_WARMUP_RECORDS = 1000
# The serving folder's model name when the Trainer is not told it (the pipeline's default):
# TF Serving's warmup runs a record by its signature name and ignores the model name.
DEFAULT_MODEL_NAME = "cifar10"


def sample(images: np.ndarray, count: int = WARMUP_IMAGES) -> np.ndarray:
    """`count` images evenly spaced in order (all of them when there are fewer)."""
    take = min(count, len(images))
    return images[np.arange(take) * len(images) // max(take, 1)]


def batches(payloads: list[bytes]) -> list[list[bytes]]:
    """The payloads in records of BATCH_SIZES, the rest in one last record."""
    found, start = [], 0
    for size in BATCH_SIZES:
        if start < len(payloads):
            found.append(payloads[start : start + size])
        start += size
    return found + ([payloads[start:]] if start < len(payloads) else [])


def prediction_log(payloads: list[bytes], model_name: str) -> bytes:
    """One serialized PredictionLog: `serving_default` asked about a batch of encoded images.
    ImportError where `tensorflow_serving.apis` is not installed."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=IMAGES_SIGNATURE)
    )
    request.inputs[IMAGES_INPUT].CopyFrom(tf.make_tensor_proto(payloads, dtype=tf.string))
    log = prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )
    return log.SerializeToString()


def write(serve, images: np.ndarray, export_dir: str, model_name: str) -> int:
    """Writes WARMUP_FILE and ANSWERS_FILE for a sample of `images` (uint8 [N, 32, 32, 3])
    into the export; `serve` is the exported `serving_default` function. Returns the number
    of images in the records; 0, with a warning and nothing written, where the protos are
    not installed."""
    import tensorflow as tf
    from absl import logging

    payloads = batches([tf.io.encode_png(image).numpy() for image in sample(images)])
    try:
        records = [prediction_log(batch, model_name) for batch in payloads]
    except ImportError as err:
        logging.warning("No warmup records written (tensorflow-serving-api missing: %s)", err)
        return 0
    answers = _answers_as_served(serve, payloads)
    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    buffer = io.BytesIO()
    np.savez(buffer, probabilities=np.concatenate([np.asarray(a, np.float32) for a in answers]))
    with tf.io.gfile.GFile(os.path.join(export_dir, ANSWERS_FILE), "wb") as handle:
        handle.write(buffer.getvalue())
    return sum(len(batch) for batch in payloads)


def _answers_as_served(serve, payloads: list[list[bytes]]) -> list:
    """`serve`'s answers, one call per record as TF Serving and the load test replay them,
    computed as a CPU server computes them: on the CPU with TF32 off. A Trainer on a GPU
    would otherwise keep TF32 matmul results (10-bit mantissas), which a CPU replay misses
    by more than the load test's tolerance through arithmetic alone."""
    import tensorflow as tf

    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        with tf.device("/CPU:0"):
            return [serve(**{IMAGES_INPUT: tf.constant(b)})[PROBABILITIES_KEY] for b in payloads]
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)


def read_answers(version_dir: str) -> np.ndarray:
    """The kept probabilities, one row per image of the warmup records, in order."""
    import tensorflow as tf

    with tf.io.gfile.GFile(os.path.join(version_dir, ANSWERS_FILE), "rb") as handle:
        payload = handle.read()
    with np.load(io.BytesIO(payload)) as loaded:
        return loaded["probabilities"]
