"""Component spec of Cifar10ExampleGen."""

from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

SOURCE_URI_KEY = "source_uri"
SOURCE_FINGERPRINT_KEY = "source_fingerprint"
EVAL_FRACTION_KEY = "eval_fraction"
# With span folders under the source: which span (-1: the newest), how many of the newest up
# to it (a rolling window), and 1 to train even if the newest span was already served (the
# served state, an input, says what was served). Runtime parameters on Kubeflow
# and Vertex; the CLI passes resolved values for local runs.
SPAN_KEY = "span"
SPAN_WINDOW_KEY = "span_window"
SERVED_MODEL_KEY = "served_model"
FORCE_KEY = "force"
# The output splits, always both: the source's test batch or a carve of training data is `eval`.
SPLITS = ("train", "eval")


class Cifar10ExampleGenSpec(ComponentSpec):
    """Reads a CIFAR-10 source (archive, extracted folder or image folder).

    `source_fingerprint` changes whenever the source's files change, so that the
    metadata cache re-ingests changed data at an unchanged path.
    """

    PARAMETERS = {
        SOURCE_URI_KEY: ExecutionParameter(type=str),
        SOURCE_FINGERPRINT_KEY: ExecutionParameter(type=str),
        EVAL_FRACTION_KEY: ExecutionParameter(type=float),
        SPAN_KEY: ExecutionParameter(type=int),
        SPAN_WINDOW_KEY: ExecutionParameter(type=int),
        FORCE_KEY: ExecutionParameter(type=int),
        # Fixed train/eval splits, in the form the ExampleGen base executor expects.
        "input_config": ExecutionParameter(type=example_gen_pb2.Input),
        "output_config": ExecutionParameter(type=example_gen_pb2.Output),
        "output_data_format": ExecutionParameter(type=int),
        "output_file_format": ExecutionParameter(type=int),
    }
    # The ServedState step's output: the spans the served version was trained on (nothing
    # stale) and every published span's fingerprint (nothing changed under its number).
    INPUTS = {SERVED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True)}
    OUTPUTS = {"examples": ChannelParameter(type=standard_artifacts.Examples)}
