"""AtomicPusher: pushes a blessed model in TF Serving layout, one complete version at a time."""

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.atomic_pusher.executor import BASE_DIRECTORY_KEY, EXPECTED_SERVED_KEY, Executor


class AtomicPusherSpec(ComponentSpec):
    PARAMETERS = {
        BASE_DIRECTORY_KEY: ExecutionParameter(type=str),
        # The version the run read at its start ("" when nothing was served); the push fails
        # with ServedVersionChanged if another is served by then. Absent: not checked.
        EXPECTED_SERVED_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
        # The training data's statistics, kept in each version for the next run's drift check.
        "statistics": ChannelParameter(type=standard_artifacts.ExampleStatistics, optional=True),
        # The spans it was trained on (with fingerprints), kept for the nothing-stale rule.
        "examples": ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {"pushed_model": ChannelParameter(type=standard_artifacts.PushedModel)}


class AtomicPusher(base_component.BaseComponent):
    """Writes `<base_directory>/<version>/` (the layout TF Serving and Vertex AI's
    prebuilt TensorFlow containers load) only for a blessed model. Older versions stay.
    `expected_served_version`: see AtomicPusherSpec (None: not checked)."""

    SPEC_CLASS = AtomicPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        base_directory: str,
        statistics: types.BaseChannel | None = None,
        examples: types.BaseChannel | None = None,
        expected_served_version: str | None = None,
    ):
        super().__init__(
            spec=AtomicPusherSpec(
                model=model,
                model_blessing=model_blessing,
                statistics=statistics,
                examples=examples,
                base_directory=base_directory,
                expected_served_version=expected_served_version,
                pushed_model=types.Channel(type=standard_artifacts.PushedModel),
            )
        )
