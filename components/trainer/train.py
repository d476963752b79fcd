"""The Trainer's work between reading its inputs and exporting the model: choosing the
strategy, batch sizes, precision and learning rate (`plan`), then building, resuming and
fitting the network (`fit`), with every process-wide setting it touches put back after.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from absl import logging
from tensorflow.python.eager import context

from components.contract import HISTORY_FILE
from components.trainer import data, hardware, model, tpu_runtime
from components.trainer import strategy as strategies
from components.trainer.callbacks import (
    EpochCheckpoints,
    EpochHistory,
    Lookahead,
    TrainingProgress,
    Validation,
    read_history,
)
from components.trainer.config import TrainingConfig
from components.trainer.keras import keras, tf

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

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync


def plan(config: TrainingConfig) -> Plan:
    if config.cpu_replicas > 1:
        strategies.configure_cpu_replicas(config.cpu_replicas)
    strategy = strategies.create_strategy(config.strategy, config.tpu, config.cpu_replicas)
    kind = strategies.strategy_kind(strategy)
    tpu_runtime.check_single_host(kind, tpu_runtime.input_hosts(strategy))
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


def _steps_per_epoch(run: Plan, train_records: int) -> int:
    """Whole global batches per epoch; none at all is the user's batch size to lower."""
    steps = train_records // run.global_batch_size
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
    network: keras.Model, checkpoint_dir: str, model_run_dir: str
) -> tuple[EpochCheckpoints, int, EpochHistory]:
    """The newest readable checkpoint restored into `network`, and the history of the epochs
    up to it, so a retried Trainer goes on where the killed one stopped."""
    checkpoints = EpochCheckpoints(network, checkpoint_dir)
    resumed_from = checkpoints.restore_latest()
    previous = [
        e
        for e in read_history(os.path.join(checkpoint_dir, HISTORY_FILE))
        if e["epoch"] <= resumed_from
    ]
    history = EpochHistory(
        [os.path.join(model_run_dir, HISTORY_FILE), os.path.join(checkpoint_dir, HISTORY_FILE)],
        previous,
        tensorboard_dir=os.path.join(model_run_dir, "logs"),
    )
    return checkpoints, resumed_from, history


def fit(
    run: Plan,
    split: dict[str, tuple[tf.Tensor, tf.Tensor]],
    checkpoint_dir: str,
    model_run_dir: str,
) -> Fitted:
    """Builds the network under the strategy, resumes from the newest readable checkpoint in
    `checkpoint_dir`, and trains the remaining epochs."""
    (train_images, train_labels), (eval_images, eval_labels) = split["train"], split["eval"]
    steps_per_epoch = _steps_per_epoch(run, int(train_images.shape[0]))
    learning_rate = _logged_learning_rate(run)
    whitening_sample = train_images[:5000].numpy()

    def build() -> keras.Model:
        return model.build(run.recipe, whitening_sample)

    with run.strategy.scope():
        network = build()
        model.compile_model(
            network,
            run.recipe,
            learning_rate,
            steps_per_epoch,
            run.epochs,
            tpu_runtime.steps_per_execution(run.kind, steps_per_epoch),
        )
    checkpoints, resumed_from, history = _resumed(network, checkpoint_dir, model_run_dir)
    # One iterator for the whole run (repeat, with the steps of one pass per epoch) instead of
    # a new one every epoch: under MirroredStrategy, tearing down each epoch's distributed
    # iterator stalled every epoch boundary (about 150 s each with 8 CPU replicas on a 2-core
    # CPU; py-spy: the main thread in fit's enumerate_epochs). `Validation` does the same for
    # the eval split.
    eval_steps = -(-int(eval_images.shape[0]) // run.global_batch_size)
    validation = Validation(
        run.strategy,
        data.evaluation_dataset(eval_images, eval_labels, run.global_batch_size),
        eval_steps,
    )
    # Lookahead first: the epoch's last averaging step comes before validation and the
    # checkpoint. Validation next, so the others see val_ metrics; then checkpoint before
    # history: the history beside the checkpoints never lists an epoch a killed run could
    # not resume from.
    callbacks = [validation, checkpoints, history, TrainingProgress(run.global_batch_size)]
    if run.recipe.lookahead:
        callbacks.insert(0, Lookahead(steps_per_epoch * run.epochs))
    started = time.time()
    network.fit(
        data.training_dataset(
            train_images,
            train_labels,
            run.global_batch_size,
            seed=run.config.seed,
            alternating_flip=run.recipe.alternating_flip,
            first_epoch=resumed_from,
        ),
        steps_per_epoch=steps_per_epoch,
        epochs=run.epochs,
        initial_epoch=resumed_from,
        callbacks=callbacks,
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
    )
