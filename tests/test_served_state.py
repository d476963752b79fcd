"""ServedState: the serving folder read once at the start of a run, into one artifact that every
later step reads (the served version, its spans, ancestors' included, its training statistics
and a copy of the model); and the Evaluator that takes that copy as its baseline."""

import json

from tfx.components.evaluator import executor as tfx_evaluator
from tfx.types import standard_artifacts

from components.runtime import keras_autograph
from components.served_state import executor as served_state
from components.storage import served_versions


def _serve(base, version, graph=b"graph", spans=None, statistics=None):
    folder = base / version
    (folder / "variables").mkdir(parents=True)
    (folder / "variables" / "variables.index").write_bytes(b"index")
    if spans is not None:
        record = {"spans": sorted(spans), "fingerprints": {str(k): v for k, v in spans.items()}}
        (folder / "training_spans.json").write_text(json.dumps(record))
    if statistics is not None:
        (folder / "training_statistics.pb").write_bytes(statistics)
    (folder / "saved_model.pb").write_bytes(graph)  # last, as every push writes it
    return folder


def _run(tmp_path, serving_model_dir, name="served_artifact"):
    out = standard_artifacts.Model()
    out.uri = str(tmp_path / name)
    served_state.Executor().Do(
        {}, {"served_model": [out]}, {"serving_model_dir": str(serving_model_dir)}
    )
    return out


def test_newest_complete_numeric_version_is_served(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "9")
    _serve(base, "10")
    (base / "11").mkdir()  # a version without saved_model.pb is not served
    _serve(base, ".staging-12")
    _serve(base, "latest")
    assert served_versions.newest_complete_version(str(base)) == "10"
    assert served_versions.complete_versions(str(base)) == ["9", "10"]


def test_nothing_served_when_the_folder_is_missing_or_empty(tmp_path):
    assert served_versions.newest_complete_version(str(tmp_path / "absent")) is None
    (tmp_path / "empty").mkdir()
    assert served_versions.newest_complete_version(str(tmp_path / "empty")) is None


def test_the_artifact_holds_the_newest_served_model_its_spans_and_statistics(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "100", b"old", spans={1: "aaa"}, statistics=b"old stats")
    _serve(base, "200", b"new", spans={1: "aaa", 2: "bbb"}, statistics=b"new stats")
    out = _run(tmp_path, base)
    uri = tmp_path / "served_artifact"
    assert (uri / "Format-Serving" / "saved_model.pb").read_bytes() == b"new"
    assert (uri / "training_statistics.pb").read_bytes() == b"new stats"
    assert served_state.holds_saved_model(out)
    assert out.get_int_custom_property(served_state.SERVED_VERSION_KEY) == 200
    assert out.get_string_custom_property(served_state.SERVED_FROM_KEY) == str(base / "200")
    state = served_versions.load_served_state(str(uri))
    assert state.version == "200" and state.spans == {1: "aaa", 2: "bbb"}
    assert state.published == {1: ("aaa", "100"), 2: ("bbb", "200")}
    assert served_versions.served_statistics_file(str(uri)) == str(uri / "training_statistics.pb")


def test_a_version_without_statistics_or_spans_still_serves(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "7")
    out = _run(tmp_path, base)
    state = served_versions.load_served_state(out.uri)
    assert state.version == "7" and state.spans == {} and state.published == {}
    assert served_versions.served_statistics_file(out.uri) is None


def test_nothing_served_leaves_the_state_alone(tmp_path):
    out = _run(tmp_path, tmp_path / "serving" / "cifar10")
    assert not served_state.holds_saved_model(out)
    assert out.get_int_custom_property(served_state.SERVED_VERSION_KEY) == 0
    assert served_versions.load_served_state(out.uri).version is None


def test_the_state_is_read_once_at_the_start_later_pushes_do_not_change_it(tmp_path):
    """What every later step sees is what the first step read, even when a version is pushed
    while the run goes on."""
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "100", b"first", spans={1: "aaa"})
    out = _run(tmp_path, base)
    _serve(base, "300", b"pushed meanwhile", spans={1: "aaa", 2: "ccc"})
    state = served_versions.load_served_state(out.uri)
    assert state.version == "100" and state.spans == {1: "aaa"}
    assert (tmp_path / "served_artifact" / "Format-Serving" / "saved_model.pb").read_bytes() == (
        b"first"
    )


