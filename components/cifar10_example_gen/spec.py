"""Component spec of Cifar10ExampleGen."""

from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

SOURCE_URI_KEY = "source_uri"
SOURCE_FINGERPRINT_KEY = "source_fingerprint"
EVAL_FRACTION_KEY = "eval_fraction"
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
        # Fixed train/eval splits, in the form the ExampleGen base executor expects.
        "input_config": ExecutionParameter(type=example_gen_pb2.Input),
        "output_config": ExecutionParameter(type=example_gen_pb2.Output),
        "output_data_format": ExecutionParameter(type=int),
        "output_file_format": ExecutionParameter(type=int),
    }
    INPUTS = {}
    OUTPUTS = {"examples": ChannelParameter(type=standard_artifacts.Examples)}
