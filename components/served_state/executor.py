"""Executors of the served state: `Executor` reads the serving folder once, at the start of a
run, and `EvaluatorExecutor` judges the candidate against what it read.

`Executor` writes the served state (components/storage/served_versions.py) into its output Model
artifact: `served_state.json` (the newest complete version, its spans with fingerprints,
ancestors' included, and every span any version published), a copy of that version in the
Trainer's layout (`<uri>/Format-Serving/`: warm start and the Evaluator's baseline), its
training statistics (`<uri>/training_statistics.pb`: the drift baseline) and its training-image
index (`<uri>/training_images.bin`: eval images in it are dropped). When nothing is
served, the artifact holds the state alone. Every later step reads this artifact, never the
serving folder, so drift, warm start, the regression baseline and the Pusher's check all
refer to one version. Plain files and artifacts: the same code runs under every orchestrator.
"""

from __future__ import annotations

import os

from absl import logging
from tfx.components.evaluator import constants as evaluator_constants
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.artifact import Artifact
from tfx.utils import io_utils, path_utils

from components.checks.reference_images import MAX_CLASS_DROP
from components.contract import (
    NO_NEW_SPAN_PROPERTY,
    SAVED_MODEL_FILE,
    SERVED_IMAGES_FILE,
    SERVED_STATE_FILE,
    SERVED_STATISTICS_FILE,
)
from components.runtime.keras_autograph import leave_tf_keras_unconverted
from components.served_state.class_check import check_reference_classes
from components.served_state.spec import (
    MAX_CLASS_DROP_KEY,
    NIGHT_KEY,
    SERVED_MODEL_KEY,
    SERVING_MODEL_DIR_KEY,
)
from components.storage import night_facts
from components.storage.served_versions import read_served_state

# Custom properties on the served-state artifact, for people and dashboards reading metadata.
SERVED_VERSION_KEY = "served_version"  # 0: nothing was served
SERVED_FROM_KEY = "served_from"
SERVED_SPANS_KEY = "served_spans"


def holds_saved_model(model: Artifact) -> bool:
    return fileio.exists(os.path.join(path_utils.serving_model_dir(model.uri), SAVED_MODEL_FILE))


class Executor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        served = artifact_utils.get_single_instance(output_dict[SERVED_MODEL_KEY])
        state = read_served_state(exec_properties[SERVING_MODEL_DIR_KEY])
        if state.version is not None:
            io_utils.copy_dir(state.version_dir, path_utils.serving_model_dir(served.uri))
            for name in (SERVED_STATISTICS_FILE, SERVED_IMAGES_FILE):
                kept = os.path.join(state.version_dir, name)
                if fileio.exists(kept):
                    fileio.copy(kept, os.path.join(served.uri, name), True)
        # Written last: a consumer that finds the state finds the copy complete.
        io_utils.write_string_file(os.path.join(served.uri, SERVED_STATE_FILE), state.to_json())
        served.set_int_custom_property(SERVED_VERSION_KEY, int(state.version or 0))
        served.set_string_custom_property(SERVED_FROM_KEY, state.version_dir)
        served.set_string_custom_property(SERVED_SPANS_KEY, ",".join(map(str, sorted(state.spans))))
        kept = night_facts.folder(
            exec_properties[SERVING_MODEL_DIR_KEY], exec_properties.get(NIGHT_KEY) or ""
        )
        if kept:  # a compiled run: later steps keep their facts beside these
            served.set_string_custom_property(night_facts.FACTS_PROPERTY, kept)
            night_facts.write(kept, night_facts.SERVED, {"served_before": state.version})
        logging.info(
            "Served state: %s",
            f"version {state.version} from {state.version_dir}, spans {sorted(state.spans)}"
            if state.version
            else f"nothing served under {state.serving_model_dir}",
        )


def mark_not_blessed(blessing: Artifact, reason: str) -> None:
    """What TFX's Evaluator writes for a model it did not bless, for a night with nothing new."""
    io_utils.write_string_file(
        os.path.join(blessing.uri, evaluator_constants.NOT_BLESSED_FILE_NAME), ""
    )
    blessing.set_int_custom_property(
        evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY, evaluator_constants.NOT_BLESSED_VALUE
    )
    blessing.set_int_custom_property(NO_NEW_SPAN_PROPERTY, 1)
    logging.info("Nothing evaluated: %s", reason)


class EvaluatorExecutor(evaluator_executor.Executor):
    """TFX's Evaluator, with the served state as the baseline: an artifact without a model
    (nothing was served) means no baseline, and a night with nothing new evaluates nothing."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        examples = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.EXAMPLES_KEY]
        )
        if examples.get_int_custom_property(NO_NEW_SPAN_PROPERTY):
            blessing = artifact_utils.get_single_instance(
                output_dict[standard_component_specs.BLESSING_KEY]
            )
            mark_not_blessed(blessing, "no new span")
            return
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
        exec_properties = dict(exec_properties)
        margin = exec_properties.pop(MAX_CLASS_DROP_KEY, None)
        max_drop = MAX_CLASS_DROP if margin is None else float(margin)  # 0 is a margin
        super().Do(input_dict, output_dict, exec_properties)
        if standard_component_specs.BASELINE_MODEL_KEY in input_dict:
            check_reference_classes(input_dict, output_dict, max_drop)
        _keep_evaluation_facts(baselines, output_dict)


def _keep_evaluation_facts(baselines: list, output_dict) -> None:
    """Blessed or not, and the eval accuracy, for a compiled run's night report."""
    kept = night_facts.facts_dir_of(baselines)
    if not kept:
        return
    blessing = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.BLESSING_KEY]
    )
    blessed = blessing.get_int_custom_property(evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY)
    night_facts.write(
        kept,
        night_facts.EVALUATION,
        {"blessed": bool(blessed), "eval_accuracy": _accuracy(output_dict)},
    )


def _accuracy(output_dict) -> float | None:
    """The candidate's overall eval accuracy from TFMA's metrics (None if not found)."""
    try:
        import tensorflow_model_analysis as tfma

        evaluation = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EVALUATION_KEY]
        )
        for metrics in tfma.load_metrics(evaluation.uri):
            for key in metrics.metric_keys_and_values:
                wanted = (key.key.name, key.key.model_name in ("", "candidate"), key.key.is_diff)
                if wanted == ("sparse_categorical_accuracy", True, False):
                    return float(key.value.double_value.value)
    except Exception as err:
        logging.info("eval accuracy not read for the night's report: %s", err)
    return None
