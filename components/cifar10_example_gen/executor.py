"""Executor of Cifar10ExampleGen: reads the source once, writes both splits."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import tensorflow as tf
from absl import logging
from apache_beam.io.filesystems import FileSystems
from tfx import types
from tfx.components.example_gen import write_split
from tfx.components.util import examples_utils
from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types.standard_component_specs import EXAMPLES_KEY
from tfx.utils import io_utils

from components.cifar10_example_gen import sources, spans
from components.cifar10_example_gen.seen_train import (
    TRAIN_SEEN,
    TRAIN_SEEN_BY_SPAN,
    CountSeenTrain,
    new_spans,
    read_index,
)
from components.cifar10_example_gen.spec import (
    EVAL_FRACTION_KEY,
    FORCE_KEY,
    SERVED_MODEL_KEY,
    SOURCE_URI_KEY,
    SPAN_KEY,
    SPAN_WINDOW_KEY,
    SPLITS,
)
from components.cifar10_example_gen.stored_gzip import WriteStoredGzipTFRecords
from components.contract import (
    EVAL_DROPPED_FILE,
    IMAGE_KEY,
    IMAGE_SUMMARY_FEATURES,
    LABEL_KEY,
    NO_NEW_SPAN_PROPERTY,
    NO_NEW_SPAN_REASON_PROPERTY,
    RECORD_ID_KEY,
    SERVED_IMAGES_FILE,
    SERVED_SPANS_FILE,
    image_digest,
    pack_digests,
)
from components.storage import night_facts
from components.storage.served_versions import ServedState, load_served_state, served_images_file

# TFX's own ExampleGen file names: data_tfrecord-00000-of-00001.gz
FILE_PREFIX = "data_tfrecord"
# ReadCifar10Splits' third output: (span, the image digests of its train records), one
# element per unit read (a Beam element per record cost 1 s of the 50,000).
TRAIN_SPANS = "train_spans"


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


def _varint(value: int) -> bytes:
    out = b""
    while value > 0x7F:
        out, value = out + bytes([value & 0x7F | 0x80]), value >> 7
    return out + bytes([value])


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2): tag, varint length, payload."""
    return bytes([number << 3 | 2]) + _varint(len(payload)) + payload


# tf.train.Feature's oneof: bytes_list = 1, float_list = 2, int64_list = 3; each list keeps
# its values in field 1 (numbers packed). Example.features = 1 > Features.feature = 1, a
# map whose entries hold key = 1 and value = 2.
_BYTES_LIST, _FLOAT_LIST, _INT64_LIST = 1, 2, 3


@functools.lru_cache(maxsize=256)
def _entry_head(name: str, kind: int, size: int) -> bytes:
    """The wire bytes of the map entry `name` -> a Feature list of kind `kind` holding one
    value of `size` bytes, up to that value: what comes before it depends only on sizes."""
    entry = _field(1, name.encode()) + _field(2, _field(kind, _field(1, bytes(size))))
    return _field(1, entry)[:-size]


def serialize(record: sources.Record) -> bytes:
    """`to_example(record).SerializeToString()`, as parsed (tests/test_example_gen.py),
    written as wire bytes from cached heads: 30 us a record less than building and
    serializing the proto (1.5 s of the 50,000), and the same bytes on every run (a
    protobuf map's wire order varies between processes)."""
    record_id, label = record.record_id.encode(), _varint(record.label)
    parts = [
        _entry_head(IMAGE_KEY, _BYTES_LIST, len(record.image)),
        record.image,
        _entry_head(LABEL_KEY, _INT64_LIST, len(label)),
        label,
        _entry_head(RECORD_ID_KEY, _BYTES_LIST, len(record_id)),
        record_id,
    ]
    floats = struct.pack(f"<{len(record.summary)}f", *record.summary)
    for index, name in enumerate(IMAGE_SUMMARY_FEATURES[: len(record.summary)]):
        parts += [_entry_head(name, _FLOAT_LIST, 4), floats[4 * index : 4 * index + 4]]
    body = b"".join(parts)
    return b"\x0a" + _varint(len(body)) + body  # Example.features: field 1, wire type 2


