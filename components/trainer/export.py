"""Export for serving: a plain TF SavedModel (no Keras needed to load it) with

- `serving_default`: encoded PNG/JPEG/GIF/BMP bytes, tf.string [None] -> probabilities,
  classes; an image whose header claims more than `max_image_pixels` (default
  `image_header.MAX_IMAGE_PIXELS`, 4096 x 4096) is refused before it is decoded;
- `serving_examples`: serialized tf.Examples, tf.string [None] -> the same outputs (TFMA).

Decoding, resizing, normalisation and test-time augmentation are inside the graph, so
a client sends only bytes. Test-time augmentation averages the class probabilities of
several views: "flip", the image and its mirror image (2 network passes); or
"flip_translate" (airbench's multi-crop), those two at weight 1/2 and both again shifted
one pixel up-left and one pixel down-right at 1/4 each (6 passes).
The exported network is rebuilt in float32 on the default strategy, so a model
trained under TPUStrategy, MirroredStrategy or bf16 serves on any CPU; airbench serves
with its BatchNorm and normalisation folded into the convolutions (inference.py). It
sees at most `VIEWS_PER_PASS` views at a time, whatever the request's size.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from absl import logging

from components.checks import drift, label_agreement, reference_images
from components.contract import (
    CLASSES_KEY,
    EMBEDDINGS_KEY,
    EXAMPLES_INPUT,
    EXAMPLES_SIGNATURE,
    IMAGE_SHAPE,
    IMAGE_SIZE,
    IMAGES_INPUT,
    IMAGES_SIGNATURE,
    LABEL_NAMES,
    LOGITS_KEY,
    NUM_CLASSES,
    PROBABILITIES_KEY,
    SAVED_MODEL_FILE,
)
from components.serving import warmup
from components.storage import object_store
from components.trainer import data, inference
from components.trainer.image_header import MAX_IMAGE_PIXELS, check_pixel_limit
from components.trainer.keras import keras, tf


def float32_copy(trained: keras.Model, build_fn) -> keras.Model:
    """The trained network rebuilt outside any strategy with float32 compute."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        copy = build_fn()
    finally:
        keras.mixed_precision.set_global_policy(previous)
    copy.set_weights(trained.get_weights())
    return copy


# What tf.saved_model.save writes beside saved_model.pb since TF 2.12 (its fingerprint).
FINGERPRINT_FILE = "fingerprint.pb"
TEST_TIME_AUGMENTATIONS = ("flip", "flip_translate", "flip_translate_shared")
# The network runs over at most this many views at a time: a request of 1,000 records is
# 6,000 views, over 1 GB of activations in one pass. On a 2-core Zen 3 (float32) the network
# ran at 2,118 images/s in passes of 256, 1,668 in passes of 512 and 1,274 in one of 3,072.
VIEWS_PER_PASS = 256


