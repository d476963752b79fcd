"""Input pipeline: ExampleGen TFRecords -> cached uint8 tensors -> augmented batches.

The whole split fits in memory (45,000 x 3 KB = 138 MB), so records are parsed
once, cached, then shuffled and batched each epoch. Augmentation (random flip
and random translation by up to `translate` pixels, per image) runs on whole
batches, which is far cheaper than per-example map calls on a 2-core host.

The training and evaluation datasets switch tf.data autotuning off and fix
their parallelism instead. Keras makes a new iterator every epoch, and
destroying an autotuned one waited on one of its background threads: on this
2-core CPU that stalled 7 of 11 epoch boundaries by 17-19 s each (133 s in a
12-epoch run, epochs of about 22 s). Without autotuning there were none, at
the same speed per epoch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from components.contract import IMAGE_KEY, IMAGE_SHAPE, LABEL_KEY
from components.trainer.keras import tf

# Batches prepared ahead of and in parallel with the training step: one per host
# core (at least two). On a 2-core CPU whole-batch gathers take milliseconds
# against ~250 ms per step; hosts feeding GPUs or TPUs have more cores to spare.
PARALLEL_BATCHES = max(
    2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
)  # sched_getaffinity is Linux-only
FEATURE_SPEC = {
    IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
    LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
}


def decode_images(serialized: tf.Tensor) -> tf.Tensor:
    """A batch of serialized tf.Examples -> uint8 [N,32,32,3] (labels not needed)."""
    features = tf.io.parse_example(serialized, {IMAGE_KEY: FEATURE_SPEC[IMAGE_KEY]})
    return tf.reshape(tf.io.decode_raw(features[IMAGE_KEY], tf.uint8), [-1, *IMAGE_SHAPE])


def decode_examples(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A batch of serialized tf.Examples -> (uint8 [N,32,32,3], int64 [N])."""
    features = tf.io.parse_example(serialized, FEATURE_SPEC)
    images = tf.io.decode_raw(features[IMAGE_KEY], tf.uint8)
    return tf.reshape(images, [-1, *IMAGE_SHAPE]), features[LABEL_KEY]


def read_split(file_patterns: Sequence[str]) -> tf.data.Dataset:
    """Unbatched (image, label) pairs from gzipped TFRecord files, in file order."""
    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {list(file_patterns)}")
    records = tf.data.TFRecordDataset(
        files, compression_type="GZIP", num_parallel_reads=tf.data.AUTOTUNE
    )
    return records.batch(1024).map(decode_examples, num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def load_split(file_patterns: Sequence[str]) -> tuple[tf.Tensor, tf.Tensor]:
    """The whole split as two tensors (the in-memory cache)."""
    shard = load_shard(file_patterns, 0, 1)
    return shard.images, shard.labels


@dataclass(frozen=True)
class Shard:
    """One worker's part of a split: record i of the split (in file order) belongs to
    worker i % count. `total` counts the whole split, so that every worker works out the
    same number of steps per epoch from it."""

    images: tf.Tensor
    labels: tf.Tensor
    total: int


def load_shard(file_patterns: Sequence[str], index: int, count: int) -> Shard:
    """Worker `index` of `count`'s records as two tensors. Every worker streams the split's
    files once (they are not split into as many files as there are workers), but keeps only
    its own records in memory: 1/count of the split."""
    images, labels, seen = [], [], 0
    for batch_images, batch_labels in read_split(file_patterns).batch(8192):
        size = int(batch_labels.shape[0])
        mine = tf.equal((tf.range(seen, seen + size) % count), index)
        images.append(tf.boolean_mask(batch_images, mine))
        labels.append(tf.boolean_mask(batch_labels, mine))
        seen += size
    return Shard(tf.concat(images, 0), tf.concat(labels, 0), seen)


def first_images(file_patterns: Sequence[str], count: int) -> np.ndarray:
    """The split's first `count` images in file order: the same on every worker, whatever
    its shard (the whitening stem is computed from them)."""
    batches = [batch for batch, _ in read_split(file_patterns).batch(count).take(1)]
    return batches[0].numpy()


def translate_batch(
    images: tf.Tensor, translate: int = 2, seed: tf.Tensor | None = None
) -> tf.Tensor:
    """Per-image random translation by up to `translate` pixels (reflect padding). With
    `seed` (a stateless seed, shape [2]) the offsets are a function of it alone; without,
    they come from the op's own random state."""
    if not translate:
        return images
    batch = tf.shape(images)[0]
    padded = tf.pad(
        images, [[0, 0], [translate, translate], [translate, translate], [0, 0]], mode="REFLECT"
    )
    if seed is None:
        offsets = tf.random.uniform([batch, 2], 0, 2 * translate + 1, dtype=tf.int32)
    else:
        offsets = tf.random.stateless_uniform(
            [batch, 2], seed, minval=0, maxval=2 * translate + 1, dtype=tf.int32
        )
    rows = offsets[:, 0:1] + tf.range(32)[None, :]  # [B, 32]
    cols = offsets[:, 1:2] + tf.range(32)[None, :]
    images = tf.gather(padded, rows, axis=1, batch_dims=1)  # [B, 32, W+2t, C]
    return tf.gather(images, cols, axis=2, batch_dims=1)  # [B, 32, 32, C]


def flip_batch(images: tf.Tensor, flip: tf.Tensor) -> tf.Tensor:
    """Mirrors the images whose `flip` entry ([B] bool) is true."""
    return tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images)