def _tagged_examples(
    unit: tuple[int, Sequence[sources.Shard], bool], eval_fraction: float
) -> Iterator[beam.pvalue.TaggedOutput]:
    span, group, has_test_split = unit
    train_digests = []
    for split, record in sources.split_group(group, has_test_split, eval_fraction):
        if span:  # record ids stay unique across the spans of a window
            record = dataclasses.replace(record, record_id=f"span-{span}/{record.record_id}")
        digest = image_digest(record.image)
        yield beam.pvalue.TaggedOutput(split, (digest, serialize(record)))
        if split == SPLITS[0]:
            train_digests.append(digest)
    yield beam.pvalue.TaggedOutput(TRAIN_SPANS, (span, train_digests))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
def ReadCifar10Splits(
    pipeline: beam.Pipeline, source: str | dict[int, str], eval_fraction: float
) -> dict[str, beam.PCollection]:
    """{'train': (image digest, serialized tf.Example) pairs, 'eval': ..., TRAIN_SPANS: (span,
    the digests of its train records) per unit read} from one read of each source ({span:
    source}, or one plain source as span 0): one Beam element per
    `sources.read_groups` unit. Every record is checked first, so bad input raises
    `SourceError` while the pipeline is built, before Beam runs or writes anything. Each span
    has its own eval split: its test batch, or its own class-balanced carve."""
    by_span = {0: source} if isinstance(source, str) else source
    units = []
    for span, path in sorted(by_span.items()):
        shards, _ = sources.inspect_source(path)
        has_test = any(s.split == sources.TEST for s in shards)
        units += [(span, group, has_test) for group in sources.read_groups(shards)]
    tagged = (
        pipeline
        | "Groups" >> beam.Create(units)
        | "Distribute" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(_tagged_examples, eval_fraction).with_outputs(*SPLITS, TRAIN_SPANS)
    )
    return {name: tagged[name] for name in (*SPLITS, TRAIN_SPANS)}


# Eval images dropped (DropEvalLeaks), by why: a copy of one of this run's train images
# (it would inflate the accuracy gate), or an image the served model was trained on (it
# would inflate the regression baseline).
COPIES_OF_TRAIN, SEEN_BY_SERVED = "copies_of_train", "seen_by_served"


def _kept_eval(pair: tuple[bytes, bytes], train: set, served: frozenset):
    digest, serialized = pair
    if digest in train:
        yield beam.pvalue.TaggedOutput(COPIES_OF_TRAIN, digest)
    elif digest in served:
        yield beam.pvalue.TaggedOutput(SEEN_BY_SERVED, digest)
    else:
        yield serialized


def _counts(_, copies: int, seen: int) -> dict[str, int]:
    return {COPIES_OF_TRAIN: copies, SEEN_BY_SERVED: seen}


@beam.ptransform_fn
def DropEvalLeaks(
    splits: dict[str, beam.PCollection], served_index: str | None
) -> dict[str, beam.PCollection]:
    """From ReadCifar10Splits' pairs: {'train': serialized, 'eval': serialized without the
    images among the train split's or in the served version's index (SERVED_IMAGES_FILE at
    `served_index`; None: none), 'index': the train split's index (one bytes value),
    'dropped': {COPIES_OF_TRAIN: n, SEEN_BY_SERVED: n} (one dict)}. Both sets are side
    inputs: every record is judged inside Beam."""
    pipeline = splits["train"].pipeline
    train_digests = (
        splits["train"]
        | "TrainDigests" >> beam.Keys()
        | "TrainSet" >> beam.CombineGlobally(beam.combiners.ToSetCombineFn())
    )
    served = (
        pipeline
        | "ServedIndexPath" >> beam.Create([served_index])
        | "ServedIndex" >> beam.Map(read_index)
    )
    judged = splits["eval"] | "DropLeaks" >> beam.FlatMap(
        _kept_eval, beam.pvalue.AsSingleton(train_digests), beam.pvalue.AsSingleton(served)
    ).with_outputs(COPIES_OF_TRAIN, SEEN_BY_SERVED, main="eval")
    copies, seen = (
        judged[why] | f"Count[{why}]" >> beam.combiners.Count.Globally()
        for why in (COPIES_OF_TRAIN, SEEN_BY_SERVED)
    )
    counts = beam.Map(_counts, beam.pvalue.AsSingleton(copies), beam.pvalue.AsSingleton(seen))
    return {
        "train": splits["train"] | "TrainRecords" >> beam.Values(),
        "eval": judged["eval"],
        "index": train_digests | "Index" >> beam.Map(pack_digests),
        "dropped": pipeline | "Dropped" >> beam.Create([None]) | "Counts" >> counts,
    }


