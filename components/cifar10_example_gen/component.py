"""Cifar10ExampleGen: the official CIFAR-10 releases (or an image folder) into TFRecords."""

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts

from components.cifar10_example_gen.executor import Executor
from components.cifar10_example_gen.spec import SPLITS, Cifar10ExampleGenSpec


class Cifar10ExampleGen(base_beam_component.BaseBeamComponent):
    """Emits gzipped TFRecords of tf.Examples in splits `train` and `eval`.

    Features: `image_raw` (3,072 bytes, uint8 32x32x3 HWC), `label` (int64 0..9)
    and `record_id` (the source file and position, stable across runs). The eval
    split is the source's test batch when it has one, otherwise a deterministic,
    class-balanced `eval_fraction` of the training records.
    """

    SPEC_CLASS = Cifar10ExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        source_uri: str,
        source_fingerprint: str,
        eval_fraction: float = 0.1,
        span=-1,
        span_window=1,
        served_model: types.BaseChannel | None = None,
        force=0,
    ):
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        input_config = example_gen_pb2.Input(
            splits=[example_gen_pb2.Input.Split(name=name, pattern=name) for name in SPLITS]
        )
        spec = Cifar10ExampleGenSpec(
            source_uri=source_uri,
            source_fingerprint=source_fingerprint,
            eval_fraction=eval_fraction,
            span=span,
            span_window=span_window,
            served_model=served_model,
            force=force,
            input_config=input_config,
            output_config=example_gen_pb2.Output(),
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            examples=types.Channel(type=standard_artifacts.Examples),
        )
        super().__init__(spec=spec)