def _evaluate(monkeypatch, tmp_path, baseline_artifact):
    """Runs the wrapper with TFX's Evaluator replaced by a recorder of what it receives."""
    received = {}
    monkeypatch.setattr(
        tfx_evaluator.Executor, "Do", lambda self, inputs, outputs, props: received.update(inputs)
    )
    candidate = standard_artifacts.Model()
    candidate.uri = str(tmp_path / "candidate")
    examples = standard_artifacts.Examples()
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(tmp_path / "evaluation"), str(tmp_path / "blessing")
    served_state.EvaluatorExecutor().Do(
        {"model": [candidate], "baseline_model": [baseline_artifact], "examples": [examples]},
        {"evaluation": [evaluation], "blessing": [blessing]},
        {},
    )
    return received


def test_evaluator_drops_an_empty_baseline(tmp_path, monkeypatch):
    empty = _run(tmp_path, tmp_path / "nothing")
    received = _evaluate(monkeypatch, tmp_path, empty)
    assert "baseline_model" not in received and "model" in received


def test_evaluator_keeps_a_served_baseline(tmp_path, monkeypatch):
    _serve(tmp_path / "serving", "5")
    served = _run(tmp_path, tmp_path / "serving")
    received = _evaluate(monkeypatch, tmp_path, served)
    assert received["baseline_model"] == [served]


def test_evaluator_keeps_autograph_out_of_tf_keras(tmp_path, monkeypatch):
    """In its own container nothing else sets the rule, and AutoGraph rewrote the Keras
    accuracy metric once per slice (about 6 s)."""
    from tensorflow.python.autograph.core import config as autograph_config

    without = tuple(r for r in autograph_config.CONVERSION_RULES if r != keras_autograph._RULE)
    monkeypatch.setattr(autograph_config, "CONVERSION_RULES", without)
    rules_seen = []
    monkeypatch.setattr(
        tfx_evaluator.Executor,
        "Do",
        lambda *_: rules_seen.extend(autograph_config.CONVERSION_RULES),
    )
    served_state.EvaluatorExecutor().Do({"examples": [standard_artifacts.Examples()]}, {}, {})
    assert keras_autograph._RULE in rules_seen


def test_a_night_with_nothing_new_evaluates_nothing_and_blesses_nothing(tmp_path, monkeypatch):
    """The Evaluator passes the night on: TFMA never runs, the blessing says not blessed and
    why, so TFX's Pusher and this project's push nothing."""
    monkeypatch.setattr(
        tfx_evaluator.Executor, "Do", lambda *_: (_ for _ in ()).throw(AssertionError)
    )
    examples = standard_artifacts.Examples()
    examples.set_int_custom_property("no_new_span", 1)
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / "blessing")
    served_state.EvaluatorExecutor().Do(
        {"examples": [examples], "model": [standard_artifacts.Model()]},
        {"blessing": [blessing]},
        {},
    )
    assert blessing.get_int_custom_property("blessed") == 0
    assert blessing.get_int_custom_property("no_new_span") == 1
    assert (tmp_path / "blessing" / "NOT_BLESSED").exists()


def test_the_artifact_holds_the_served_versions_training_image_index(tmp_path):
    """The ExampleGen drops eval images the served model was trained on: the index is read
    once with the rest of the served state. A version pushed before indexes has none."""
    base = tmp_path / "serving" / "cifar10"
    folder = _serve(base, "100", spans={1: "aaa"})
    (folder / "training_images.bin").write_bytes(b"d" * 24)
    out = _run(tmp_path, base)
    assert (tmp_path / "served_artifact" / "training_images.bin").read_bytes() == b"d" * 24
    assert served_versions.served_images_file(out.uri) == str(
        tmp_path / "served_artifact" / "training_images.bin"
    )
    _serve(base, "200")
    newer = _run(tmp_path, base, name="newer")
    assert served_versions.served_images_file(newer.uri) is None
