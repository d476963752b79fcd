"""Executors that make the served model the Evaluator's regression baseline.

`Executor` copies the newest version under the serving directory into its output
Model artifact (in the Trainer's layout, `<uri>/Format-Serving/`); when nothing is
served, the artifact stays empty. `EvaluatorExecutor` is TFX's Evaluator, minus the
baseline when that artifact is empty, so a first run is judged by the absolute gate
alone. Plain files and artifacts only: the same code runs under every orchestrator.
"""

from __future__ import annotations

import os

from absl import logging
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.artifact import Artifact
from tfx.utils import io_utils, path_utils

from components import contract
from components.contract import SAVED_MODEL_FILE
from components.keras_autograph import leave_tf_keras_unconverted
from components.served_model_baseline.spec import BASELINE_KEY, SERVING_MODEL_DIR_KEY

# Custom properties on the baseline artifact, for people reading the metadata.
SERVED_VERSION_KEY = "served_version"  # 0: nothing was served
SERVED_FROM_KEY = "served_from"


def newest_served_version(serving_model_dir: str) -> str | None:
    """The version TF Serving serves from `serving_model_dir`, if any."""
    if not fileio.exists(serving_model_dir):
        return None
    return contract.newest_served_version(
        fileio.listdir(serving_model_dir),
        lambda name: fileio.exists(os.path.join(serving_model_dir, name, SAVED_MODEL_FILE)),
    )


def holds_saved_model(model: Artifact) -> bool:
    return fileio.exists(os.path.join(path_utils.serving_model_dir(model.uri), SAVED_MODEL_FILE))


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        baseline = artifact_utils.get_single_instance(output_dict[BASELINE_KEY])
        serving_model_dir = exec_properties[SERVING_MODEL_DIR_KEY]
        version = newest_served_version(serving_model_dir)
        if version is None:
            logging.info(
                "Nothing served under %s: the Evaluator runs without a baseline", serving_model_dir
            )
            baseline.set_int_custom_property(SERVED_VERSION_KEY, 0)
            return
        source = os.path.join(serving_model_dir, version)
        io_utils.copy_dir(source, path_utils.serving_model_dir(baseline.uri))
        # Which served version this is, for a Trainer that warm-starts from the copy.
        io_utils.write_string_file(os.path.join(baseline.uri, contract.SERVED_FROM_FILE), source)
        baseline.set_int_custom_property(SERVED_VERSION_KEY, int(version))
        baseline.set_string_custom_property(SERVED_FROM_KEY, source)
        logging.info("Baseline: served version %s from %s", version, source)


class EvaluatorExecutor(evaluator_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        leave_tf_keras_unconverted()  # in its own container, nothing else did
        baselines = input_dict.get(standard_component_specs.BASELINE_MODEL_KEY, [])
        if baselines and not holds_saved_model(baselines[0]):
            logging.info(
                "The baseline artifact holds no model (nothing was served): "
                "judging the candidate by the absolute thresholds alone"
            )
            input_dict = {
                key: value
                for key, value in input_dict.items()
                if key != standard_component_specs.BASELINE_MODEL_KEY
            }
        super().Do(input_dict, output_dict, exec_properties)
