"""The shared contract of the pipeline: the one place that names features, labels,
image shape, serving signatures, pipeline nodes and the Trainer's report files.

Pure Python with no TensorFlow import, so every layer (components, trainer,
pipeline, CLI, benchmarks, tests) can depend on it cheaply.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

# tf.Example features written by Cifar10ExampleGen and read by every consumer.
IMAGE_KEY = "image_raw"  # 3,072 bytes: 32x32x3 uint8, row-major HWC
LABEL_KEY = "label"  # int64 in 0..NUM_CLASSES-1
RECORD_ID_KEY = "record_id"  # "<batch file>:<index>", for tracing a record to its source
# Per-image summaries beside the bytes (float, one value each), for TFDV's statistics, skew
# and drift; the model and the serving signatures never read them
# (components/cifar10_example_gen/summaries.py).
IMAGE_SUMMARY_FEATURES = (
    "image_brightness",
    "image_contrast",
    "image_red_mean",
    "image_green_mean",
    "image_blue_mean",
    "image_clipped_fraction",
    "image_sharpness",
    "image_blockiness",
)

LABEL_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
NUM_CLASSES = len(LABEL_NAMES)
IMAGE_SIZE = 32
IMAGE_CHANNELS = 3
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE, IMAGE_CHANNELS)
IMAGE_BYTES = IMAGE_SIZE * IMAGE_SIZE * IMAGE_CHANNELS

TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"

# Serving signatures of the exported SavedModel and their outputs.
IMAGES_SIGNATURE = "serving_default"  # encoded image bytes in
EXAMPLES_SIGNATURE = "serving_examples"  # serialized tf.Examples in (TFMA)
IMAGES_INPUT = "images"
EXAMPLES_INPUT = "examples"
PROBABILITIES_KEY = "probabilities"
CLASSES_KEY = "classes"
# The outputs of an export's one-view `features` function (uint8 images -> both): the
# network's logits and its penultimate layer, for the checks a next run makes.
LOGITS_KEY = "logits"
EMBEDDINGS_KEY = "embeddings"

# Node ids of the pipeline, as ML Metadata records them.
EXAMPLE_GEN_NODE = "Cifar10ExampleGen"
SCHEMA_NODE = "ImportSchemaGen"
STATISTICS_NODE = "StatisticsGen"
EXAMPLE_VALIDATOR_NODE = "ExampleValidator"
VALIDATION_GATE_NODE = "DataValidationGate"
TRAINER_NODE = "Trainer"
EVALUATOR_NODE = "Evaluator"
PUSHER_NODE = "AtomicPusher"
# The first step of every run: the served state, read once from the serving folder.
SERVED_STATE_NODE = "ServedState"
# Nodes whose output depends on what the span folders or the serving folder hold when they
# run: a cached execution would hand on an old span or an old served version, so no runner
# and no submit option caches them.
RUNTIME_STATE_NODES = (SERVED_STATE_NODE, EXAMPLE_GEN_NODE)
# The pipeline's nodes in the order they run: what a complete run has a stage for.
PIPELINE_NODES = (
    SERVED_STATE_NODE,
    EXAMPLE_GEN_NODE,
    SCHEMA_NODE,
    STATISTICS_NODE,
    EXAMPLE_VALIDATOR_NODE,
    VALIDATION_GATE_NODE,
    TRAINER_NODE,
    EVALUATOR_NODE,
    PUSHER_NODE,
)

# Files the Trainer writes next to the model (model_run folder).
HISTORY_FILE = "history.json"
TRAINING_SUMMARY_FILE = "training_summary.json"

# A served model version: a numbered folder under the serving directory that holds this
# file. TF Serving loads a version once the file is there, so the pusher moves it last.
SAVED_MODEL_FILE = "saved_model.pb"
# Beside saved_model.pb in every pushed version (TF Serving ignores other files): the train
# split's statistics (DatasetFeatureStatisticsList) of the data that version was trained
# on, which the next run's drift check compares with. In DataValidationGate's output, the
# comparisons it made (JSON) and a copy of the served statistics it compared with.
SERVED_STATISTICS_FILE = "training_statistics.pb"
COMPARISON_FILE = "comparison.json"
# In the Evaluator's evaluation: the candidate's and the served model's accuracy per class on
# the served version's reference images (components/checks/reference_images.py), JSON.
REFERENCE_CHECK_FILE = "reference_classes.json"
# The spans (number -> content fingerprint) a run ingested: written by the ExampleGen into its
# Examples artifact, kept by the Pusher beside saved_model.pb; span 0 is a plain source.
SERVED_SPANS_FILE = "training_spans.json"
# In the ServedState step's output, beside its copy of the served version
# (`<uri>/Format-Serving`) and that version's training statistics: the served state
# (components/storage/served_versions.py: ServedState), which every later step reads.
SERVED_STATE_FILE = "served_state.json"
# Beside a warm-started Trainer's model (`<model uri>/`): the served version it started from
# and that version's spans, which the Pusher adds to the new version's record (lineage).
WARM_START_FILE = "warm_started_from.json"
# Beside saved_model.pb in every pushed version (ancestors' included when warm-started) and in
# the ExampleGen's Examples (its train split): the images trained on, as sorted image_digest
# values back to back. The next run drops eval images found in the served version's.
SERVED_IMAGES_FILE = "training_images.bin"
# Beside saved_model.pb in a version deployed to a Vertex AI endpoint (`compile --endpoint`):
# the endpoint, model and deployed-model resource ids (JSON), which a rollback reads to move
# the endpoint's traffic back to the version it serves again.
ENDPOINT_FILE = "endpoint.json"
# In the ExampleGen's Examples: the eval images it dropped (JSON: copies_of_train,
# seen_by_served, None when not checked, and why not), and the train records of the spans new
# to the served version that it was trained on (train_seen_by_served of new_train_records).
EVAL_DROPPED_FILE = "eval_dropped.json"
IMAGE_DIGEST_BYTES = 12
# The custom property a night with nothing new sets on the ExampleGen's Examples (1) and
# every later step passes on: nothing is validated, trained, evaluated or pushed, and the
# run succeeds with outcome `no_new_span`.
NO_NEW_SPAN_PROPERTY = "no_new_span"
NO_NEW_SPAN_REASON_PROPERTY = "no_new_span_reason"


def image_digest(image: bytes) -> bytes:
    """An image's identity for exact copies: the first 12 bytes of the SHA-1 of its pixels."""
    return hashlib.sha1(image).digest()[:IMAGE_DIGEST_BYTES]


