"""Component spec of ServedModelBaseline."""

from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

SERVING_MODEL_DIR_KEY = "serving_model_dir"
EXAMPLES_KEY = "examples"
BASELINE_KEY = "baseline_model"


class ServedModelBaselineSpec(ComponentSpec):
    PARAMETERS = {SERVING_MODEL_DIR_KEY: ExecutionParameter(type=str)}
    INPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}
    OUTPUTS = {BASELINE_KEY: ChannelParameter(type=standard_artifacts.Model)}
