"""Executor of DataValidationGate: the schema's anomalies, the checks a schema cannot express,
skew between the splits and drift from the served model's training data, in one verdict."""

from __future__ import annotations

import json
import os

from absl import logging
from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

from components.contract import (
    COMPARISON_FILE,
    EVAL_SPLIT,
    NO_NEW_SPAN_PROPERTY,
    NO_NEW_SPAN_REASON_PROPERTY,
    SERVED_SPANS_FILE,
    SERVED_STATISTICS_FILE,
    TRAIN_SPLIT,
)
from components.storage import night_facts
from components.storage.served_versions import (
    load_served_state,
    read_spans_record,
    served_statistics_file,
)
from components.storage.tfx_files import anomalies_file, statistics_file
from components.validation_gate.checks import (
    DataDriftError,
    DataValidationError,
    DuplicatesError,
    LabelsError,
    anomaly_problems,
    statistics_problems,
)
from components.validation_gate.comparison import Comparison, compare
from components.validation_gate.duplicates import find_duplicates
from components.validation_gate.labels import check_labels
from components.validation_gate.records import (
    OUT_OF_DOMAIN_TOLERANCE,
    domain_features,
    out_of_domain,
    read_summaries,
    span_statistics,
    tolerated,
)
from components.validation_gate.spec import (
    ACCEPT_DRIFT_KEY,
    ACCEPT_DUPLICATES_KEY,
    ACCEPT_LABELS_KEY,
    EXAMPLES_KEY,
    SERVED_MODEL_KEY,
)