def _write_file(data: bytes, path: str) -> None:
    with FileSystems.create(path) as handle:
        handle.write(data)


def _dropped_json(counts: dict[str, int], served: dict, seen_train: dict) -> bytes:
    """The record of what was dropped, with the new spans' train records the served version
    was trained on (seen_train.CountSeenTrain): the counts, and which served version's index
    was checked (`not_checked`: why none was, and `seen_by_served` and TRAIN_SEEN None then)."""
    record = {**counts, **seen_train, **served}
    if served["not_checked"]:
        record |= {SEEN_BY_SERVED: None, TRAIN_SEEN: None, TRAIN_SEEN_BY_SPAN: {}}
    return json.dumps(record, sort_keys=True).encode()


def _served_index(input_dict: dict[str, list[types.Artifact]]) -> tuple[str | None, dict]:
    """(the served version's training-image index, or None; {served_version, not_checked})."""
    served = input_dict.get(SERVED_MODEL_KEY) or []
    state = load_served_state(served[0].uri) if served else ServedState()
    if state.version is None:
        return None, {"served_version": None, "not_checked": "nothing served"}
    path = served_images_file(served[0].uri)
    why = "" if path else f"served version {state.version} has no index"
    return path, {"served_version": state.version, "not_checked": why}


def _served(input_dict: dict[str, list[types.Artifact]]) -> ServedState:
    """The served state this run read at its start (nothing served when not wired)."""
    served = input_dict.get(SERVED_MODEL_KEY) or []
    return load_served_state(served[0].uri) if served else ServedState()


def _keep_facts(input_dict, examples: types.Artifact, numbers: list[int]) -> None:
    """The spans, and whether the night had nothing new, for a compiled run's report."""
    nothing_new = bool(examples.get_int_custom_property(NO_NEW_SPAN_PROPERTY))
    reason = examples.get_string_custom_property(NO_NEW_SPAN_REASON_PROPERTY) if nothing_new else ""
    night_facts.write(
        night_facts.facts_dir_of(input_dict.get(SERVED_MODEL_KEY) or []),
        night_facts.EXAMPLES,
        {"spans": list(numbers), "no_new_span": nothing_new, "reason": reason or None},
    )


def _write_empty_splits(examples: types.Artifact) -> None:
    """A night with nothing new: both splits hold no record, so the steps after the
    ExampleGen (statistics, validation) run through in seconds and pass the night on."""
    for split in SPLITS:
        folder = artifact_utils.get_split_uri([examples], split)
        tf.io.gfile.makedirs(folder)
        with tf.io.TFRecordWriter(f"{folder}/{FILE_PREFIX}-00000-of-00001.gz", options="GZIP"):
            pass


def _unchanged_while_read(resolution: spans.Resolution) -> None:
    """The fingerprints recorded are those of the data trained on: each span is fingerprinted
    again after the read, and one that changed meanwhile is refused."""
    for number, source in resolution.sources.items():
        if spans.content_fingerprint(source) != resolution.fingerprints[number]:
            raise spans.SpanError(
                f"{f'span-{number} ({source})' if number else source}: its content changed "
                "while it was being read; data must not change once complete"
            )


