"""A sample of a split's records scored by the served model, as a Beam step: the split's
TFRecord files read, one record in k kept (by a hash of its bytes, so the sample does not
depend on file order or sharding; of the spans asked for only), batched and scored by
Beam's RunInference with the served SavedModel (components/checks/model_scoring.py: class
probabilities and embeddings in one pass per batch), and collected into one file in the
gate's output, which the executor reads back. The model and the output are artifacts, so the
step runs on whichever runner the pipeline's Beam arguments name."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference
from tfx.dsl.io import fileio

from components.checks import model_scoring
from components.contract import IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY, NUM_CLASSES, RECORD_ID_KEY
from components.validation_gate import near_copies

# The scored sample, in the gate's output: record ids, labels, probabilities, embeddings and
# the images' difference hashes (near_copies.py: which embedding copies are near ones).
SCORED_FILE = "scored_sample.npz"
_HASH_BYTES = 8


@dataclasses.dataclass(frozen=True)
class Scored:
    """The scored records, in record-id order."""

    ids: list[str]
    labels: np.ndarray
    probabilities: np.ndarray
    embeddings: np.ndarray | None  # None: the model exports no `features`
    near: list[bytes]  # difference hashes


def kept(serialized: bytes, every: int) -> bool:
    """Whether a record is in the sample: one in `every`, by its bytes' hash (before it is
    parsed: most records are not)."""
    digest = hashlib.sha1(serialized).digest()
    return int.from_bytes(digest[:8], "big") % every == 0


def _of_spans(record_id: str, spans: Sequence[int] | None) -> bool:
    return not spans or any(record_id.startswith(f"span-{int(n)}/") for n in spans)


def _parsed(serialized: bytes) -> tuple[str, int, np.ndarray, bytes]:
    feature = tf.train.Example.FromString(serialized).features.feature
    pixels = np.frombuffer(feature[IMAGE_KEY].bytes_list.value[0], np.uint8)
    return (
        feature[RECORD_ID_KEY].bytes_list.value[0].decode(),
        int(feature[LABEL_KEY].int64_list.value[0]),
        pixels.reshape(IMAGE_SHAPE),
        serialized,
    )


class _LoadedModel:
    """A loaded SavedModel that `score_sample` lets go of once its pipeline is done: Beam's
    shared-model cache keeps the last model it loaded until the process ends
    (apache_beam.utils.shared), holding its memory, and TensorFlow objects left to the
    interpreter's shutdown print errors as they are deleted."""

    loaded_here: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, model_dir: str):
        self.model = tf.saved_model.load(model_dir)
        _LoadedModel.loaded_here.add(self)

    @classmethod
    def release_all(cls) -> None:
        for loaded in list(cls.loaded_here):
            loaded.model = None


class ServedModelHandler(ModelHandler):
    """RunInference's handler for an exported SavedModel: a batch of parsed records ->
    (record id, label, difference hash) with (probabilities, embedding or None)."""

    def __init__(self, model_dir: str):
        self._model_dir = model_dir

    def load_model(self) -> _LoadedModel:
        return _LoadedModel(self._model_dir)

    def run_inference(self, batch, model, inference_args=None) -> Iterable[PredictionResult]:
        images = np.stack([record[2] for record in batch])
        serialized = np.array([record[3] for record in batch], dtype=object)
        probabilities, embeddings = model_scoring.score_batch(
            model.model, images, serialized, self._model_dir
        )
        hashes = near_copies.hashes(images)
        return [
            PredictionResult(
                (*record[:2], hashes[i]),
                (probabilities[i], None if embeddings is None else embeddings[i]),
            )
            for i, record in enumerate(batch)
        ]

    def batch_elements_kwargs(self) -> dict:
        return {"min_batch_size": model_scoring.BATCH, "max_batch_size": model_scoring.BATCH}


def _write(results: list[PredictionResult], path: str) -> None:
    results = sorted(results, key=lambda result: result.example[0])
    embedded = [result.inference[1] for result in results]
    buffer = io.BytesIO()
    np.savez(
        buffer,
        ids=np.array([result.example[0] for result in results], dtype=str),
        labels=np.array([result.example[1] for result in results], np.int64),
        probabilities=np.array([result.inference[0] for result in results], np.float32).reshape(
            -1, NUM_CLASSES
        ),
        embeddings=np.array(embedded, np.float32)
        if embedded and embedded[0] is not None
        else np.zeros((0, 0), np.float32),
        has_embeddings=np.array(bool(embedded) and embedded[0] is not None),
        near=np.frombuffer(b"".join(r.example[2] for r in results), np.uint8).reshape(
            -1, _HASH_BYTES
        ),
    )
    with fileio.open(path, "wb") as out:
        out.write(buffer.getvalue())


def score_sample(
    split_uri: str,
    model_dir: str,
    every: int,
    spans: Sequence[int] | None,
    output_dir: str,
    make_pipeline: Callable[[], beam.Pipeline] = beam.Pipeline,
) -> Scored:
    """Scores the sample (`kept`) of the split's records with the SavedModel in `model_dir`,
    in a Beam pipeline from `make_pipeline`; the result is also left in `output_dir`."""
    path = os.path.join(output_dir, SCORED_FILE)
    fileio.makedirs(output_dir)
    try:
        with make_pipeline() as pipeline:
            _ = (
                pipeline
                | "Read" >> beam.io.ReadFromTFRecord(os.path.join(split_uri, "*"))
                | "Sample" >> beam.Filter(kept, every)
                | "Parse" >> beam.Map(_parsed)
                | "Spans" >> beam.Filter(lambda record: _of_spans(record[0], spans))
                | "Score" >> RunInference(ServedModelHandler(model_dir))
                | "Collect" >> beam.combiners.ToList()
                | "Write" >> beam.Map(_write, path)
            )
    finally:
        _LoadedModel.release_all()
    return read_scored(output_dir)


def read_scored(output_dir: str) -> Scored | None:
    """The scored sample `score_sample` left in `output_dir`, or None when none was scored."""
    path = os.path.join(output_dir, SCORED_FILE)
    if not fileio.exists(path):
        return None
    with fileio.open(path, "rb") as handle, np.load(io.BytesIO(handle.read())) as found:
        return Scored(
            [str(x) for x in found["ids"]],
            found["labels"],
            found["probabilities"],
            found["embeddings"] if bool(found["has_embeddings"]) else None,
            [row.tobytes() for row in found["near"]],
        )
