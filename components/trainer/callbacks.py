"""Keras callbacks of the Trainer and where its checkpoints live: per-epoch checkpoints
that survive a killed or retried run (falling back past unreadable ones), the epoch
history beside them, and progress lines for the console and the log."""

from __future__ import annotations

import hashlib
import json
import os
import time
from logging import DEBUG

from absl import logging

from components.runtime.progress import duration, progress_logger
from components.trainer.config import TrainingConfig
from components.trainer.keras import keras, tf


class Validation(keras.callbacks.Callback):
    """Evaluates the eval split at the end of every epoch through one distributed iterator
    that lives as long as the fit, and adds `val_loss`, `val_<metric>` and `val_fraction`
    (the share of the split's batches scored) to the epoch's logs (callbacks after this
    one see them).

    The last epoch is scored on the whole split; the epochs before it on the next
    `interim_steps` batches of it, a part that moves on with every epoch, enough for the
    learning curve: the whole split (5,000 records) cost 2.4 s an epoch on a 2-core Zen 3.
    Any `steps` consecutive batches of the repeated split hold each record exactly once, so
    the last epoch's figure is exact wherever the iterator stands.

    Keras' own `validation_data` makes a new distributed iterator every epoch; under
    MirroredStrategy, tearing each one down waited for tf.data's autotuning thread, from
    seconds to about 150 s per epoch with 8 CPU replicas on a 2-core CPU (gdb: the main thread
    in the iterator's destructor, a thread in `Model::OptimizeLoop`)."""

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        batches,
        steps: int,
        interim_steps: int | None = None,
    ):
        """`batches`: the eval split's batches, repeated without end and distributed by
        `strategy` (`train.distributed_evaluation_data`); `steps` of them are one pass."""
        super().__init__()
        self._iterator = iter(batches)
        self._strategy, self._steps = strategy, steps
        self._interim_steps = min(steps, interim_steps or steps)
        self._evaluate = None

    def _build(self):
        model, strategy = self.model, self._strategy

        @tf.function
        def evaluate(iterator, steps):
            for _ in tf.range(steps):
                strategy.run(model.test_step, args=(next(iterator),))

        return evaluate

    def on_epoch_end(self, epoch, logs=None):
        if self._evaluate is None:
            self._evaluate = self._build()
        for metric in self.model.metrics:
            metric.reset_state()
        last = epoch + 1 >= self.params.get("epochs", epoch + 1)
        steps = self._steps if last else self._interim_steps
        self._evaluate(self._iterator, tf.constant(steps))
        if logs is not None:
            logs.update(
                {f"val_{metric.name}": float(metric.result()) for metric in self.model.metrics}
            )
            logs["val_fraction"] = steps / self._steps


class Lookahead(keras.callbacks.Callback):
    """airbench's lookahead: an exponential moving average of the weights (BatchNorm
    statistics included), copied back into the network every `every` steps from
    `start_fraction` of training on. The average's decay grows with progress
    (decay_base**steps x progress**power), so training moves fast early and averages
    strongly at the end. At every epoch end the network takes the average's weights, which
    validation, checkpoints and the export then see. A resumed run starts a new average."""

    def __init__(
        self,
        total_steps: int,
        start_fraction: float = 0.3,
        every: int = 5,
        decay_base: float = 0.95,
        power: float = 3.0,
    ):
        super().__init__()
        self._total, self._every = total_steps, every
        self._start = int(total_steps * start_fraction)
        self._decay_base, self._power = decay_base, power
        self._average: list | None = None
        self._last_step = 0

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution > 1 (TPU) this runs once per execution; the decay
        # follows the steps actually taken since the last update.
        step = int(self.model.optimizer.iterations.numpy())
        if step < self._start:
            return
        if self._average is None:
            self._average, self._last_step = self.model.get_weights(), step
            return
        if step - self._last_step < self._every:
            return
        weights = self.model.get_weights()  # copied only on the steps that average
        decay = self._decay_base ** (step - self._last_step) * (step / self._total) ** self._power
        self._average = [decay * a + (1.0 - decay) * w for a, w in zip(self._average, weights)]
        self.model.set_weights(self._average)
        self._last_step = step

    def on_epoch_end(self, epoch, logs=None):
        if self._average is not None:
            self.model.set_weights(self._average)


