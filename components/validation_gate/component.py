"""DataValidationGate: fails the run, before training, when the data is bad."""

from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import BaseChannel

from components.validation_gate.executor import Executor
from components.validation_gate.spec import DataValidationGateSpec


class DataValidationGate(base_component.BaseComponent):
    """Raises DataValidationError listing every anomaly and failed check.

    Downstream components (the Trainer) are made to depend on it, so training
    never starts on data that failed validation.
    """

    SPEC_CLASS = DataValidationGateSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, statistics: BaseChannel, anomalies: BaseChannel):
        super().__init__(spec=DataValidationGateSpec(statistics=statistics, anomalies=anomalies))
