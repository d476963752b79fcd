"""Executor of DataValidationGate: the schema's anomalies, the checks a schema cannot express,
skew between the splits and drift from the served model's training data, in one verdict."""

from __future__ import annotations

import json
import os

from absl import logging
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from components.contract import (
    COMPARISON_FILE,
    EVAL_SPLIT,
    SAVED_MODEL_FILE,
    SERVED_STATISTICS_FILE,
    TRAIN_SPLIT,
    newest_served_version,
)
from components.tfx_files import anomalies_file, statistics_file
from components.validation_gate.checks import (
    DataDriftError,
    DataValidationError,
    anomaly_problems,
    statistics_problems,
)
from components.validation_gate.comparison import Comparison, compare
from components.validation_gate.spec import ACCEPT_DRIFT_KEY, SERVING_MODEL_DIR_KEY


def _statistics(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    return statistics_pb2.DatasetFeatureStatisticsList.FromString(io_utils.read_bytes_file(path))


def served_statistics(serving_model_dir: str) -> tuple[str, str | None]:
    """(what the drift baseline is, path of its statistics or None): the training statistics
    kept beside the newest served version, read from the serving folder itself, so every
    runner finds them the same way, with no metadata store."""
    if not serving_model_dir or not fileio.exists(serving_model_dir):
        return "no served model: nothing to drift from", None
    version = newest_served_version(
        fileio.listdir(serving_model_dir),
        lambda name: fileio.exists(os.path.join(serving_model_dir, name, SAVED_MODEL_FILE)),
    )
    if version is None:
        return "no served model: nothing to drift from", None
    path = os.path.join(serving_model_dir, version, SERVED_STATISTICS_FILE)
    if not fileio.exists(path):
        return f"served version {version} keeps no training statistics: nothing to drift from", None
    return f"the training data of served version {version}", path


def _comparisons(statistics, schema, serving_model_dir: str, output_uri: str):
    """Skew of the eval split against the train split; drift of the train split against the
    served version's training data, whose statistics are copied into the output."""
    train = _statistics(statistics_file(statistics, TRAIN_SPLIT))
    evals = _statistics(statistics_file(statistics, EVAL_SPLIT))
    skew = compare(
        "skew", evals, train, schema, ("this run's eval split", "this run's train split")
    )
    baseline, path = served_statistics(serving_model_dir)
    if path is None:
        drift = Comparison("drift", "this run's train split", "", skipped=baseline)
    else:
        served = _statistics(path)
        io_utils.write_bytes_file(
            os.path.join(output_uri, SERVED_STATISTICS_FILE), served.SerializeToString()
        )
        drift = compare("drift", train, served, schema, ("this run's train split", baseline))
    return skew, drift


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        statistics = artifact_utils.get_single_instance(input_dict["statistics"])
        anomalies = artifact_utils.get_single_instance(input_dict["anomalies"])
        schema_artifact = artifact_utils.get_single_instance(input_dict["schema"])
        output = artifact_utils.get_single_instance(output_dict["comparison"])
        accept_drift = bool(exec_properties.get(ACCEPT_DRIFT_KEY, 0))
        problems: list[str] = []
        for split in artifact_utils.decode_split_names(statistics.split_names):
            stats = _statistics(statistics_file(statistics, split))
            for dataset in stats.datasets:
                problems.extend(statistics_problems(split, dataset))
        for split in artifact_utils.decode_split_names(anomalies.split_names):
            found = anomalies_pb2.Anomalies.FromString(
                io_utils.read_bytes_file(anomalies_file(anomalies, split))
            )
            problems.extend(anomaly_problems(split, found))
        schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(schema_artifact.uri))
        skew, drift = _comparisons(
            statistics, schema, exec_properties.get(SERVING_MODEL_DIR_KEY, ""), output.uri
        )
        problems.extend(skew.problems())
        drifted = drift.problems()
        verdict = {
            "skew": skew.to_json(),
            "drift": drift.to_json(),
            "accept_drift": accept_drift,
            "drift_accepted": bool(drifted) and accept_drift,
        }
        io_utils.write_string_file(os.path.join(output.uri, COMPARISON_FILE), json.dumps(verdict))
        for comparison in (skew, drift):
            logging.info("%s: %s", comparison.kind, comparison.skipped or "compared")
        if drifted and accept_drift:
            logging.warning("drift accepted (--accept-drift):\n  %s", "\n  ".join(drifted))
        elif drifted:
            problems.extend(drifted)
        if problems:
            hint = "\n(the data drifted: --accept-drift trains on it anyway)" if drifted else ""
            if accept_drift:
                hint = ""
            only_drift = len(problems) == len(drifted) and not accept_drift
            raise (DataDriftError if only_drift else DataValidationError)(
                "data validation failed, training will not start:\n  - "
                + "\n  - ".join(problems)
                + hint
            )
        logging.info(
            "Data validation passed for splits %s",
            artifact_utils.decode_split_names(statistics.split_names),
        )