def augment_batch(
    images: tf.Tensor, labels: tf.Tensor, translate: int = 2
) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-image random horizontal flip and translation, batched, from the ops' own random
    state (the throughput probe's input; the Trainer's is `training_dataset`)."""
    flip = tf.random.uniform([tf.shape(images)[0]]) < 0.5
    return translate_batch(flip_batch(images, flip), translate), labels


def _without_autotuning() -> tf.data.Options:
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def training_dataset(
    images: tf.Tensor,
    labels: tf.Tensor,
    batch_size: int,
    seed: int = 0,
    alternating_flip: bool = False,
    first_epoch: int = 0,
    batches_per_epoch: int | None = None,
    stream: int = 0,
) -> tf.data.Dataset:
    """Shuffled, augmented, fixed-shape batches of `batch_size` (per replica when a
    strategy's input function calls it), epoch after epoch without end; every
    epoch is one pass (drop remainder) in an order fixed by (`seed`, epoch), and each
    batch's flips and shifts are fixed by (`seed`, `stream`, epoch, its place in the
    epoch): a run resumed at `first_epoch` sees the very batches an unbroken run would
    have, and no run depends on which of the parallel map calls happened to draw from a
    random state first. `stream` tells the input pipelines of one run apart (a worker's,
    a TPU host's) so that they draw different shifts. With `batches_per_epoch`, an epoch
    is that many batches of the pass (so that every replica and worker ends its epoch on
    the same step).

    Shuffles indices and gathers whole batches from the cached tensors: a shuffle buffer
    of 45,000 image slices costs seconds to fill and to tear down each epoch. With
    `alternating_flip` (airbench), each image is mirrored at random in the first epoch
    and then in every other epoch, so consecutive epochs see both of its sides; otherwise
    every image is mirrored at random each time.
    """
    count = int(images.shape[0])
    used = count if batches_per_epoch is None else batches_per_epoch * batch_size
    if used > count:
        raise ValueError(
            f"{batches_per_epoch} batches of {batch_size} need {used} images, "
            f"this shard has {count}"
        )
    mirrored_first = tf.random.stateless_uniform([count], seed=[seed, -1]) < 0.5
    stream_seed = tf.random.experimental.stateless_fold_in(
        tf.constant([seed, -2], tf.int64), tf.constant(stream, tf.int64)
    )

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        epoch_seed = tf.stack([tf.constant(seed, tf.int64), epoch])
        order = tf.random.experimental.stateless_shuffle(tf.range(count), seed=epoch_seed)
        return (
            tf.data.Dataset.from_tensor_slices(order[:used])
            .batch(batch_size, drop_remainder=True)
            .enumerate()
            .map(lambda step, indices: (indices, epoch, step))
        )

    def gather(
        indices: tf.Tensor, epoch: tf.Tensor, step: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        batch_seed = tf.random.experimental.stateless_fold_in(
            tf.random.experimental.stateless_fold_in(stream_seed, epoch), step
        )
        flip_seed, shift_seed = tf.unstack(tf.random.experimental.stateless_split(batch_seed, 2))
        batch = tf.gather(images, indices)
        if alternating_flip:
            flip = tf.not_equal(tf.gather(mirrored_first, indices), tf.equal(epoch % 2, 1))
        else:
            flip = tf.random.stateless_uniform([tf.size(indices)], flip_seed) < 0.5
        shifted = translate_batch(flip_batch(batch, flip), seed=shift_seed)
        return shifted, tf.gather(labels, indices)

    return (
        tf.data.Dataset.range(first_epoch, 2**62)
        .flat_map(epoch_batches)
        .map(gather, num_parallel_calls=PARALLEL_BATCHES)
        .prefetch(PARALLEL_BATCHES)
        .with_options(_without_autotuning())
    )


def evaluation_dataset(
    images: tf.Tensor,
    labels: tf.Tensor,
    global_batch_size: int,
    replica: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Un-augmented batches; the last partial batch is kept so every record counts.

    With `replica` (index, count), the input pipeline of one of `count` replicas: its slice
    of each global batch, split as tf.distribute splits a batch between replicas (slices
    of ceil(n / count), so a short last batch can leave a replica fewer or none), so every
    replica has the same number of batches per pass."""
    batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(global_batch_size)
    if replica is not None:
        index, count = replica

        def mine(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            size = (tf.shape(x)[0] + count - 1) // count
            return x[index * size : (index + 1) * size], y[index * size : (index + 1) * size]

        batches = batches.map(mine)
    return batches.prefetch(PARALLEL_BATCHES).with_options(_without_autotuning())