class EpochCheckpoints(keras.callbacks.Callback):
    """Saves model and optimizer after every epoch; `restore_latest` resumes from them.

    Restoring explicitly (rather than with keras' BackupAndRestore) gives the epoch to
    pass as `initial_epoch` and to report as `resumed_from_epoch`; a save takes about
    0.05 s here. The newest checkpoints are kept (`KEEP`), so that when the newest
    cannot be read (a disk that filled up, a bad block) an older one resumes the run.
    """

    KEEP = 3

    def __init__(self, network: keras.Model, directory: str, save_directory: str = ""):
        super().__init__()
        self.checkpoint = tf.train.Checkpoint(model=network, optimizer=network.optimizer)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=self.KEEP)
        # A non-chief worker restores from the chief's `directory` and saves to its own.
        self.saver = (
            tf.train.CheckpointManager(self.checkpoint, save_directory, max_to_keep=1)
            if save_directory and save_directory != directory
            else self.manager
        )
        self.skipped: list[dict[str, str]] = []  # unreadable checkpoints, newest first

    def restore_latest(self) -> int:
        """The number of epochs already done (0 when no checkpoint can be read).

        Every tensor of a checkpoint is read before anything is restored from it, so an
        unreadable one is skipped whole and never leaves the model half-restored."""
        for path in reversed(self.manager.checkpoints):
            try:
                reader = tf.train.load_checkpoint(path)
                for name in reader.get_variable_to_shape_map():
                    reader.get_tensor(name)
                self.checkpoint.restore(path)
            except (tf.errors.OpError, ValueError, IndexError, OSError) as err:
                reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
                self.skipped.append(
                    {
                        "checkpoint": os.path.basename(path),
                        "error": f"{type(err).__name__}: {reason}"[:300],
                    }
                )
                logging.warning(
                    "Checkpoint %s is unreadable (%s); trying an older one",
                    path,
                    self.skipped[-1]["error"],
                )
                continue
            logging.info("Resuming from %s", path)
            return int(path.rsplit("-", 1)[-1])
        if self.skipped:
            logging.warning(
                "No readable checkpoint in %s; training starts over", self.manager.directory
            )
        return 0

    def fallback(self, resumed_from_epoch: int) -> dict | None:
        """For the training summary: what was skipped and where training resumed."""
        if not self.skipped:
            return None
        return {"skipped": self.skipped, "resumed_from_epoch": resumed_from_epoch}

    def on_epoch_end(self, epoch, logs=None):
        self.saver.save(checkpoint_number=epoch + 1)


