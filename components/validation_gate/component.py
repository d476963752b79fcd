"""DataValidationGate: fails the run, before training, when the data is bad, skewed between
its splits, or drifted from what the served model was trained on."""

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import BaseChannel, standard_artifacts

from components.validation_gate.executor import Executor
from components.validation_gate.spec import (
    ACCEPT_DRIFT_KEY,
    ACCEPT_DUPLICATES_KEY,
    ACCEPT_LABELS_KEY,
    DataValidationGateSpec,
)


class DataValidationGate(base_component.BaseComponent):
    """Raises DataValidationError listing every anomaly, failed check, skewed feature and
    (unless drift is accepted) drifted feature.

    Downstream components (the Trainer) are made to depend on it, so training
    never starts on data that failed validation.
    """

    SPEC_CLASS = DataValidationGateSpec
    # A Beam executor: the served model scores a sample of the records in a Beam step.
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        statistics: BaseChannel,
        anomalies: BaseChannel,
        schema: BaseChannel,
        served_model: BaseChannel | None = None,
        examples: BaseChannel | None = None,
        accept_drift: bool = False,
        accept_labels: bool = False,
        accept_duplicates: bool = False,
    ):
        super().__init__(
            spec=DataValidationGateSpec(
                statistics=statistics,
                anomalies=anomalies,
                schema=schema,
                comparison=types.Channel(type=standard_artifacts.ExampleAnomalies),
                served_model=served_model,
                examples=examples,
                **{
                    ACCEPT_DRIFT_KEY: int(accept_drift),
                    ACCEPT_LABELS_KEY: int(accept_labels),
                    ACCEPT_DUPLICATES_KEY: int(accept_duplicates),
                },
            )
        )