class ServingModule(tf.Module):
    def __init__(
        self,
        network: keras.Model,
        test_time_augmentation: str = "flip",
        max_image_pixels: int = MAX_IMAGE_PIXELS,
    ):
        super().__init__()
        if test_time_augmentation not in TEST_TIME_AUGMENTATIONS:
            raise ValueError(
                f"unknown test-time augmentation '{test_time_augmentation}'; "
                f"choose one of {', '.join(TEST_TIME_AUGMENTATIONS)}"
            )
        # The Keras model is used, not saved: saving it as a child would serialise every
        # layer's Keras metadata and trace each layer's call (half the export's time) for
        # a SavedModel that nothing loads through Keras. Its variables are saved: the
        # trained network's as they were (a warm start reads them, warm_start.py), and
        # those of the network the signatures run, airbench with BatchNorm folded in
        # (inference.py).
        self.network = self._no_dependency(inference.folded(network))
        # `features` (logits and embeddings) for the next runs' checks, when the network has
        # a penultimate layer to show (components/trainer/inference.py: with_embeddings).
        both = inference.with_embeddings(self.network)
        self.embedding_network = self._no_dependency(both)
        if both is not None:
            self.features = tf.function(
                self._features, input_signature=[tf.TensorSpec([None, *IMAGE_SHAPE], tf.uint8)]
            )
        # flip_translate_shared runs the stem once per image, the rest once per view; no
        # other augmentation needs the two halves built.
        shared = test_time_augmentation == "flip_translate_shared"
        self.halves = self._no_dependency(inference.split(self.network) if shared else None)
        if shared and self.halves is None:
            raise ValueError(
                "test-time augmentation 'flip_translate_shared' needs an airbench network "
                "(its stem is shared between views); use 'flip_translate'"
            )
        self.network_variables = list(network.variables)
        self.inference_variables = list(self.network.variables)
        self.test_time_augmentation = test_time_augmentation
        self.max_image_pixels = max_image_pixels
        self.label_names = tf.constant(LABEL_NAMES)
        # One function that both signatures call: its graph (views, passes, the network) is
        # traced and stored once, not once per signature.
        self._traced_probabilities = tf.function(
            self.probabilities,
            input_signature=[tf.TensorSpec([None, *IMAGE_SHAPE], tf.uint8)],
        )

    def _softmax(self, images: tf.Tensor) -> tf.Tensor:
        """The network's probabilities, `VIEWS_PER_PASS` images at a time, one after another."""
        return self._in_passes(
            images,
            lambda chunk: tf.nn.softmax(self.network(chunk, training=False)),
            VIEWS_PER_PASS,
        )

    @staticmethod
    def _in_passes(images: tf.Tensor, fn, per_pass: int) -> tf.Tensor:
        """`fn` (images -> [n, classes]) over `per_pass` images at a time, one after another."""
        count = tf.shape(images)[0]
        passes = (count + per_pass - 1) // per_pass
        outputs = tf.TensorArray(
            tf.float32, size=passes, infer_shape=False, element_shape=[None, NUM_CLASSES]
        )

        def one_pass(index, outputs):
            chunk = images[index * per_pass : (index + 1) * per_pass]
            return index + 1, outputs.write(index, fn(chunk))

        _, outputs = tf.while_loop(
            lambda index, _: index < passes, one_pass, (0, outputs), parallel_iterations=1
        )
        return tf.reshape(outputs.concat(), [count, NUM_CLASSES])

    def _mirror_average(self, images: tf.Tensor) -> tf.Tensor:
        """Probabilities averaged over the images and their mirror images."""
        both = tf.concat([images, tf.reverse(images, axis=[2])], axis=0)
        probabilities = self._softmax(both)
        plain, mirrored = tf.split(probabilities, 2, axis=0)
        return (plain + mirrored) / 2.0

    def probabilities(self, images: tf.Tensor) -> tf.Tensor:
        """uint8 [N, 32, 32, 3] -> [N, classes], averaged over the test-time views."""
        if self.test_time_augmentation == "flip":
            return self._mirror_average(images)
        if self.test_time_augmentation == "flip_translate_shared":
            # Six views per record: records in passes of at most VIEWS_PER_PASS views.
            return self._in_passes(images, self._shared_views, max(1, VIEWS_PER_PASS // 6))
        padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        views = tf.concat([images, padded[:, :IMAGE_SIZE, :IMAGE_SIZE], padded[:, 2:, 2:]], axis=0)
        centre, up_left, down_right = tf.split(self._mirror_average(views), 3, axis=0)
        return centre / 2.0 + (up_left + down_right) / 4.0

    def _shared_views(self, images: tf.Tensor) -> tf.Tensor:
        """ "flip_translate"'s six views and weights, with the stem and the first convolution
        run once over each reflect-padded image (34 x 34, and its mirror image) instead of
        once per view: each view's first feature map is the 31 x 31 window of that 33 x 33
        map at its offset, exact inside, while along the view's edge the convolution sees
        the padded image's next pixels where the per-view network sees zero padding."""
        front, rest = self.halves
        count = tf.shape(images)[0]
        padded = tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT")
        maps = front(tf.concat([padded, tf.reverse(padded, axis=[2])], axis=0), training=False)
        # The view at offset (row, column) pools the map's 2x2 windows from (row, column) on.
        # Pooled over the whole map, those are the windows at even offsets (the offsets 0 and
        # 2 of the up-left and down-right views), over the map less its first row and column
        # the odd ones (offset 1, the centre), so each view is a 15 x 15 window of one of two
        # pooled maps, not a 31 x 31 window pooled on its own.
        even = tf.nn.max_pool2d(maps, 2, 2, "VALID")
        odd = tf.nn.max_pool2d(maps[:, 1:, 1:], 2, 2, "VALID")
        n = (IMAGE_SIZE - 1) // 2
        views = tf.concat(
            [
                odd[:count, :n, :n],  # centre, and (below) its mirror image
                odd[count:, :n, :n],
                even[:count, :n, :n],  # up-left: offset (0, 0) of the padded image
                even[count:, :n, 1:],  # its mirror image: offset (0, 2) of the mirrored one
                even[:count, 1:, 1:],  # down-right: offset (2, 2)
                even[count:, 1:, :n],  # its mirror image: offset (2, 0)
            ],
            axis=0,
        )
        probabilities = tf.nn.softmax(rest(views, training=False))
        centre, mirrored, *shifted = tf.split(probabilities, 6, axis=0)
        return (centre + mirrored) / 4.0 + tf.add_n(shifted) / 8.0

    def _outputs(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        probabilities = self._traced_probabilities(images)
        return {
            PROBABILITIES_KEY: probabilities,
            CLASSES_KEY: tf.gather(self.label_names, tf.argmax(probabilities, axis=1)),
        }

    @tf.function(input_signature=[tf.TensorSpec([None, *IMAGE_SHAPE], tf.uint8)])
    def logits(self, images: tf.Tensor) -> tf.Tensor:
        """The network alone on uint8 images, one view, no averaging: for analysis."""
        return self.network(images, training=False)

    def _features(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """`logits` and the network's penultimate layer (EMBEDDINGS_KEY), in one pass: what a
        next run's checks ask the served model (components/checks/model_scoring.py)."""
        embeddings, logits = self.embedding_network(images, training=False)
        return {EMBEDDINGS_KEY: tf.cast(embeddings, tf.float32), LOGITS_KEY: logits}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=IMAGES_INPUT)])
    def serve_images(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        def decode(encoded: tf.Tensor) -> tf.Tensor:
            with tf.control_dependencies([check_pixel_limit(encoded, self.max_image_pixels)]):
                image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
            image = tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE], antialias=True)
            return tf.cast(tf.clip_by_value(tf.round(image), 0, 255), tf.uint8)

        decoded = tf.map_fn(
            decode, images, fn_output_signature=tf.TensorSpec([IMAGE_SIZE, IMAGE_SIZE, 3], tf.uint8)
        )
        return self._outputs(decoded)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)])
    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._outputs(data.decode_images(examples))


