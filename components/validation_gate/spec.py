"""Component spec of DataValidationGate."""

from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec


class DataValidationGateSpec(ComponentSpec):
    PARAMETERS = {}
    INPUTS = {
        "statistics": ChannelParameter(type=standard_artifacts.ExampleStatistics),
        "anomalies": ChannelParameter(type=standard_artifacts.ExampleAnomalies),
    }
    OUTPUTS = {}
