"""Warm start: the Trainer starts from the served model's weights (TFX Trainer's `base_model`,
fed by the ServedState step's copy of the version served when the run started) and fine-tunes
with its own shorter schedule, or trains from scratch and says why.

The served SavedModel keeps the network's variables as `network_variables` (export.py), so
they are read straight from its checkpoint, by position, after every count and shape has
been checked against the network this run builds: a different recipe falls back.
"""

from __future__ import annotations

import dataclasses
import json
import os

from components.contract import SAVED_MODEL_FILE, WARM_START_FILE
from components.storage.served_versions import load_served_state
from components.trainer.config import TrainingConfig
from components.trainer.keras import keras, tf

# Fine-tuning defaults, for what a warm-started run does unless --epochs / --learning-rate
# say otherwise: a share of the recipe's epochs (at least one) at a share of its peak
# learning rate (docs/continuous-training.md has the 3-seed measurement).
EPOCH_SHARE = 0.6
LEARNING_RATE_SHARE = 0.5
_KEY = "network_variables/{}/.ATTRIBUTES/VARIABLE_VALUE"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a warm start comes from: the SavedModel copy, the served version it is, and the
    spans (number -> fingerprint) that version was trained on, its own ancestors' included."""

    saved_model: str
    served_version_dir: str
    spans: dict[int, str] = dataclasses.field(default_factory=dict)


def served_source(base_model: str | None) -> tuple[Source | None, str]:
    """(the served model to start from, or None; why not, when None)."""
    if not base_model or not tf.io.gfile.exists(os.path.join(base_model, SAVED_MODEL_FILE)):
        return None, "no served model to start from"
    state = load_served_state(os.path.dirname(base_model.rstrip("/")))
    return Source(base_model, state.version_dir or base_model, dict(state.spans)), ""


def record_lineage(model_dir: str, source: Source) -> None:
    """Beside the new model (`<model uri>/`, the parent of its Format-Serving folder): the
    served version it started from and that version's spans, which the Pusher adds to the
    spans the new version records (a warm-started model has seen its ancestors' data too)."""
    path = os.path.join(os.path.dirname(model_dir.rstrip("/")), WARM_START_FILE)
    with tf.io.gfile.GFile(path, "w") as handle:
        json.dump({"version_dir": source.served_version_dir, "spans": source.spans}, handle)


def _served_values(source: Source) -> list:
    reader = tf.train.load_checkpoint(os.path.join(source.saved_model, "variables", "variables"))
    shapes = reader.get_variable_to_shape_map()
    count = 0
    while _KEY.format(count) in shapes:
        count += 1
    return [reader.get_tensor(_KEY.format(i)) for i in range(count)]


def mismatch(network: keras.Model, values: list) -> str:
    """Why the served weights do not fit `network` ('' when they do)."""
    variables = network.variables
    if len(values) != len(variables):
        return f"the served network has {len(values)} variables, this one {len(variables)}"
    for variable, value in zip(variables, values):
        if tuple(variable.shape) != tuple(value.shape):
            return (
                f"the served network differs: {variable.name} is {tuple(variable.shape)} here, "
                f"{tuple(value.shape)} there"
            )
    return ""


def fits(build, source: Source) -> str:
    """Whether the served weights fit the network `build()` makes ('' when they do), checked
    on a throwaway copy before the run is planned around a warm start."""
    return mismatch(build(), _served_values(source))


def load(network: keras.Model, source: Source) -> None:
    """Assigns the served weights to `network` (built under the strategy's scope)."""
    values = _served_values(source)
    problem = mismatch(network, values)
    if problem:
        raise ValueError(problem)
    for variable, value in zip(network.variables, values):
        variable.assign(tf.cast(value, variable.dtype))


def fine_tuning(config: TrainingConfig) -> TrainingConfig:
    """The warm-started run's config: fewer epochs at a lower peak learning rate, unless the
    user set either."""
    from components.trainer import model

    recipe = model.RECIPES[config.model]
    return dataclasses.replace(
        config,
        epochs=config.epochs or max(1, round(recipe.epochs * EPOCH_SHARE)),
        learning_rate=config.learning_rate or recipe.learning_rate * LEARNING_RATE_SHARE,
    )
