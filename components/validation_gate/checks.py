"""The rules that stop a run before training: pure functions over TFDV protos."""

from __future__ import annotations

from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2

from components.contract import IMAGE_BYTES, NUM_CLASSES
from components.contract import IMAGE_KEY as IMAGE_FEATURE
from components.contract import LABEL_KEY as LABEL_FEATURE


class DataValidationError(RuntimeError):
    """The data failed validation; the message lists every problem found."""


class DataDriftError(DataValidationError):
    """The data is valid and unskewed but drifted from the served model's training data."""


class LabelsError(DataValidationError):
    """The data is valid, but the served model disagrees with its labels (exchanged pairs,
    too many wrong labels): nothing else stopped it."""


class DuplicatesError(DataValidationError):
    """The data is valid, but too many of its images are copies: nothing else stopped it."""


def _feature(stats: statistics_pb2.DatasetFeatureStatistics, name: str):
    for feature in stats.features:
        if feature.path.step == [name] or feature.name == name:
            return feature
    return None


def anomaly_problems(split: str, anomalies: anomalies_pb2.Anomalies) -> list[str]:
    """One line per anomaly that ExampleValidator found against the curated schema."""
    problems = []
    for name, info in sorted(anomalies.anomaly_info.items()):
        reasons = "; ".join(f"{r.short_description}: {r.description}" for r in info.reason)
        problems.append(f"split '{split}', feature '{name}': {reasons or info.description}")
    if anomalies.HasField("dataset_anomaly_info"):
        reasons = "; ".join(
            f"{r.short_description}: {r.description}" for r in anomalies.dataset_anomaly_info.reason
        )
        problems.append(f"split '{split}', dataset: {reasons}")
    return problems


def statistics_problems(split: str, stats: statistics_pb2.DatasetFeatureStatistics) -> list[str]:
    """Checks the schema cannot express: non-empty split, exact image size, all classes."""
    where = f"split '{split}'"
    if stats.num_examples == 0:
        return [f"{where}: the split is empty"]
    problems = []
    image = _feature(stats, IMAGE_FEATURE)
    if image is None:
        problems.append(f"{where}, feature '{IMAGE_FEATURE}': missing")
    else:
        sizes = image.bytes_stats
        if (sizes.min_num_bytes, sizes.max_num_bytes) != (IMAGE_BYTES, IMAGE_BYTES):
            problems.append(
                f"{where}, feature '{IMAGE_FEATURE}': images are {sizes.min_num_bytes:g} to "
                f"{sizes.max_num_bytes:g} bytes, expected exactly {IMAGE_BYTES}"
            )
    label = _feature(stats, LABEL_FEATURE)
    if label is None:
        problems.append(f"{where}, feature '{LABEL_FEATURE}': missing")
    else:
        present = {
            int(bucket.label)
            for bucket in label.string_stats.rank_histogram.buckets
            if bucket.label.lstrip("-").isdigit()
        }
        missing = sorted(set(range(NUM_CLASSES)) - present)
        if missing:
            problems.append(f"{where}, feature '{LABEL_FEATURE}': classes {missing} are absent")
    return problems
