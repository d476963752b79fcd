"""Training throughput of the default model under one setting, in a process of its own.

Thread counts and oneDNN are fixed when TensorFlow starts, so `make bench` runs
this once per setting and round, interleaving the settings so that the
machine's changes of speed hit all of them alike. Prints one JSON line:
{"images_per_second": ..., "first_step_seconds": ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from components.trainer import data, model
from components.trainer.hardware import decide_precision, detect
from components.trainer.keras import keras, tf

WARMUP_STEPS = 3


def _input(
    kind: str, images: np.ndarray, labels: np.ndarray, batch: int, tfrecords: str
) -> tf.data.Dataset:
    if kind == "cached":  # what the Trainer does: parsed once, shuffled and augmented per batch
        return data.training_dataset(tf.constant(images), tf.constant(labels), batch).repeat()
    if kind == "fixed":  # one batch already in memory: compute only, no input work
        return tf.data.Dataset.from_tensors((images[:batch], labels[:batch])).repeat()
    if kind == "tfrecord":  # no cache: read, decompress and parse the records every epoch
        return (
            data.read_split([tfrecords])
            .shuffle(10_000)
            .repeat()
            .batch(batch, drop_remainder=True)
            .map(data.augment_batch, num_parallel_calls=data.PARALLEL_BATCHES)
            .prefetch(data.PARALLEL_BATCHES)
        )
    raise ValueError(f"unknown input '{kind}'")


def measure(
    arrays: str,
    tfrecords: str,
    steps: int,
    batch: int,
    precision: str,
    input_kind: str,
    xla: bool,
    max_seconds: float,
) -> dict:
    """Images/s over `steps` steps after warm-up, or over the steps done within
    `max_seconds` when a setting is very slow (oneDNN off takes about 5 s a step)."""
    loaded = np.load(arrays)
    images, labels = loaded["images"], loaded["labels"]
    keras.mixed_precision.set_global_policy(decide_precision(precision, detect("cpu")).policy)
    recipe = model.RECIPES["airbench"]
    net = model.build(recipe, model.stem_filters(recipe, images[:5000]))
    model.compile_model(net, recipe, recipe.learning_rate, 100, 10)
    net.jit_compile = xla
    iterator = iter(_input(input_kind, images, labels, batch, tfrecords))
    started = time.time()
    net.train_on_batch(*next(iterator))  # traces (and compiles, with XLA)
    first_step = time.time() - started
    for _ in range(WARMUP_STEPS - 1):
        net.train_on_batch(*next(iterator))
    started = time.time()
    done = 0
    while done < steps and (done == 0 or time.time() - started < max_seconds):
        net.train_on_batch(*next(iterator))
        done += 1
    return {
        "images_per_second": done * batch / (time.time() - started),
        "first_step_seconds": first_step,
        "steps": done,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arrays", required=True, help=".npz with `images` and `labels`")
    parser.add_argument("--tfrecords", required=True, help="gzipped ExampleGen-format records")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument(
        "--precision", default="auto", help="auto: what the Trainer would choose on this machine"
    )
    parser.add_argument("--input", default="cached", choices=["cached", "fixed", "tfrecord"])
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's choice")
    parser.add_argument("--inter-op-threads", type=int, default=0, help="0: TensorFlow's choice")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    print(
        json.dumps(
            measure(
                args.arrays,
                args.tfrecords,
                args.steps,
                args.batch,
                args.precision,
                args.input,
                args.xla,
                args.max_seconds,
            )
        )
    )


if __name__ == "__main__":
    main()