def export_serving_model(
    network: keras.Model,
    export_dir: str,
    test_time_augmentation: str = "flip",
    max_image_pixels: int = MAX_IMAGE_PIXELS,
) -> ServingModule:
    """Saves the SavedModel to `export_dir`; returns the module whose functions it saved
    (its `serve_images` is the exported `serving_default`)."""
    module = ServingModule(network, test_time_augmentation, max_image_pixels)
    # The functions, not concrete functions traced here: saving traces every function
    # again in its own context, so tracing them beforehand doubled the work (export of the
    # default model on a 2-core Zen 3: 3.3-4.4 s before, 1.4-1.7 s after, with the shared
    # probabilities function).
    # An s3:// export is written here and copied up, saved_model.pb last (object_store),
    # without fingerprint.pb: TensorFlow reads it back in C++ on every load, which crashes
    # (a segmentation fault) on tensorflow-io's s3://; without it the load goes on (the
    # fingerprint is optional: TF Serving and tf.saved_model.load need none).
    upload = object_store.written_locally(
        export_dir, last=SAVED_MODEL_FILE, leave_out=(FINGERPRINT_FILE,)
    )
    with upload as folder:
        tf.saved_model.save(
            module,
            folder,
            signatures={
                IMAGES_SIGNATURE: module.serve_images,
                EXAMPLES_SIGNATURE: module.serve_examples,
            },
        )
    return module