def pack_digests(digests: Iterable[bytes]) -> bytes:
    """An image index (SERVED_IMAGES_FILE): the distinct digests, sorted, back to back."""
    return b"".join(sorted(set(digests)))


def unpack_digests(index: bytes) -> frozenset[bytes]:
    size = IMAGE_DIGEST_BYTES
    return frozenset(index[i : i + size] for i in range(0, len(index), size))


# The serving folder keeps at most this many complete versions after a push (--keep-versions;
# components/atomic_pusher/retention.py): ten nights of daily versions, about 93 MB at 9.3 MB
# each. Never fewer than the served version and the one a rollback would serve.
DEFAULT_KEEP_VERSIONS = 10
# A Vertex AI endpoint keeps this many deployed models before the served one (`compile
# --endpoint-keep`): a rollback to them moves traffic only; older ones are undeployed.
DEFAULT_ENDPOINT_KEEP = 1
MIN_KEEP_VERSIONS = 2
# What every night adds to a serving folder is bounded (docs/operations.md, "What is kept"):
# the newest night messages in .nights/ (the night that pushed a version still in the folder
# is kept too: `status` reads its accuracy there); a running night's facts folder untouched
# this long (its run died before its exit handler) is removed; rolled-back versions keep
# their files for the newest few, their records (who, why, their spans) always; a run
# folder keeps its newest `run` logs.
NIGHTS_KEPT = 30
STALE_NIGHT_SECONDS = 7 * 86400.0
ROLLED_BACK_WHOLE = 2
RUN_LOGS_KEPT = 30