class Executor(BaseBeamExecutor):
    """Writes what TFX's ExampleGen writes (the `Examples` artifact, one folder of gzipped
    TFRecords per split), from one pass over the source instead of one per split, in
    source order (no shuffle: the Trainer shuffles) and without compressing pixels; the eval
    split without exact copies of train images or images the served model was trained on
    (DropEvalLeaks: counted in EVAL_DROPPED_FILE), and the train split's image index
    (SERVED_IMAGES_FILE, which the Pusher keeps with the version)."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        examples = artifact_utils.get_single_instance(output_dict[EXAMPLES_KEY])
        examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
        resolution = spans.resolve(
            exec_properties[SOURCE_URI_KEY],
            int(exec_properties.get(SPAN_KEY, spans.NEWEST)),
            int(exec_properties.get(SPAN_WINDOW_KEY, 1)),
        )
        examples.span, examples.version = max(resolution.numbers), 0
        examples.set_string_custom_property("spans", ",".join(map(str, resolution.numbers)))
        served = _served(input_dict)
        try:
            spans.check_not_stale(
                resolution.fingerprints, served, bool(int(exec_properties.get(FORCE_KEY, 0)))
            )
        except spans.NoNewSpan as nothing_new:
            logging.info("%s", nothing_new)
            _write_empty_splits(examples)
            examples.set_int_custom_property(NO_NEW_SPAN_PROPERTY, 1)
            examples.set_string_custom_property(NO_NEW_SPAN_REASON_PROPERTY, str(nothing_new))
        else:
            fraction = float(exec_properties[EVAL_FRACTION_KEY])
            new = new_spans(resolution.fingerprints, served)
            self._ingest(examples, resolution, fraction, _served_index(input_dict), new)
        io_utils.write_string_file(
            os.path.join(examples.uri, SERVED_SPANS_FILE),
            spans.record_json(resolution.fingerprints),
        )
        _keep_facts(input_dict, examples, resolution.numbers)
        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(
            examples, write_split.to_file_format_str(example_gen_pb2.FORMAT_TFRECORDS_GZIP)
        )

    def _ingest(
        self,
        examples: types.Artifact,
        resolution: spans.Resolution,
        eval_fraction: float,
        served_index: tuple[str | None, dict],
        new: list[int],
    ) -> None:
        """Both splits, the train split's index, and EVAL_DROPPED_FILE: the eval images dropped
        and the train records of the `new` spans the served version was trained on."""
        logging.info("Spans ingested: %s (new to the served version: %s)", resolution.numbers, new)
        index_path, served = served_index
        dropped_path = os.path.join(examples.uri, EVAL_DROPPED_FILE)
        with self._make_beam_pipeline() as pipeline:
            read = pipeline | "ReadCifar10" >> ReadCifar10Splits(resolution.sources, eval_fraction)
            splits = read | "DropEvalLeaks" >> DropEvalLeaks(index_path)
            seen = read[TRAIN_SPANS] | "SeenTrain" >> CountSeenTrain(index_path, new)
            for split in SPLITS:
                prefix = os.path.join(artifact_utils.get_split_uri([examples], split), FILE_PREFIX)
                _ = splits[split] | f"Write[{split}]" >> WriteStoredGzipTFRecords(prefix)
            _ = splits["index"] | "WriteIndex" >> beam.Map(
                _write_file, os.path.join(examples.uri, SERVED_IMAGES_FILE)
            )
            _ = (
                splits["dropped"]
                | "DroppedRecord" >> beam.Map(_dropped_json, served, beam.pvalue.AsSingleton(seen))
                | "WriteDropped" >> beam.Map(_write_file, dropped_path)
            )
        _unchanged_while_read(resolution)
        dropped = json.loads(io_utils.read_string_file(dropped_path))
        examples.set_int_custom_property("eval_copies_of_train_dropped", dropped[COPIES_OF_TRAIN])
        if dropped[SEEN_BY_SERVED] is not None:
            examples.set_int_custom_property("eval_seen_by_served_dropped", dropped[SEEN_BY_SERVED])
        if dropped[TRAIN_SEEN] is not None:
            examples.set_int_custom_property("train_seen_by_served", dropped[TRAIN_SEEN])
        logging.info(
            "Eval images dropped: %d copies of train images; images the served model trained "
            "on: %s. New train images the served model trained on: %s",
            dropped[COPIES_OF_TRAIN],
            dropped["not_checked"] or dropped[SEEN_BY_SERVED],
            dropped["not_checked"] or dropped[TRAIN_SEEN],
        )
