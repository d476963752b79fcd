"""The Trainer's work between reading its inputs and exporting the model: choosing the
strategy, batch sizes, precision and learning rate (`plan`), then building, resuming and
fitting the network (`fit`), with every process-wide setting it touches put back after.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from absl import logging
from tensorflow.python.eager import context

from components.contract import HISTORY_FILE
from components.trainer import data, hardware, model, tpu_runtime, warm_start
from components.trainer import strategy as strategies
from components.trainer.callbacks import (
    EpochCheckpoints,
    EpochHistory,
    Lookahead,
    StepTimer,
    TrainingProgress,
    Validation,
    read_history,
)
from components.trainer.config import TrainingConfig
from components.trainer.keras import keras, tf

# Epochs before the last are validated on this share of the eval split's batches
# (`callbacks.Validation`); the last on all of it.
INTERIM_VALIDATION_SHARE = 0.2
TPU_PER_REPLICA_BATCH = 128  # fills the TPU's 128x128 matrix unit, as in the classic recipe


@dataclass(frozen=True)
class Plan:
    """What one training run does, decided before any data is read."""

    config: TrainingConfig
    strategy: tf.distribute.Strategy
    kind: str  # tpu, mirrored, multi_worker or default
    recipe: model.Recipe
    per_replica_batch_size: int
    global_batch_size: int
    epochs: int
    precision: hardware.PrecisionChoice
    worker: strategies.Worker = strategies.Worker()

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync


def plan(config: TrainingConfig) -> Plan:
    if config.cpu_replicas > 1:
        strategies.configure_cpu_replicas(config.cpu_replicas)
    strategy = strategies.create_strategy(config.strategy, config.tpu, config.cpu_replicas)
    kind = strategies.strategy_kind(strategy)
    recipe = model.RECIPES[config.model]
    per_replica = config.per_replica_batch_size or (
        TPU_PER_REPLICA_BATCH if kind == "tpu" else recipe.per_replica_batch_size
    )
    precision = strategies.choose_precision(config.precision, strategy)
    logging.info("Precision %s: %s", precision.policy, precision.reason)
    return Plan(
        config,
        strategy,
        kind,
        recipe,
        per_replica,
        per_replica * strategy.num_replicas_in_sync,
        config.epochs or recipe.epochs,
        precision,
        strategies.worker_of(strategy),
    )


@contextlib.contextmanager
def process_settings(policy: str, seed: int) -> Iterator[None]:
    """The mixed-precision policy and the random seeds for one run, restored afterwards so
    that nothing else in the process (an in-process runner, a test) inherits them."""
    saved_policy = keras.mixed_precision.global_policy()
    saved_python, saved_numpy = random.getstate(), np.random.get_state()
    saved_tf_seed = context.global_seed()
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(seed)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(saved_policy)
        random.setstate(saved_python)
        np.random.set_state(saved_numpy)
        tf.random.set_seed(saved_tf_seed)


@dataclass(frozen=True)
class Fitted:
    network: keras.Model
    build: object  # () -> a fresh, untrained network of the same architecture
    steps_per_epoch: int
    learning_rate: float
    resumed_from_epoch: int
    checkpoint_fallback: dict | None
    history: list[dict]
    fit_seconds: float
    step_seconds: float | None  # one training step, steady state (median over epochs)


def _steps_per_epoch(run: Plan, train_records: int, pipelines: int = 1) -> int:
    """Whole global batches per epoch, the same for every input pipeline: each pipeline
    (worker, or TPU host) holds at least train_records // pipelines records and feeds
    1/pipelines of every global batch. None at all is the user's batch size to lower."""
    steps = (train_records // pipelines) // (run.global_batch_size // pipelines)
    if steps == 0:
        raise ValueError(
            f"{train_records} training images are fewer than one "
            f"global batch of {run.global_batch_size}; lower "
            "--per-replica-batch-size"
        )
    return steps


def _logged_learning_rate(run: Plan) -> float:
    """The recipe's learning rate scaled to the global batch, logged with the rest of the
    plan so the log says how this run trained."""
    learning_rate = model.scaled_learning_rate(
        run.recipe, run.global_batch_size, run.config.learning_rate
    )
    logging.info(
        "Training %s: %s strategy, %d replica(s), global batch %d (%d per replica), "
        "%d epochs, learning rate %g, %s",
        run.config.model,
        run.kind,
        run.replicas,
        run.global_batch_size,
        run.per_replica_batch_size,
        run.epochs,
        learning_rate,
        run.precision.policy,
    )
    return learning_rate


def _resumed(
    network: keras.Model, checkpoint_dir: str, model_run_dir: str, worker: strategies.Worker
) -> tuple[EpochCheckpoints, int, EpochHistory]:
    """The newest readable checkpoint restored into `network`, and the history of the epochs
    up to it, so a retried Trainer goes on where the killed one stopped. Every worker
    restores from the chief's checkpoints; only the chief writes history and checkpoints
    there, the others save to a scratch folder (saving reads every variable, a collective
    step all workers take together) that `scratch_dir` names and the caller removes."""
    save_dir = checkpoint_dir if worker.is_chief else scratch_dir(checkpoint_dir, worker)
    checkpoints = EpochCheckpoints(network, checkpoint_dir, save_dir)
    resumed_from = checkpoints.restore_latest()
    previous = [
        e
        for e in read_history(os.path.join(checkpoint_dir, HISTORY_FILE))
        if e["epoch"] <= resumed_from
    ]
    if not worker.is_chief:
        return checkpoints, resumed_from, EpochHistory([], previous)
    history = EpochHistory(
        [os.path.join(model_run_dir, HISTORY_FILE), os.path.join(checkpoint_dir, HISTORY_FILE)],
        previous,
        tensorboard_dir=os.path.join(model_run_dir, "logs"),
    )
    return checkpoints, resumed_from, history


def scratch_dir(checkpoint_dir: str, worker: strategies.Worker) -> str:
    """Where a non-chief worker saves its (identical, unused) checkpoints."""
    return f"{checkpoint_dir.rstrip('/')}-scratch-worker-{worker.index}"


def per_replica_input(run: Plan) -> bool:
    """An input pipeline per replica where MirroredStrategy splits the CPU into replicas
    (`--cpu-replicas`). tf.distribute's per-worker input hands batches out through a
    MultiDeviceIterator, whose per-device iterators run tf.data's autotuner whatever the
    datasets' options say; destroying one waits out the autotuner's sleep, 60-120 s at the
    end of a fit on a 2-core CPU (gdb: `RootDataset::Iterator::~Iterator` waiting on
    `Model::OptimizeLoop`). Per-replica pipelines read on the host, which CPU replicas
    are; GPUs and TPUs keep the per-worker input, which prefetches onto the device."""
    return (
        run.kind == "mirrored"
        and run.replicas > 1
        and strategies.accelerator_of(run.strategy) == "cpu"
    )


def _input_options(run: Plan) -> tf.distribute.InputOptions | None:
    if not per_replica_input(run):
        return None
    return tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False,
    )


