"""The Evaluator's per-class check on the served version's reference images
(components/checks/reference_images.py): images whose labels the new span cannot change, so a
candidate that learned exchanged or wrong labels falls there class by class, whatever its own
eval split says. It fails closed: a served version whose reference images are missing or
damaged blocks the push, saying why (`--max-class-drop 1` checks nothing)."""

from __future__ import annotations

import json
import os

from absl import logging
from tfx.components.evaluator import constants as evaluator_constants
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.artifact import Artifact
from tfx.utils import io_utils, path_utils

from components.checks import model_scoring, reference_images
from components.contract import REFERENCE_CHECK_FILE

# On a blessing the reference check took away: the first class that fell, or why the check
# could not run, in words.
CLASS_REGRESSION_KEY = "class_regression"


def check_reference_classes(input_dict, output_dict, max_drop: float) -> None:
    """Scores the candidate and the baseline on the baseline's reference images and writes
    the per-class result into the evaluation (REFERENCE_CHECK_FILE); a class that falls by
    more than `max_drop`, or a baseline without readable reference images (or a `logits`
    function to score them with), turns a blessing into none, named in the blessing's
    `class_regression` property. A margin of 1 or more checks nothing."""
    get = artifact_utils.get_single_instance
    evaluation = get(output_dict[standard_component_specs.EVALUATION_KEY])
    blessing = get(output_dict[standard_component_specs.BLESSING_KEY])
    report = os.path.join(evaluation.uri, REFERENCE_CHECK_FILE)
    if max_drop >= 1.0:
        why = "--max-class-drop 1 (no class can fall further)"
        io_utils.write_string_file(report, json.dumps({"not_checked": why}))
        return
    baseline_dir, candidate_dir = (
        path_utils.serving_model_dir(get(input_dict[key]).uri)
        for key in (standard_component_specs.BASELINE_MODEL_KEY, standard_component_specs.MODEL_KEY)
    )
    try:
        found = _score(baseline_dir, candidate_dir, max_drop)
    except ValueError as why:  # an older or damaged served version: nothing judged, not pushed
        problem = (
            f"the served version's reference images were not checked ({why}); nothing pushed "
            "(--max-class-drop 1 pushes without the check)"
        )
        io_utils.write_string_file(
            report, json.dumps({"not_checked": str(why), "problems": [problem]})
        )
        logging.warning("Reference classes not checked: %s", why)
        _take_blessing_away(blessing, problem)
        return
    io_utils.write_string_file(report, found.to_json())
    problems = found.problems()
    logging.info("Reference classes: %s", "; ".join(problems) or "no class falls")
    if problems:
        _take_blessing_away(blessing, problems[0])


def _score(baseline_dir: str, candidate_dir: str, max_drop: float) -> reference_images.ClassCheck:
    path = os.path.join(baseline_dir, reference_images.REFERENCE_FILE)
    if not fileio.exists(path):
        raise ValueError("the served version keeps no reference images (pushed before them)")
    with fileio.open(path, "rb") as handle:
        reference = reference_images.from_bytes(handle.read(), path)
    return reference_images.check(
        model_scoring.probabilities(baseline_dir, reference.images),
        model_scoring.probabilities(candidate_dir, reference.images),
        reference.labels,
        max_drop,
    )


def _take_blessing_away(blessing: Artifact, reason: str) -> None:
    """A blessing (if TFMA gave one) becomes none, with `reason` on the artifact."""
    blessing.set_string_custom_property(CLASS_REGRESSION_KEY, reason)
    blessed = os.path.join(blessing.uri, evaluator_constants.BLESSED_FILE_NAME)
    if not fileio.exists(blessed):
        return
    fileio.remove(blessed)
    io_utils.write_string_file(
        os.path.join(blessing.uri, evaluator_constants.NOT_BLESSED_FILE_NAME), ""
    )
    blessing.set_int_custom_property(
        evaluator_constants.ARTIFACT_PROPERTY_BLESSED_KEY, evaluator_constants.NOT_BLESSED_VALUE
    )
