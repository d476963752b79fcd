"""AtomicPusher: pushes a blessed model in TF Serving layout, one complete version at a time."""

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.atomic_pusher.executor import BASE_DIRECTORY_KEY, KEEP_VERSIONS_KEY, Executor
from components.contract import DEFAULT_KEEP_VERSIONS


class AtomicPusherSpec(ComponentSpec):
    PARAMETERS = {
        BASE_DIRECTORY_KEY: ExecutionParameter(type=str),
        # After a push, the oldest versions beyond this many go (retention.py; 0: none).
        KEEP_VERSIONS_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
        # The training data's statistics, kept in each version for the next run's drift check.
        "statistics": ChannelParameter(type=standard_artifacts.ExampleStatistics, optional=True),
        # The spans it was trained on (with fingerprints), kept for the nothing-stale rule.
        "examples": ChannelParameter(type=standard_artifacts.Examples, optional=True),
        # The served state the run read at its start: the push stops (ServedVersionChanged)
        # if another version is served by then (the run was judged against a stale one).
        # Not wired: not checked.
        "served_model": ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {"pushed_model": ChannelParameter(type=standard_artifacts.PushedModel)}


class AtomicPusher(base_component.BaseComponent):
    """Writes `<base_directory>/<version>/` (the layout TF Serving and Vertex AI's
    prebuilt TensorFlow containers load) only for a blessed model; the oldest beyond
    `keep_versions` go."""

    SPEC_CLASS = AtomicPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        base_directory: str,
        statistics: types.BaseChannel | None = None,
        examples: types.BaseChannel | None = None,
        served_model: types.BaseChannel | None = None,
        keep_versions: int = DEFAULT_KEEP_VERSIONS,
        **parameters,
    ):
        """`parameters`: a subclass's own execution parameters (its SPEC_CLASS's)."""
        super().__init__(
            spec=self.SPEC_CLASS(
                model=model,
                model_blessing=model_blessing,
                statistics=statistics,
                examples=examples,
                served_model=served_model,
                base_directory=base_directory,
                keep_versions=keep_versions,
                pushed_model=types.Channel(type=standard_artifacts.PushedModel),
                **parameters,
            )
        )