class StepTimer(keras.callbacks.Callback):
    """Seconds per training step in the steady state: from the end of each epoch's first
    step to the end of its last (no tracing, validation or checkpoint inside), the median
    over epochs after the first when there are several."""

    def __init__(self):
        super().__init__()
        self._per_epoch: list[float] = []
        self._first_end = 0.0

    def on_train_batch_end(self, batch, logs=None):
        steps = self.params["steps"]
        if batch not in (0, steps - 1):
            return
        self.model.optimizer.iterations.numpy()  # waits for the step to finish
        if batch == 0:
            self._first_end = time.perf_counter()
        elif steps > 1:
            self._per_epoch.append((time.perf_counter() - self._first_end) / (steps - 1))

    def step_seconds(self) -> float | None:
        timed = self._per_epoch[1:] or self._per_epoch
        return round(float(sorted(timed)[len(timed) // 2]), 4) if timed else None


class TrainingProgress(keras.callbacks.Callback):
    """Steps done, images/s and time left: live (DEBUG, about once a second) for an
    interactive console, and one lasting line per epoch (INFO) for logs."""

    def __init__(self, global_batch: int, interval_seconds: float = 1.0):
        super().__init__()
        self.global_batch = global_batch
        self.interval_seconds = interval_seconds
        self._log = progress_logger()
        self._epoch_seconds: list[float] = []
        self._started = self._shown = 0.0
        self._epoch = 0

    def _left(self, seconds_this_epoch_left: float) -> float:
        epochs_after = self.params["epochs"] - self._epoch - 1
        per_epoch = (
            sum(self._epoch_seconds) / len(self._epoch_seconds)
            if self._epoch_seconds
            else time.time() - self._started + seconds_this_epoch_left
        )
        return seconds_this_epoch_left + epochs_after * per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._started = epoch, time.time()
        self._shown = self._started

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        if now - self._shown < self.interval_seconds or not self._log.isEnabledFor(DEBUG):
            return
        self._shown = now
        steps, done, elapsed = self.params["steps"], batch + 1, now - self._started
        self._log.debug(
            "Trainer: epoch %d/%d, step %d/%d, %.0f images/s, %s left",
            self._epoch + 1,
            self.params["epochs"],
            done,
            steps,
            done * self.global_batch / elapsed,
            duration(self._left(elapsed / done * (steps - done))),
        )

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.time() - self._started
        self._epoch_seconds.append(seconds)
        logs = logs or {}
        metrics = ", ".join(
            f"{name} {float(value):.4f}"
            for name, value in logs.items()
            if name in ("loss", "accuracy", "val_accuracy")
        )
        if logs.get("val_fraction", 1.0) < 1.0:
            metrics += f" (on {logs['val_fraction']:.0%} of the eval split)"
        self._log.info(
            "Trainer: epoch %d/%d done in %.1fs, %.0f images/s, %s, %s left",
            epoch + 1,
            self.params["epochs"],
            seconds,
            self.params["steps"] * self.global_batch / seconds,
            metrics,
            duration(self._left(0.0)),
        )


class EpochHistory(keras.callbacks.Callback):
    """Writes loss, accuracy, learning rate and seconds per epoch after every epoch,
    to the model run folder and beside the checkpoints (so a resumed run continues
    the same history), and the same scalars for TensorBoard."""

    def __init__(
        self, paths: list[str], initial: list[dict] | None = None, tensorboard_dir: str = ""
    ):
        super().__init__()
        self.paths = paths
        self.epochs: list[dict] = list(initial or [])
        self._started = 0.0
        self._writer = tf.summary.create_file_writer(tensorboard_dir) if tensorboard_dir else None

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.time()

    def on_epoch_end(self, epoch, logs=None):
        entry = {"epoch": epoch + 1, "seconds": round(time.time() - self._started, 2)}
        entry.update({k: float(v) for k, v in (logs or {}).items()})
        learning_rate = self.model.optimizer.learning_rate
        if callable(learning_rate):
            learning_rate = learning_rate(self.model.optimizer.iterations)
        entry["learning_rate"] = float(keras.backend.get_value(learning_rate))
        self.epochs = [e for e in self.epochs if e["epoch"] < entry["epoch"]] + [entry]
        if self._writer is not None:
            with self._writer.as_default():
                for name, value in entry.items():
                    if name != "epoch":
                        tf.summary.scalar(name, value, step=entry["epoch"])
            self._writer.flush()
        for path in self.paths:
            tf.io.gfile.makedirs(os.path.dirname(path))
            with tf.io.gfile.GFile(path, "w") as handle:
                json.dump(self.epochs, handle, indent=1)


def checkpoint_dir(
    checkpoint_root: str, model_run_dir: str, train_files: list[str], config: TrainingConfig
) -> str:
    """A folder that survives a killed or retried run: the same inputs and config give the
    same folder in the next execution, so training resumes instead of restarting.

    Under `checkpoint_root` when the pipeline gives one; else beside the model run folders
    (`<trainer>/model_run/<id>` -> `<trainer>/checkpoints`).
    """
    key = hashlib.sha256(
        json.dumps([sorted(train_files), config.to_custom_config()], sort_keys=True).encode()
    ).hexdigest()[:16]
    root = checkpoint_root or os.path.join(
        os.path.dirname(os.path.dirname(model_run_dir.rstrip("/"))), "checkpoints"
    )
    return os.path.join(root.rstrip("/"), key)


def read_history(path: str) -> list[dict]:
    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)
