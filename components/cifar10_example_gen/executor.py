"""Executor of Cifar10ExampleGen: provides the Beam source to TFX's ExampleGen machinery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor

from components.cifar10_example_gen import sources
from components.cifar10_example_gen.spec import EVAL_FRACTION_KEY, SOURCE_URI_KEY
from components.contract import IMAGE_KEY, LABEL_KEY, RECORD_ID_KEY


def to_example(record: sources.Record) -> tf.train.Example:
    feature = tf.train.Feature
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                IMAGE_KEY: feature(bytes_list=tf.train.BytesList(value=[record.image])),
                LABEL_KEY: feature(int64_list=tf.train.Int64List(value=[record.label])),
                RECORD_ID_KEY: feature(
                    bytes_list=tf.train.BytesList(value=[record.record_id.encode()])
                ),
            }
        )
    )


def _shard_examples(
    shard: sources.Shard, split: str, has_test_split: bool, eval_fraction: float
) -> Iterator[tf.train.Example]:
    for record_split, record in sources.split_records(shard, has_test_split, eval_fraction):
        if record_split == split:
            yield to_example(record)


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def ReadCifar10Split(
    pipeline: beam.Pipeline, exec_properties: dict[str, Any], split_pattern: str
) -> beam.PCollection:
    """All examples of one output split ('train' or 'eval'), one Beam element per shard read."""
    shards = sources.list_shards(exec_properties[SOURCE_URI_KEY])
    has_test = any(s.split == sources.TEST for s in shards)
    return (
        pipeline
        | "Shards" >> beam.Create(shards)
        | "Distribute" >> beam.Reshuffle()
        | "Read"
        >> beam.FlatMap(
            _shard_examples, split_pattern, has_test, float(exec_properties[EVAL_FRACTION_KEY])
        )
    )


class Executor(BaseExampleGenExecutor):
    """Checks the whole source before Beam starts, so bad input fails with one clear
    `SourceError` and no output is written."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return ReadCifar10Split

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        # The same one-pass check the CLI runs before importing TFX; here for the runners
        # (Vertex, Kubeflow) that start the executor without the CLI.
        sources.count_records(exec_properties[SOURCE_URI_KEY])
        super().Do(input_dict, output_dict, exec_properties)
