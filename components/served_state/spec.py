"""Component spec of ServedState."""

from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.types.standard_component_specs import EvaluatorSpec

SERVING_MODEL_DIR_KEY = "serving_model_dir"
# What the local runner read from the serving folder just before the run (the served
# version and its record, hashed): the step's cache key there, so an unchanged serving
# folder reuses the earlier read and a changed one is read again. Compiled files leave it
# empty and run the step with caching off (pipeline/kfp_ir.py).
READ_KEY = "read_key"
SERVED_MODEL_KEY = "served_model"
# A compiled run's UUID ({{$.pipeline_job_uuid}}): the steps keep the night's facts under it
# for the exit handler (components/night_report/facts.py). Unset locally: nothing is kept.
NIGHT_KEY = "night_key"


class ServedStateSpec(ComponentSpec):
    PARAMETERS = {
        SERVING_MODEL_DIR_KEY: ExecutionParameter(type=str),
        READ_KEY: ExecutionParameter(type=str, optional=True),
        NIGHT_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {}
    OUTPUTS = {SERVED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


# How far a class's accuracy on the served version's reference images may fall
# (components/checks/reference_images.py).
MAX_CLASS_DROP_KEY = "max_class_drop"


class ServedBaselineEvaluatorSpec(EvaluatorSpec):
    PARAMETERS = {
        **EvaluatorSpec.PARAMETERS,
        MAX_CLASS_DROP_KEY: ExecutionParameter(type=float, optional=True),
    }
