"""Executor of DataValidationGate."""

from __future__ import annotations

from absl import logging
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

from components.tfx_files import anomalies_file, statistics_file
from components.validation_gate.checks import (
    DataValidationError,
    anomaly_problems,
    statistics_problems,
)


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        statistics = artifact_utils.get_single_instance(input_dict["statistics"])
        anomalies = artifact_utils.get_single_instance(input_dict["anomalies"])
        problems: list[str] = []
        for split in artifact_utils.decode_split_names(statistics.split_names):
            stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
                io_utils.read_bytes_file(statistics_file(statistics, split))
            )
            for dataset in stats.datasets:
                problems.extend(statistics_problems(split, dataset))
        for split in artifact_utils.decode_split_names(anomalies.split_names):
            found = anomalies_pb2.Anomalies.FromString(
                io_utils.read_bytes_file(anomalies_file(anomalies, split))
            )
            problems.extend(anomaly_problems(split, found))
        if problems:
            raise DataValidationError(
                "data validation failed, training will not start:\n  - " + "\n  - ".join(problems)
            )
        logging.info(
            "Data validation passed for splits %s",
            artifact_utils.decode_split_names(statistics.split_names),
        )