def write_warmup_requests(
    module: ServingModule, images: np.ndarray, export_dir: str, model_name: str
) -> int:
    """TF Serving's warmup records and the export's answers to them (components/serving/warmup.py)
    into the export's assets.extra/; the number of records. A failure fails the Trainer
    (RuntimeError naming it): a version without them is never pushed (the Pusher's load test
    replays them), so an export that cannot answer its own images stops here."""
    try:
        return warmup.write(module.serve_images, images, export_dir, model_name)
    except Exception as err:
        raise RuntimeError(f"the export's warmup records could not be written: {err}") from err


def _one_view(
    served: keras.Model, both: keras.Model | None, images, batch: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(probabilities, embeddings or None) of `images`, one view, by `served` (the folded
    network `features` runs), with embeddings when `both` (its `with_embeddings`) is given."""
    probabilities, embeddings = [np.zeros((0, NUM_CLASSES), np.float32)], []
    for start in range(0, int(images.shape[0]), batch):
        chunk = images[start : start + batch]
        if both is None:
            logits = served(chunk, training=False)
        else:
            embedded, logits = both(chunk, training=False)
            embeddings.append(tf.cast(embedded, tf.float32).numpy())
        probabilities.append(tf.nn.softmax(tf.cast(logits, tf.float32)).numpy())
    return np.concatenate(probabilities), np.concatenate(embeddings) if embeddings else None


def write_label_reference(
    network: keras.Model,
    images: tf.Tensor,
    labels: tf.Tensor,
    export_dir: str,
    batch: int = 512,
    shift_images: np.ndarray | None = None,
) -> None:
    """The model's label reference (components/checks/label_agreement.py) on the eval split, and its
    class probabilities and embeddings (components/checks/drift.py) on `shift_images`
    (the reference images, which a warm start carries forward, so a version fine-tuned on a
    small span still keeps enough; default: the eval split), in the export's
    assets.extra/: what clean labels and clean images look like to it, against which a later
    run judges a new span."""
    if not int(images.shape[0]):
        return
    # The network `features` runs: folded, whose embeddings are scaled unlike the trained
    # network's; `both` is None when the export has no `features` either.
    served = inference.folded(network)
    both = inference.with_embeddings(served)
    elsewhere = shift_images is not None and len(shift_images) > 0
    probabilities, embeddings = _one_view(served, None if elsewhere else both, images, batch)
    found = label_agreement.reference(probabilities, labels.numpy())
    if elsewhere:
        probabilities, embeddings = _one_view(served, both, tf.constant(shift_images), batch)
        found = dataclasses.replace(
            found, sample=drift.every_kth(probabilities, label_agreement.REFERENCE_SAMPLE)
        )
    path = os.path.join(export_dir, label_agreement.REFERENCE_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(found.to_json())
    if embeddings is not None:
        path = os.path.join(export_dir, drift.EMBEDDING_FILE)
        with tf.io.gfile.GFile(path, "wb") as out:
            out.write(drift.embeddings_to_bytes(embeddings))


def write_reference_images(
    base_model: str | None, images: tf.Tensor, labels: tf.Tensor, export_dir: str
) -> reference_images.ReferenceImages:
    """The reference images (components/checks/reference_images.py) into the export's assets.extra/:
    the served version's set (`base_model`, when it keeps one), filled up with this run's eval
    images; returned. An unreadable served set is replaced by a new one, with a warning."""
    kept = None
    served = os.path.join(base_model, reference_images.REFERENCE_FILE) if base_model else ""
    if served and tf.io.gfile.exists(served):
        try:
            with tf.io.gfile.GFile(served, "rb") as handle:
                kept = reference_images.from_bytes(handle.read(), served)
        except ValueError as err:
            logging.warning("Starting a new reference image set: %s", err)
    grown = reference_images.grow(kept, images.numpy(), labels.numpy())
    path = os.path.join(export_dir, reference_images.REFERENCE_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(reference_images.to_bytes(grown))
    return grown
