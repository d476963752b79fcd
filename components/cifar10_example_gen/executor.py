"""Executor of Cifar10ExampleGen: reads the source once, writes both splits."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import tensorflow as tf
from tfx import types
from tfx.components.example_gen import write_split
from tfx.components.util import examples_utils
from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types.standard_component_specs import EXAMPLES_KEY

from components.cifar10_example_gen import sources
from components.cifar10_example_gen.spec import EVAL_FRACTION_KEY, SOURCE_URI_KEY, SPLITS
from components.cifar10_example_gen.stored_gzip import WriteStoredGzipTFRecords
from components.contract import IMAGE_KEY, IMAGE_SUMMARY_FEATURES, LABEL_KEY, RECORD_ID_KEY

# TFX's own ExampleGen file names: data_tfrecord-00000-of-00001.gz
FILE_PREFIX = "data_tfrecord"


def to_example(record: sources.Record) -> tf.train.Example:
    feature = tf.train.Feature
    features = {
        IMAGE_KEY: feature(bytes_list=tf.train.BytesList(value=[record.image])),
        LABEL_KEY: feature(int64_list=tf.train.Int64List(value=[record.label])),
        RECORD_ID_KEY: feature(bytes_list=tf.train.BytesList(value=[record.record_id.encode()])),
    }
    for name, value in zip(IMAGE_SUMMARY_FEATURES, record.summary):
        features[name] = feature(float_list=tf.train.FloatList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=features))


def _tagged_examples(
    group: Sequence[sources.Shard], has_test_split: bool, eval_fraction: float
) -> Iterator[beam.pvalue.TaggedOutput]:
    for split, record in sources.split_group(group, has_test_split, eval_fraction):
        yield beam.pvalue.TaggedOutput(split, to_example(record))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
def ReadCifar10Splits(
    pipeline: beam.Pipeline, source: str, eval_fraction: float
) -> dict[str, beam.PCollection]:
    """{'train': examples, 'eval': examples} from one read of the source: one Beam element
    per `sources.read_groups` unit. Every record is checked first, so bad input raises
    `SourceError` while the pipeline is built, before Beam runs or writes anything."""
    shards, _ = sources.inspect_source(source)
    has_test = any(s.split == sources.TEST for s in shards)
    tagged = (
        pipeline
        | "Groups" >> beam.Create(sources.read_groups(shards))
        | "Distribute" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(_tagged_examples, has_test, eval_fraction).with_outputs(*SPLITS)
    )
    return {split: tagged[split] for split in SPLITS}


class Executor(BaseBeamExecutor):
    """Writes what TFX's ExampleGen writes (the `Examples` artifact, one folder of gzipped
    TFRecords per split), from one pass over the source instead of one per split, in
    source order (no shuffle: the Trainer shuffles) and without compressing pixels."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
        with self._make_beam_pipeline() as pipeline:
            splits = pipeline | "ReadCifar10" >> ReadCifar10Splits(
                exec_properties[SOURCE_URI_KEY], float(exec_properties[EVAL_FRACTION_KEY])
            )
            for split, split_examples in splits.items():
                prefix = os.path.join(artifact_utils.get_split_uri([examples], split), FILE_PREFIX)
                _ = (
                    split_examples
                    | f"Serialize[{split}]" >> beam.Map(lambda e: e.SerializeToString())
                    | f"Write[{split}]" >> WriteStoredGzipTFRecords(prefix)
                )
        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(
            examples, write_split.to_file_format_str(example_gen_pb2.FORMAT_TFRECORDS_GZIP)
        )
