"""Component spec of DataValidationGate. Its output is TFX's ExampleAnomalies type (as TFX's
own DistributionValidator writes): comparison.json, the skew and drift comparisons with every
distance, threshold and verdict, and a copy of the served statistics it compared with. A
standard type, so every orchestrator, KFP's included, knows it."""

from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

ACCEPT_DRIFT_KEY = "accept_drift"
ACCEPT_LABELS_KEY = "accept_labels"
ACCEPT_DUPLICATES_KEY = "accept_duplicates"
SERVED_MODEL_KEY = "served_model"
EXAMPLES_KEY = "examples"


class DataValidationGateSpec(ComponentSpec):
    PARAMETERS = {
        # 1: drift beyond a threshold is recorded and the run goes on (--accept-drift).
        ACCEPT_DRIFT_KEY: ExecutionParameter(type=int),
        # 1: labels the served model disagrees with are recorded and the run goes on
        # (--accept-labels).
        ACCEPT_LABELS_KEY: ExecutionParameter(type=int, optional=True),
        # 1: more exact copies among the images than the limit are recorded and the run goes
        # on (--accept-duplicates).
        ACCEPT_DUPLICATES_KEY: ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        "statistics": ChannelParameter(type=standard_artifacts.ExampleStatistics),
        "anomalies": ChannelParameter(type=standard_artifacts.ExampleAnomalies),
        "schema": ChannelParameter(type=standard_artifacts.Schema),
        # The ServedState step's output: its training statistics are the drift baseline
        # (none wired or none kept: drift is not compared).
        SERVED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
        # The ExampleGen's output, for its no-new-span mark: a night with nothing new passes.
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {"comparison": ChannelParameter(type=standard_artifacts.ExampleAnomalies)}
