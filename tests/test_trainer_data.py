"""Trainer input pipeline and tracing: every image once per epoch, fresh order each
epoch, augmentation that only flips and shifts, and no autotuner or AutoGraph work
that costs time without changing the result."""

import numpy as np
from tensorflow.python.autograph.impl import conversion

from components.trainer import data, model
from components.trainer.keras import keras, tf

COUNT, BATCH = 100, 32


def _indexed_images() -> tuple[tf.Tensor, tf.Tensor]:
    """Image i is filled with i, and its label is i, so batches can be traced back."""
    images = np.repeat(np.arange(COUNT, dtype=np.uint8), 32 * 32 * 3).reshape(COUNT, 32, 32, 3)
    return tf.constant(images), tf.constant(np.arange(COUNT, dtype=np.int64))


def _epoch_labels(dataset: tf.data.Dataset) -> list[int]:
    return [int(label) for _, labels in dataset for label in labels.numpy()]


def _epochs(dataset: tf.data.Dataset, epochs: int, steps: int) -> list[list]:
    """(images, labels) batches of `epochs` consecutive epochs of `steps` batches each."""
    batches = [(x.numpy(), y.numpy()) for x, y in dataset.take(epochs * steps)]
    return [batches[e * steps : (e + 1) * steps] for e in range(epochs)]


def test_training_epochs_cover_each_image_once_in_a_new_order():
    images, labels = _indexed_images()
    steps = COUNT // BATCH  # the partial batch is dropped
    epochs = _epochs(data.training_dataset(images, labels, BATCH, seed=1), 2, steps)
    first, second = ([int(x) for _, b in epoch for x in b] for epoch in epochs)
    assert len(first) == len(second) == steps * BATCH
    assert len(set(first)) == len(first) and len(set(second)) == len(second)
    assert first != second
    for batch_images, batch_labels in epochs[0][:2]:
        assert batch_images.shape == (BATCH, 32, 32, 3) and batch_images.dtype == np.uint8
        # Flips and shifts move pixels, never mix images: image i still holds only i.
        np.testing.assert_array_equal(batch_images.reshape(BATCH, -1).max(axis=1), batch_labels)
        np.testing.assert_array_equal(batch_images.reshape(BATCH, -1).min(axis=1), batch_labels)


def _textured_images() -> tuple[tf.Tensor, tf.Tensor]:
    """Random pixels, so any difference of flip or shift shows in the batch."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (COUNT, 32, 32, 3), dtype=np.uint8)
    return tf.constant(images), tf.constant(np.arange(COUNT, dtype=np.int64))


def test_a_resumed_run_sees_the_batches_an_unbroken_run_would():
    """The same images in the same order, flipped and shifted the same way: a random state
    that restarts with the process would shift a resumed run's batches differently."""
    images, labels = _textured_images()
    steps = COUNT // BATCH
    unbroken = _epochs(data.training_dataset(images, labels, BATCH, seed=3), 3, steps)
    resumed = _epochs(data.training_dataset(images, labels, BATCH, seed=3, first_epoch=2), 1, steps)
    assert [b.tolist() for _, b in resumed[0]] == [b.tolist() for _, b in unbroken[2]]
    for (resumed_images, _), (unbroken_images, _) in zip(resumed[0], unbroken[2]):
        np.testing.assert_array_equal(resumed_images, unbroken_images)


def test_augmentation_is_fixed_by_the_seed_and_differs_between_input_pipelines():
    """Two builds with one seed give identical batches whatever order the parallel map
    calls ran in; another input pipeline of the run (`stream`) or another seed shifts the
    same images differently."""
    images, labels = _textured_images()
    steps = COUNT // BATCH

    def batches(**kwargs) -> list[np.ndarray]:
        dataset = data.training_dataset(images, labels, BATCH, **kwargs)
        return [x for epoch in _epochs(dataset, 2, steps) for x, _ in epoch]

    first, again = batches(seed=4), batches(seed=4)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    for other in (batches(seed=4, stream=1), batches(seed=5)):
        assert any(not np.array_equal(a, b) for a, b in zip(first, other))


def test_alternating_flip_mirrors_each_image_in_every_other_epoch():
    """Channel 0 is dark on the left half and bright on the right, so the mean of the
    left quarter says whether an image was mirrored, whatever its 2-pixel shift."""
    count = 96
    images = np.zeros((count, 32, 32, 3), np.uint8)
    images[:, :, 16:, 0] = 200
    dataset = data.training_dataset(
        tf.constant(images), tf.constant(np.arange(count)), BATCH, seed=5, alternating_flip=True
    )
    mirrored = []
    for epoch in _epochs(dataset, 3, count // BATCH):
        state = {}
        for batch_images, batch_labels in epoch:
            for image, label in zip(batch_images, batch_labels):
                state[int(label)] = image[:, :8, 0].mean() > 100
        mirrored.append([state[i] for i in range(count)])
    assert all(a != b for a, b in zip(mirrored[0], mirrored[1]))
    assert mirrored[0] == mirrored[2]
    assert 0 < sum(mirrored[0]) < count  # the first epoch's choice is random per image


def test_augmentation_without_translation_is_identity_or_mirror():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    augmented, _ = data.augment_batch(tf.constant(images), tf.zeros([64]), translate=0)
    augmented = augmented.numpy()
    same = [np.array_equal(a, b) for a, b in zip(augmented, images)]
    mirrored = [np.array_equal(a, b[:, ::-1]) for a, b in zip(augmented, images)]
    assert all(s or m for s, m in zip(same, mirrored))
    assert 0 < sum(mirrored) < 64


def test_evaluation_keeps_every_record_in_order():
    images, labels = _indexed_images()
    assert _epoch_labels(data.evaluation_dataset(images, labels, BATCH)) == list(range(COUNT))


def test_datasets_run_without_the_autotuner():
    """Destroying an autotuned iterator waits on the autotuner's thread (17-19 s stalls
    between epochs here); fixed parallelism avoids that."""
    images, labels = _indexed_images()
    for dataset in (
        data.training_dataset(images, labels, BATCH),
        data.evaluation_dataset(images, labels, BATCH),
    ):
        assert dataset.options().autotune.enabled is False


def test_autograph_leaves_keras_internals_alone_but_converts_project_code():
    assert conversion.is_allowlisted(keras.layers.Conv2D.call)
    assert conversion.is_allowlisted(keras.Model.train_step)
    assert not conversion.is_allowlisted(data.augment_batch)
    assert not conversion.is_allowlisted(model.whitening_filters)