def _statistics(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    return statistics_pb2.DatasetFeatureStatisticsList.FromString(io_utils.read_bytes_file(path))


def served_statistics(served: list) -> tuple[str, str | None]:
    """(what the drift baseline is, path of its statistics or None): the training statistics
    of the version the run read at its start, from the ServedState step's output."""
    state = load_served_state(served[0].uri) if served else None
    if state is None or state.version is None:
        return "no served model: nothing to drift from", None
    path = served_statistics_file(served[0].uri)
    if path is None:
        return (
            f"served version {state.version} keeps no training statistics: nothing to drift from",
            None,
        )
    return f"the training data of served version {state.version}", path


def new_spans(examples: list, served: list) -> list[int] | None:
    """The window's spans the served version was not trained on (a span is seen when it
    recorded it with the same fingerprint), when it was trained on the others; None when the
    whole train split is new (or all of it was seen: a forced run)."""
    if not examples or not served:
        return None
    window = read_spans_record(os.path.join(examples[0].uri, SERVED_SPANS_FILE))
    state = load_served_state(served[0].uri)
    seen_spans = state.spans if state is not None else {}
    unseen = sorted(n for n, print_ in window.items() if seen_spans.get(n) != print_)
    return unseen if unseen and len(unseen) < len(window) else None


def _drift_side(train, schema, examples: list, unseen: list[int] | None):
    """(statistics, name) of what drift compares: the train split, or, when the served model
    was trained on part of the window (`--spans K`), only the spans it has not seen, so the
    seen ones cannot dilute a change."""
    if unseen is None:
        return train, "this run's train split"
    split_uri = artifact_utils.get_split_uri(examples, TRAIN_SPLIT)
    named = ", ".join(map(str, unseen))
    return (
        span_statistics(split_uri, unseen, schema),
        f"span{'s' if len(unseen) > 1 else ''} {named} of this run's train split "
        "(new to the served model)",
    )


def _comparisons(statistics, train, schema, served: list, output_uri: str, examples, unseen):
    """Skew of the eval split against the train split; drift of the new data (_drift_side)
    against the served version's training data, whose statistics are copied into the
    output."""
    evals = _statistics(statistics_file(statistics, EVAL_SPLIT))
    skew = compare(
        "skew", evals, train, schema, ("this run's eval split", "this run's train split")
    )
    baseline, path = served_statistics(served)
    if path is None:
        drift = Comparison("drift", "this run's train split", "", skipped=baseline)
    else:
        served_stats = _statistics(path)
        io_utils.write_bytes_file(
            os.path.join(output_uri, SERVED_STATISTICS_FILE), served_stats.SerializeToString()
        )
        new, name = _drift_side(train, schema, examples, unseen)
        drift = compare("drift", new, served_stats, schema, (name, baseline))
    return skew, drift


def _domain_outliers(split: str, found, examples: list, schema) -> tuple[list[str], dict]:
    """Images outside an image summary's domain, counted from the split's records: each
    feature's problem line when more than the tolerated share are, and the tolerated counts
    otherwise. The features counted are taken out of `found` (the line says more)."""
    features = domain_features(found)
    if not features or not examples:
        return [], {}
    frame = read_summaries(artifact_utils.get_split_uri(examples, split))
    problems, kept = [], {}
    for name, counted in out_of_domain(frame, schema, features).items():
        count, records = counted["count"], counted["records"]
        if not count:  # the records disagree with the statistics: leave TFDV's anomaly
            continue
        del found.anomaly_info[name]
        if tolerated(count, records):
            kept[name] = counted
            continue
        low, high = counted["domain"]
        problems.append(
            f"split '{split}', feature '{name}': {count:,} of {records:,} images outside the "
            f"schema's domain [{low:g}, {high:g}] (at most {100 * OUT_OF_DOMAIN_TOLERANCE:g}% "
            "are tolerated)"
        )
    return problems, kept


def _data_problems(statistics, anomalies, examples: list, schema) -> tuple[list[str], dict]:
    """The checks of the statistics and the schema's anomalies: problem lines, and the
    tolerated out-of-domain counts per split."""
    problems: list[str] = []
    for split in artifact_utils.decode_split_names(statistics.split_names):
        stats = _statistics(statistics_file(statistics, split))
        for dataset in stats.datasets:
            problems.extend(statistics_problems(split, dataset))
    outliers = {}
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        found = anomalies_pb2.Anomalies.FromString(
            io_utils.read_bytes_file(anomalies_file(anomalies, split))
        )
        too_many, outliers[split] = _domain_outliers(split, found, examples, schema)
        problems.extend(too_many + anomaly_problems(split, found))
    return problems, outliers


def _error_for(problems: list[str], drifted, mislabelled, duplicated) -> type:
    """The error that names what alone stopped the run (the night's outcome: drift, labels,
    duplicates), else DataValidationError."""
    for lines, error in ((drifted, DataDriftError), (mislabelled, LabelsError),
                         (duplicated, DuplicatesError)):  # fmt: skip
        if lines and problems == list(lines):
            return error
    return DataValidationError


def _stop_on(problems: list[str], drift, labels, copies):
    """Raises with every problem, drift, label and duplicate lines included unless accepted
    (each then logged); the hint names the flag that accepts what stopped the run. `drift`,
    `labels`, `copies`: (lines, accepted)."""
    (drifted, accept_drift), (mislabelled, accept_labels) = drift, labels
    (duplicated, accept_duplicates) = copies
    problems = list(problems)
    overridable = (
        (drifted, accept_drift, "--accept-drift"),
        (mislabelled, accept_labels, "--accept-labels"),
        (duplicated, accept_duplicates, "--accept-duplicates"),
    )
    for found, accepted, flag in overridable:
        if found and accepted:
            logging.warning("accepted (%s):\n  %s", flag, "\n  ".join(found))
        elif found:
            problems.extend(found)
    if not problems:
        return
    hints = [
        "\n(the data drifted: --accept-drift trains on it anyway)"
        if drifted and not accept_drift else "",
        "\n(the served model disagrees with the labels: --accept-labels trains on them "
        "anyway)" if mislabelled and not accept_labels else "",
        "\n(images repeat: --accept-duplicates trains on them anyway)"
        if duplicated and not accept_duplicates else "",
    ]  # fmt: skip
    raise _error_for(problems, drifted, mislabelled, duplicated)(
        "data validation failed, training will not start:\n  - "
        + "\n  - ".join(problems)
        + "".join(hints)
    )


def _labels_not_judged(labels, accept_drift: bool) -> str:
    drifted = "the images drifted from the served model's training data"
    if not accept_drift:
        return f"not judged: {drifted}"
    return (
        f"NOT JUDGED: {drifted} and --accept-drift trains on them; the served model read "
        f"{100 * labels.noise:.1f}% of the labels as wrong"
    )


def _records(statistics) -> int:
    return statistics.datasets[0].num_examples if statistics.datasets else 0


# The stops this run accepted (--accept-drift, --accept-labels, --accept-duplicates).
ACCEPTED_PROPERTY = "accepted_stops"


class Executor(base_beam_executor.BaseBeamExecutor):
    def _labels(self, train, examples: list, served: list, unseen, output_uri: str):
        """The served model's judgement of the new records' labels (scored in a Beam
        pipeline with the run's Beam arguments), or None and why not."""
        if not examples:
            return None, "no examples given to the gate"
        records = _records(train)
        return check_labels(examples, served, records, unseen, output_uri, self._make_beam_pipeline)

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        statistics = artifact_utils.get_single_instance(input_dict["statistics"])
        anomalies = artifact_utils.get_single_instance(input_dict["anomalies"])
        schema_artifact = artifact_utils.get_single_instance(input_dict["schema"])
        output = artifact_utils.get_single_instance(output_dict["comparison"])
        accept_drift = bool(exec_properties.get(ACCEPT_DRIFT_KEY, 0))
        accept_labels = bool(exec_properties.get(ACCEPT_LABELS_KEY, 0))
        accept_duplicates = bool(exec_properties.get(ACCEPT_DUPLICATES_KEY, 0))
        examples = input_dict.get(EXAMPLES_KEY) or []
        if examples and examples[0].get_int_custom_property(NO_NEW_SPAN_PROPERTY):
            reason = examples[0].get_string_custom_property(NO_NEW_SPAN_REASON_PROPERTY)
            io_utils.write_string_file(
                os.path.join(output.uri, COMPARISON_FILE), json.dumps({"no_new_span": reason})
            )
            logging.info("Nothing to validate: %s", reason)
            return
        schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(schema_artifact.uri))
        problems, outliers = _data_problems(statistics, anomalies, examples, schema)
        served = input_dict.get(SERVED_MODEL_KEY) or []
        train = _statistics(statistics_file(statistics, TRAIN_SPLIT))
        unseen = new_spans(examples, served)  # read once: drift and labels judge these
        skew, drift = _comparisons(statistics, train, schema, served, output.uri, examples, unseen)
        problems.extend(skew.problems())
        labels, why_not = self._labels(train, examples, served, unseen, output.uri)
        drifted = drift.problems() + (labels.shift_problems() if labels else [])
        copies, duplicated = find_duplicates(examples, output.uri, _records(train), bool(drifted))
        mislabelled = labels.problems() if labels else []
        if mislabelled and drifted:
            # On images unlike its training data the served model's disagreement says as much
            # about the images as about the labels: the drift lines say what happened. A run
            # that accepts the drift trains on labels nobody judged, and says so loudly.
            why_not = _labels_not_judged(labels, accept_drift)
            mislabelled = []
        verdict = {
            "skew": skew.to_json(),
            "drift": drift.to_json(),
            "accept_drift": accept_drift,
            "drift_accepted": bool(drifted) and accept_drift,
            "out_of_domain": {split: found for split, found in outliers.items() if found},
            "labels": (labels.to_json() if labels else {}) | {"skipped": why_not},
            "accept_labels": accept_labels,
            "labels_accepted": bool(mislabelled) and accept_labels,
            "duplicates": copies,
            "accept_duplicates": accept_duplicates,
            "duplicates_accepted": bool(duplicated) and accept_duplicates,
        }
        io_utils.write_string_file(os.path.join(output.uri, COMPARISON_FILE), json.dumps(verdict))
        # In ML Metadata too, on the gate's output, which the run's model descends from.
        accepted = [name for name, found, flag in (
            ("drift", drifted, accept_drift), ("labels", mislabelled, accept_labels),
            ("duplicates", duplicated, accept_duplicates),
        ) if found and flag]  # fmt: skip
        output.set_string_custom_property(ACCEPTED_PROPERTY, ",".join(accepted))
        for comparison in (skew, drift):
            logging.info("%s: %s", comparison.kind, comparison.skipped or "compared")
        logging.info("labels: %s", why_not or f"{labels.scored} records scored")
        try:
            _stop_on(
                problems,
                (drifted, accept_drift),
                (mislabelled, accept_labels),
                (duplicated, accept_duplicates),
            )
        except DataValidationError as stopped:  # kept for a compiled run's report, then raised
            _keep_stop(served, stopped)
            raise
        night_facts.write(night_facts.facts_dir_of(served), night_facts.GATE, {"passed": True})
        logging.info(
            "Data validation passed for splits %s",
            artifact_utils.decode_split_names(statistics.split_names),
        )


def _keep_stop(served: list, stopped: DataValidationError) -> None:
    """The gate's stop lines and which check stopped it, for a compiled run's report."""
    lines = [line[4:] for line in str(stopped).splitlines() if line.startswith("  - ")]
    night_facts.write(
        night_facts.facts_dir_of(served),
        night_facts.GATE,
        {"kind": type(stopped).__name__, "stops": lines, "error": str(stopped)},
    )
