"""Skew (eval split against train split) and drift (this run's training data against the data
the served model was trained on) with TFDV's own comparators, whose thresholds live in the
curated schema: Jensen-Shannon divergence for the image summaries, L-infinity for the label.

Pure functions over TFDV protos; the executor reads the files and decides what stops the run.
"""

from __future__ import annotations

import dataclasses
import importlib.resources

from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

# Below this many records on either side a distance says more about the sample than about
# the data (benchmarks/drift_thresholds.py: same-distribution samples of 1,000 stay below
# every threshold, smaller ones need not), so the pair is reported as not compared.
MIN_COMPARED_EXAMPLES = 1000
# A schema feature with this annotation tag was added since the served version: while the
# served statistics lack it, it is named as not compared instead of stopping the run.
NEW_FEATURE_TAG = "new_feature"

_MEASURE_NAMES = {
    anomalies_pb2.DriftSkewInfo.Measurement.L_INFTY: "L-infinity distance",
    anomalies_pb2.DriftSkewInfo.Measurement.JENSEN_SHANNON_DIVERGENCE: "Jensen-Shannon divergence",
    anomalies_pb2.DriftSkewInfo.Measurement.NORMALIZED_ABSOLUTE_DIFFERENCE: (
        "normalized absolute difference"
    ),
}


@dataclasses.dataclass(frozen=True)
class Distance:
    """One feature's distance between two data sets, and the schema's threshold for it."""

    feature: str
    measure: str
    value: float
    threshold: float

    @property
    def over(self) -> bool:
        return self.value > self.threshold


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A comparison of `new` against `old` (the names say which data sets they are): the
    distances, or why there are none (`skipped`)."""

    kind: str  # "skew" or "drift"
    new: str
    old: str
    distances: tuple[Distance, ...] = ()
    skipped: str = ""
    # Compared features one side lacks: {feature: the data set without it}.
    missing: dict[str, str] = dataclasses.field(default_factory=dict)
    # Features not compared, each with the reason (a feature new in the schema).
    not_compared: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def over(self) -> tuple[Distance, ...]:
        return tuple(d for d in self.distances if d.over)

    def problems(self) -> list[str]:
        """One line per feature beyond its threshold or missing from one side, naming the
        two data sets."""
        return [
            f"{self.kind}: feature '{d.feature}': {d.measure} {d.value:.4f} > threshold "
            f"{d.threshold:g} ({self.new} against {self.old})"
            for d in self.over
        ] + [
            f"{self.kind}: feature '{feature}': missing from {side}, so it cannot be compared"
            for feature, side in sorted(self.missing.items())
        ]

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "new": self.new,
            "old": self.old,
            "skipped": self.skipped,
            "distances": [dataclasses.asdict(d) | {"over": d.over} for d in self.distances],
            "missing": dict(self.missing),
            "not_compared": dict(self.not_compared),
        }


def statistics_options(schema: schema_pb2.Schema | None = None):
    """The `tfdv.StatsOptions` StatisticsGen computes the statistics compared here with (in
    the pipeline, its tests and benchmarks.drift_thresholds): TFDV's sketches (Misra-Gries,
    KMV) for string top values and unique counts instead of its exact Beam combiners. The
    ten labels' counts stay exact (a sketch of more slots than values is); the unique count
    of 50,000 distinct `record_id`s becomes an estimate, which nothing checks; StatisticsGen
    takes a fifth less time (measured when it was written; git log has the figures)."""
    import tensorflow_data_validation as tfdv  # TFX's own dependency; seconds to import

    return tfdv.StatsOptions(schema=schema, use_sketch_based_topk_uniques=True)


def load_schema(text: str | None = None) -> schema_pb2.Schema:
    """The curated schema (from the installed package unless `text` is given)."""
    from google.protobuf import text_format

    if text is None:
        text = (importlib.resources.files("cifar10_data") / "schema" / "schema.pbtxt").read_text()
    return text_format.Parse(text, schema_pb2.Schema())


def _one_dataset(stats: statistics_pb2.DatasetFeatureStatisticsList):
    return statistics_pb2.DatasetFeatureStatisticsList(datasets=stats.datasets[:1])


def compare(
    kind: str,
    new: statistics_pb2.DatasetFeatureStatisticsList,
    old: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    names: tuple[str, str],
    min_examples: int = MIN_COMPARED_EXAMPLES,
) -> Comparison:
    """TFDV's skew (`kind="skew"`: `old` is the training side) or drift distances of `new`
    against `old`, every compared feature with its measure, value and threshold."""
    import tensorflow_data_validation as tfdv

    counts = [s.datasets[0].num_examples if s.datasets else 0 for s in (new, old)]
    if min(counts) < min_examples:
        return Comparison(
            kind,
            *names,
            skipped=f"too few records to compare ({min(counts):,} < {min_examples:,})",
        )
    if kind == "skew":
        anomalies = tfdv.validate_statistics(
            _one_dataset(old), schema, serving_statistics=_one_dataset(new)
        )
    else:
        anomalies = tfdv.validate_statistics(
            _one_dataset(new), schema, previous_statistics=_one_dataset(old)
        )
    distances = []
    for info in anomalies.drift_skew_info:
        measurements = info.skew_measurements if kind == "skew" else info.drift_measurements
        for m in measurements:
            name = _MEASURE_NAMES.get(m.type, "distance")
            distances.append(Distance("/".join(info.path.step), name, m.value, m.threshold))
    missing, not_compared = _missing_sides(anomalies, schema, names)
    return Comparison(
        kind,
        *names,
        distances=tuple(sorted(distances, key=lambda d: d.feature)),
        missing=missing,
        not_compared=not_compared,
    )


def _missing_sides(
    anomalies: anomalies_pb2.Anomalies, schema: schema_pb2.Schema, names: tuple[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Compared features that TFDV could not compare because one side lacks them (it reports
    those as anomalies, not distances): {feature: the side without it}, and those of them the
    schema tags as new, which the older side cannot have yet."""
    new_features = {f.name for f in schema.feature if NEW_FEATURE_TAG in f.annotation.tag}
    sides = {
        anomalies_pb2.AnomalyInfo.COMPARATOR_CONTROL_DATA_MISSING: names[1],
        anomalies_pb2.AnomalyInfo.COMPARATOR_TREATMENT_DATA_MISSING: names[0],
    }
    missing, not_compared = {}, {}
    for feature, info in anomalies.anomaly_info.items():
        for reason in info.reason:
            side = sides.get(reason.type)
            if side is None:
                continue
            if feature in new_features and side == names[1]:
                not_compared[feature] = "new in the schema since the served version"
            else:
                missing[feature] = side
    return missing, not_compared
