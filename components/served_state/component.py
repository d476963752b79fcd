"""ServedState, the run's first step, and the Evaluator that takes its output as baseline.

The served state is read by an ordinary container step, not a Resolver, so every orchestrator
runs it, the open-source Kubeflow Pipelines backend (which has no resolver executors) included.
"""

from tfx import types
from tfx.components import Evaluator
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from components.checks.reference_images import MAX_CLASS_DROP
from components.served_state.executor import EvaluatorExecutor, Executor
from components.served_state.spec import (
    MAX_CLASS_DROP_KEY,
    NIGHT_KEY,
    READ_KEY,
    SERVED_MODEL_KEY,
    SERVING_MODEL_DIR_KEY,
    ServedBaselineEvaluatorSpec,
    ServedStateSpec,
)


class ServedState(base_component.BaseComponent):
    """Reads `<serving_model_dir>` once: the newest complete version, its spans and training
    statistics, as one Model artifact for the ExampleGen (nothing stale), the gate (drift),
    the Trainer (warm start), the Evaluator (baseline) and the Pusher (the version the run
    judged against). Compiled with caching off; locally cached on `read_key`."""

    SPEC_CLASS = ServedStateSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, serving_model_dir: str, read_key: str = "", night_key: str | None = None):
        keys = (
            {READ_KEY: read_key}
            if night_key is None
            else {READ_KEY: read_key, NIGHT_KEY: night_key}
        )
        super().__init__(
            spec=ServedStateSpec(
                **{SERVING_MODEL_DIR_KEY: serving_model_dir, **keys},
                **{SERVED_MODEL_KEY: types.Channel(type=standard_artifacts.Model)},
            )
        )


class ServedBaselineEvaluator(Evaluator):
    """TFX's Evaluator; an empty baseline artifact means 'no baseline'. It also scores the
    candidate and the baseline on the served version's reference images, class by class: a
    class falling by more than `max_class_drop` there blocks the push."""

    SPEC_CLASS = ServedBaselineEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(EvaluatorExecutor)

    def __init__(
        self,
        examples: types.BaseChannel,
        model: types.BaseChannel,
        baseline_model: types.BaseChannel,
        eval_config,
        example_splits: list[str],
        max_class_drop: float = MAX_CLASS_DROP,
    ):
        # TFX's Evaluator builds its own spec class; this one adds a parameter to it.
        base_component.BaseComponent.__init__(
            self,
            spec=ServedBaselineEvaluatorSpec(
                examples=examples,
                model=model,
                baseline_model=baseline_model,
                eval_config=eval_config,
                example_splits=json_utils.dumps(example_splits),
                fairness_indicator_thresholds=json_utils.dumps(None),
                evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
                blessing=types.Channel(type=standard_artifacts.ModelBlessing),
                **{MAX_CLASS_DROP_KEY: float(max_class_drop)},
            ),
        )