def input_pipelines(run: Plan) -> int:
    """How many input pipelines feed the replicas: one per worker process, one per host of
    a TPU slice, one per replica on a CPU split into replicas, else one."""
    if run.kind == "multi_worker":
        return run.worker.count
    if per_replica_input(run):
        return run.replicas
    return tpu_runtime.input_hosts(run.strategy)


def _distributed_training_data(
    run: Plan, images: tf.Tensor, labels: tf.Tensor, steps_per_epoch: int, first_epoch: int
):
    """The training batches through `distribute_datasets_from_function`: each input pipeline
    (a worker, or a TPU host) gets its own records and makes per-replica batches, so that
    no worker reads another's shard and the global batch stays per-replica x replicas.

    Under MultiWorkerMirroredStrategy `images` already are this worker's shard. A TPU slice
    has one client process: it holds the split (138 MB for CIFAR-10, a stated choice) and
    hands each host's pipeline every n-th record."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        mine_images, mine_labels = images, labels
        pipelines = context.num_input_pipelines
        if pipelines > 1 and run.worker.count == 1:
            mine_images = images[context.input_pipeline_id :: pipelines]
            mine_labels = labels[context.input_pipeline_id :: pipelines]
        replicas_here = context.num_replicas_in_sync // pipelines
        return data.training_dataset(
            mine_images,
            mine_labels,
            run.per_replica_batch_size,
            seed=run.config.seed,
            alternating_flip=run.recipe.alternating_flip,
            first_epoch=first_epoch,
            batches_per_epoch=steps_per_epoch * replicas_here,
            stream=context.input_pipeline_id,
        )

    return run.strategy.distribute_datasets_from_function(dataset_fn, _input_options(run))


def distributed_evaluation_data(run: Plan, images: tf.Tensor, labels: tf.Tensor):
    """The eval split in global batches, repeated without end, as the replicas receive it:
    each replica its slice of every global batch, through a pipeline of its own where the
    CPU is split into replicas (`per_replica_input`)."""
    if not per_replica_input(run):
        batches = data.evaluation_dataset(images, labels, run.global_batch_size)
        return run.strategy.experimental_distribute_dataset(batches.repeat())

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        replica = (context.input_pipeline_id, context.num_input_pipelines)
        return data.evaluation_dataset(images, labels, run.global_batch_size, replica).repeat()

    return run.strategy.distribute_datasets_from_function(dataset_fn, _input_options(run))


def _callbacks(
    run: Plan,
    validation: Validation,
    checkpoints: EpochCheckpoints,
    history: EpochHistory,
    timer: StepTimer,
    total_steps: int,
) -> list[keras.callbacks.Callback]:
    """The step timer first, then lookahead (the epoch's last averaging step comes before
    validation and the checkpoint), validation (the others see val_ metrics), then
    checkpoint before history: the history beside the checkpoints never lists an epoch a
    killed run could not resume from."""
    callbacks = [timer]
    if run.recipe.lookahead:
        callbacks.append(Lookahead(total_steps))
    return [*callbacks, validation, checkpoints, history, TrainingProgress(run.global_batch_size)]


def fit(
    run: Plan,
    split: dict[str, tuple[tf.Tensor, tf.Tensor]],
    checkpoint_dir: str,
    model_run_dir: str,
    train_total: int | None = None,
    whitening_sample: np.ndarray | None = None,
    warm_start_from: warm_start.Source | None = None,
) -> Fitted:
    """Builds the network under the strategy, resumes from the newest readable checkpoint in
    `checkpoint_dir`, and trains the remaining epochs. `split["train"]` is this worker's
    shard of `train_total` records (default: the whole split), `whitening_sample` images
    the same on every worker (default: the shard's first 5,000). `warm_start_from`: the
    served weights replace the initial ones (a checkpoint of this run still wins)."""
    (train_images, train_labels), (eval_images, eval_labels) = split["train"], split["eval"]
    steps_per_epoch = _steps_per_epoch(
        run, train_total or int(train_images.shape[0]), input_pipelines(run)
    )
    learning_rate = _logged_learning_rate(run)
    sample = train_images[:5000].numpy() if whitening_sample is None else whitening_sample
    whitening = model.stem_filters(run.recipe, sample)  # fitted once: the export rebuilds too

    def build() -> keras.Model:
        return model.build(run.recipe, whitening)

    with run.strategy.scope():
        network = build()
        if warm_start_from is not None:
            warm_start.load(network, warm_start_from)
        model.compile_model(
            network,
            run.recipe,
            learning_rate,
            steps_per_epoch,
            run.epochs,
            tpu_runtime.steps_per_execution(run.kind, steps_per_epoch),
        )
    checkpoints, resumed_from, history = _resumed(
        network, checkpoint_dir, model_run_dir, run.worker
    )
    # One iterator for the whole run (repeat, with the steps of one pass per epoch) instead of
    # a new one every epoch: under MirroredStrategy, tearing down each epoch's distributed
    # iterator stalled every epoch boundary (about 150 s each with 8 CPU replicas on a 2-core
    # CPU; py-spy: the main thread in fit's enumerate_epochs). `Validation` does the same for
    # the eval split, which every worker holds whole (5,000 images; each evaluates its part).
    eval_steps = -(-int(eval_images.shape[0]) // run.global_batch_size)
    validation = Validation(
        run.strategy,
        distributed_evaluation_data(run, eval_images, eval_labels),
        eval_steps,
        interim_steps=math.ceil(eval_steps * INTERIM_VALIDATION_SHARE),
    )
    timer = StepTimer()
    started = time.time()
    network.fit(
        _distributed_training_data(run, train_images, train_labels, steps_per_epoch, resumed_from),
        steps_per_epoch=steps_per_epoch,
        epochs=run.epochs,
        initial_epoch=resumed_from,
        callbacks=_callbacks(
            run, validation, checkpoints, history, timer, steps_per_epoch * run.epochs
        ),
        verbose=0,  # TrainingProgress reports, to the log and the console
    )
    return Fitted(
        network,
        build,
        steps_per_epoch,
        learning_rate,
        resumed_from,
        checkpoints.fallback(resumed_from),
        history.epochs,
        time.time() - started,
        timer.step_seconds(),
    )


def gradient_bytes(network: keras.Model) -> int:
    """Bytes of one gradient of every trainable weight: what one all-reduce moves."""
    return sum(v.shape.num_elements() * v.dtype.size for v in network.trainable_variables)


def allreduce_seconds(run: Plan, network: keras.Model, repeats: int = 5) -> float | None:
    """Median seconds of one all-reduce of a gradient-sized set of tensors across the
    replicas (every worker takes part, as in a training step); None with one replica, and
    on TPU, where it runs inside the compiled step and cannot be timed apart."""
    if run.replicas < 2 or run.kind == "tpu":
        return None
    zeros = [tf.zeros(v.shape, v.dtype) for v in network.trainable_variables]

    @tf.function
    def reduce():
        return run.strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce("sum", zeros)
        )

    def timed() -> float:
        started = time.perf_counter()
        reduced = reduce()
        run.strategy.experimental_local_results(reduced[0])[0].numpy()
        return time.perf_counter() - started

    timed()  # the first call traces and sets the collective up
    return float(np.median([timed() for _ in range(repeats)]))


def barrier(run: Plan) -> None:
    """Returns on every worker once all have reached it (a one-number all-reduce)."""
    if run.worker.count > 1:
        run.strategy.reduce("SUM", run.strategy.run(lambda: tf.constant(1.0)), axis=None)
