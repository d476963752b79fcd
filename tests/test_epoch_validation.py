"""The Trainer's per-epoch validation: a moving part of the eval split before the last
epoch, all of it, each record once, at the last."""

import numpy as np
import pytest

from components.trainer.callbacks import Validation
from components.trainer.keras import keras, tf

# Logits are the inputs themselves, so each record is right or wrong by construction:
# records 0-1 right, 2-3 wrong, 4 right (3 of 5 overall).
INPUTS = np.array([[1, 0], [0, 1], [1, 0], [0, 1], [1, 0]], np.float32)
LABELS = np.array([0, 1, 1, 0, 0])


def _validation(interim_steps: int | None, epochs: int) -> tuple[Validation, keras.Model]:
    inputs = keras.Input((2,))
    network = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 5.0)(inputs))
    network.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    batches = tf.data.Dataset.from_tensor_slices((INPUTS, LABELS)).batch(2)  # 2, 2, 1
    callback = Validation(tf.distribute.get_strategy(), batches.repeat(), 3, interim_steps)
    callback.set_model(network)
    callback.set_params({"epochs": epochs, "steps": 10})
    return callback, network


def _epoch_logs(callback: Validation, epoch: int) -> dict:
    logs: dict = {}
    callback.on_epoch_end(epoch, logs)
    return logs


def test_epochs_before_the_last_score_the_next_part_and_the_last_scores_all():
    callback, _ = _validation(interim_steps=1, epochs=3)
    first, second, last = (_epoch_logs(callback, epoch) for epoch in range(3))
    assert first["val_accuracy"] == 1.0 and first["val_fraction"] == pytest.approx(1 / 3)
    assert second["val_accuracy"] == 0.0  # the next batch, not the first one again
    # The last epoch starts at the third batch and wraps around: still each record once.
    assert last["val_accuracy"] == pytest.approx(3 / 5) and last["val_fraction"] == 1.0


def test_without_an_interim_share_every_epoch_scores_the_whole_split():
    callback, _ = _validation(interim_steps=None, epochs=2)
    for epoch in range(2):
        logs = _epoch_logs(callback, epoch)
        assert logs["val_accuracy"] == pytest.approx(3 / 5) and logs["val_fraction"] == 1.0
