"""ServedModelBaseline, and the Evaluator that accepts its (possibly empty) output.

The regression baseline is the model currently served, read from the serving
directory the pusher writes. Unlike a latest-blessed-model Resolver, this is an
ordinary container step, so every orchestrator runs it, including the open-source
Kubeflow Pipelines backend, which has no resolver executors.
"""

from tfx import types
from tfx.components import Evaluator
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts

from components.served_model_baseline.executor import EvaluatorExecutor, Executor
from components.served_model_baseline.spec import ServedModelBaselineSpec


class ServedModelBaseline(base_component.BaseComponent):
    """Outputs the newest served version `<serving_model_dir>/<N>/` as a Model: the
    Trainer's `base_model` (warm start) and the Evaluator's baseline.

    It takes the run's examples as input so that it runs once per data set, before
    training: a cached rerun on the same data reuses the baseline it was first judged
    against, and new data always sees the model served now.
    """

    SPEC_CLASS = ServedModelBaselineSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, serving_model_dir: str):
        super().__init__(
            spec=ServedModelBaselineSpec(
                examples=examples,
                serving_model_dir=serving_model_dir,
                baseline_model=types.Channel(type=standard_artifacts.Model),
            )
        )


class ServedBaselineEvaluator(Evaluator):
    """TFX's Evaluator; an empty baseline artifact means 'no baseline'."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(EvaluatorExecutor)
