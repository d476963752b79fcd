"""A night with nothing new, in the Trainer: when the ExampleGen marked its Examples
`no_new_span`, the Trainer trains nothing and passes the night on (the Evaluator blesses
nothing, the Pusher pushes nothing), so the run ends successful on every orchestrator.

The step still leaves a file in each output artifact, saying why it is empty: object stores
and KFP's launcher handle an artifact with no object in it unevenly."""

from __future__ import annotations

import os
from typing import Any

from absl import logging
from tfx import types
from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.components.trainer.component import Trainer
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs
from tfx.utils import io_utils

from components.contract import NO_NEW_SPAN_PROPERTY, NO_NEW_SPAN_REASON_PROPERTY

NOTHING_TRAINED_FILE = "NOTHING_TRAINED"


def nothing_new(input_dict: dict[str, list[types.Artifact]]) -> str | None:
    """Why there is nothing to train (the ExampleGen's reason), or None."""
    examples = input_dict.get(standard_component_specs.EXAMPLES_KEY) or []
    if examples and examples[0].get_int_custom_property(NO_NEW_SPAN_PROPERTY):
        return examples[0].get_string_custom_property(NO_NEW_SPAN_REASON_PROPERTY) or "no new span"
    return None


def pass_through(output_dict: dict[str, list[types.Artifact]], reason: str) -> None:
    """Marks every output artifact as holding nothing, and why."""
    for artifacts in output_dict.values():
        for artifact in artifacts:
            io_utils.write_string_file(os.path.join(artifact.uri, NOTHING_TRAINED_FILE), reason)
            artifact.set_int_custom_property(NO_NEW_SPAN_PROPERTY, 1)
    logging.info("Nothing trained: %s", reason)


class PassThrough:
    """Mixed in before a Trainer executor: a night with nothing new trains nothing."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        reason = nothing_new(input_dict)
        if reason is not None:
            return pass_through(output_dict, reason)
        return super().Do(input_dict, output_dict, exec_properties)


class GenericExecutor(PassThrough, tfx_trainer_executor.GenericExecutor):
    """TFX's Trainer executor, passing a night with nothing new through."""


class PassThroughTrainer(Trainer):
    """TFX's Trainer, with the executor above."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(GenericExecutor)
