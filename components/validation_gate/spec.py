"""Component spec of DataValidationGate. Its output is TFX's ExampleAnomalies type (as TFX's
own DistributionValidator writes): comparison.json, the skew and drift comparisons with every
distance, threshold and verdict, and a copy of the served statistics it compared with. A
standard type, so every orchestrator, KFP's included, knows it."""

from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

SERVING_MODEL_DIR_KEY = "serving_model_dir"
ACCEPT_DRIFT_KEY = "accept_drift"


class DataValidationGateSpec(ComponentSpec):
    PARAMETERS = {
        # The folder of numbered versions that the Pusher writes: the newest one's training
        # statistics are the drift baseline ('' compares with nothing).
        SERVING_MODEL_DIR_KEY: ExecutionParameter(type=str),
        # 1: drift beyond a threshold is recorded and the run goes on (--accept-drift).
        ACCEPT_DRIFT_KEY: ExecutionParameter(type=int),
    }
    INPUTS = {
        "statistics": ChannelParameter(type=standard_artifacts.ExampleStatistics),
        "anomalies": ChannelParameter(type=standard_artifacts.ExampleAnomalies),
        "schema": ChannelParameter(type=standard_artifacts.Schema),
    }
    OUTPUTS = {"comparison": ChannelParameter(type=standard_artifacts.ExampleAnomalies)}
