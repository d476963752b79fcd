"""DataValidationGate on real TFDV statistics and anomalies, computed against the curated
schema: clean data passes, each planted problem stops the run and is named."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tfx.types import artifact_utils, standard_artifacts

from components.contract import IMAGE_BYTES, IMAGE_SHAPE, IMAGE_SUMMARY_FEATURES
from components.validation_gate.checks import DataValidationError
from components.validation_gate.comparison import statistics_options
from components.validation_gate.executor import Executor
from pipeline.settings.config import SCHEMA_PATH

import cifar_fixtures as fx


def _example(image: bytes, label: int, record_id: str) -> bytes:
    """As the ExampleGen writes it, summaries included (a planted wrong-size image, which the
    ExampleGen would refuse, gets mid-range ones)."""
    from components.cifar10_example_gen.executor import to_example
    from components.cifar10_example_gen.sources import Record
    from components.cifar10_example_gen.summaries import summarize

    summary = (0.5,) * len(IMAGE_SUMMARY_FEATURES)
    if len(image) == IMAGE_BYTES:
        pixels = np.frombuffer(image, np.uint8).reshape((1, *IMAGE_SHAPE))
        summary = tuple(float(v[0]) for v in summarize(pixels).values())
    return to_example(Record(record_id, label, image, summary)).SerializeToString()


def _clean_split(per_class=3, seed=0):
    labels = fx.balanced_labels(per_class, seed)
    images = fx.make_images(labels, seed)
    return [(img.tobytes(), int(lab)) for img, lab in zip(images, labels)]


def _artifacts(tmp_path, splits):
    """Statistics and anomalies artifacts laid out as StatisticsGen/ExampleValidator do."""
    schema = tfdv.load_schema_text(str(SCHEMA_PATH))
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / "stats")
    anomalies = standard_artifacts.ExampleAnomalies()
    anomalies.uri = str(tmp_path / "anomalies")
    for artifact in (statistics, anomalies):
        artifact.split_names = artifact_utils.encode_split_names(list(splits))
    for split, records in splits.items():
        data = tmp_path / f"{split}.tfrecord"
        with tf.io.TFRecordWriter(str(data)) as writer:
            for i, (image, label) in enumerate(records):
                writer.write(_example(image, label, f"{split}:{i}"))
        stats = tfdv.generate_statistics_from_tfrecord(
            str(data), stats_options=statistics_options(schema)
        )
        found = tfdv.validate_statistics(stats, schema)
        for artifact, name, proto in (
            (statistics, "FeatureStats.pb", stats),
            (anomalies, "SchemaDiff.pb", found),
        ):
            folder = artifact_utils.get_split_uri([artifact], split)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(proto.SerializeToString())
    schema_artifact = standard_artifacts.Schema()
    schema_artifact.uri = str(tmp_path / "schema")
    os.makedirs(schema_artifact.uri)
    tfdv.write_schema_text(schema, os.path.join(schema_artifact.uri, "schema.pbtxt"))
    return {"statistics": [statistics], "anomalies": [anomalies], "schema": [schema_artifact]}


def _gate(tmp_path, splits):
    Executor().Do(_artifacts(tmp_path, splits), _outputs(tmp_path), {})


def _outputs(tmp_path):
    comparison = standard_artifacts.ExampleAnomalies()
    comparison.uri = str(tmp_path / "comparison")
    os.makedirs(comparison.uri, exist_ok=True)
    return {"comparison": [comparison]}


def test_clean_data_passes(tmp_path, monkeypatch):
    """Passing means both checks ran on both splits and found nothing: each check is
    wrapped to record what it was given and what it reported."""
    from components.validation_gate import executor

    reported = []
    for name in ("statistics_problems", "anomaly_problems"):

        def recording(split, proto, check=getattr(executor, name), name=name):
            problems = check(split, proto)
            reported.append((name, split, problems))
            return problems

        monkeypatch.setattr(executor, name, recording)
    Executor().Do(
        _artifacts(tmp_path, {"train": _clean_split(), "eval": _clean_split(seed=1)}),
        _outputs(tmp_path),
        {},
    )
    assert sorted(reported) == [
        ("anomaly_problems", "eval", []),
        ("anomaly_problems", "train", []),
        ("statistics_problems", "eval", []),
        ("statistics_problems", "train", []),
    ]


def test_label_out_of_range_stops_the_run(tmp_path):
    train = _clean_split()
    train[0] = (train[0][0], 12)
    with pytest.raises(DataValidationError, match="split 'train', feature 'label'"):
        Executor().Do(
            _artifacts(tmp_path, {"train": train, "eval": _clean_split(seed=1)}),
            _outputs(tmp_path),
            {},
        )


def test_wrong_image_size_stops_the_run(tmp_path):
    evals = _clean_split(seed=1)
    evals[3] = (evals[3][0][:3000], evals[3][1])
    with pytest.raises(
        DataValidationError,
        match=r"split 'eval', feature 'image_raw': images are 3000 to 3072 bytes",
    ):
        Executor().Do(
            _artifacts(tmp_path, {"train": _clean_split(), "eval": evals}), _outputs(tmp_path), {}
        )


def test_missing_class_stops_the_run(tmp_path):
    evals = [r for r in _clean_split(seed=1) if r[1] != 7]
    with pytest.raises(DataValidationError, match=r"split 'eval', feature 'label': classes \[7\]"):
        Executor().Do(
            _artifacts(tmp_path, {"train": _clean_split(), "eval": evals}), _outputs(tmp_path), {}
        )


def test_empty_split_stops_the_run(tmp_path):
    with pytest.raises(DataValidationError, match="split 'eval'"):
        Executor().Do(
            _artifacts(tmp_path, {"train": _clean_split(), "eval": []}), _outputs(tmp_path), {}
        )


def test_every_problem_is_listed(tmp_path):
    train = _clean_split()
    train[0] = (train[0][0][:100], 11)
    with pytest.raises(DataValidationError) as caught:
        Executor().Do(
            _artifacts(tmp_path, {"train": train, "eval": _clean_split(seed=1)}),
            _outputs(tmp_path),
            {},
        )
    message = str(caught.value)
    assert "feature 'label'" in message and "feature 'image_raw'" in message
    assert np.char.count(message, "\n  - ") >= 2


def test_a_night_with_nothing_new_passes_without_validating(tmp_path):
    """The ExampleGen found no new span and wrote empty splits: the gate passes the night on
    (the run ends successful, nothing trained) and says why, where empty splits would stop it."""
    examples = standard_artifacts.Examples()
    examples.set_int_custom_property("no_new_span", 1)
    examples.set_string_custom_property("no_new_span_reason", "no new span: served version 7")
    inputs = {**_artifacts(tmp_path, {"train": [], "eval": []}), "examples": [examples]}
    Executor().Do(inputs, _outputs(tmp_path), {})
    written = json.loads((tmp_path / "comparison" / "comparison.json").read_text())
    assert written == {"no_new_span": "no new span: served version 7"}
