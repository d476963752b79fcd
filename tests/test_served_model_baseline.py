"""ServedModelBaseline: the newest complete served version becomes the Evaluator's
baseline; nothing served means no baseline (the absolute gate alone)."""

from tfx.components.evaluator import executor as tfx_evaluator
from tfx.types import standard_artifacts

from components import keras_autograph
from components.served_model_baseline import executor as baseline


def _serve(base, version, graph=b"graph"):
    folder = base / version
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(graph)
    (folder / "variables" / "variables.index").write_bytes(b"index")
    return folder


def _run(tmp_path, serving_model_dir):
    out = standard_artifacts.Model()
    out.uri = str(tmp_path / "baseline_artifact")
    candidate = standard_artifacts.Model()
    candidate.uri = str(tmp_path / "candidate")
    baseline.Executor().Do(
        {"model": [candidate]},
        {"baseline_model": [out]},
        {"serving_model_dir": str(serving_model_dir)},
    )
    return out


def test_newest_complete_numeric_version_is_served(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "9")
    _serve(base, "10")
    (base / "11").mkdir()  # a version without saved_model.pb is not served
    _serve(base, ".staging-12")
    _serve(base, "latest")
    assert baseline.newest_served_version(str(base)) == "10"


def test_nothing_served_when_the_folder_is_missing_or_empty(tmp_path):
    assert baseline.newest_served_version(str(tmp_path / "absent")) is None
    (tmp_path / "empty").mkdir()
    assert baseline.newest_served_version(str(tmp_path / "empty")) is None


def test_baseline_artifact_holds_the_newest_served_model(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _serve(base, "100", b"old")
    _serve(base, "200", b"new")
    out = _run(tmp_path, base)
    assert (
        tmp_path / "baseline_artifact" / "Format-Serving" / "saved_model.pb"
    ).read_bytes() == b"new"
    assert baseline.holds_saved_model(out)
    assert out.get_int_custom_property(baseline.SERVED_VERSION_KEY) == 200
    assert out.get_string_custom_property(baseline.SERVED_FROM_KEY) == str(base / "200")


def test_nothing_served_leaves_an_empty_baseline(tmp_path):
    out = _run(tmp_path, tmp_path / "serving" / "cifar10")
    assert not baseline.holds_saved_model(out)
    assert out.get_int_custom_property(baseline.SERVED_VERSION_KEY) == 0


def _evaluate(monkeypatch, tmp_path, baseline_artifact):
    """Runs the wrapper with TFX's Evaluator replaced by a recorder of what it receives."""
    received = {}
    monkeypatch.setattr(
        tfx_evaluator.Executor, "Do", lambda self, inputs, outputs, props: received.update(inputs)
    )
    candidate = standard_artifacts.Model()
    candidate.uri = str(tmp_path / "candidate")
    baseline.EvaluatorExecutor().Do(
        {"model": [candidate], "baseline_model": [baseline_artifact]}, {}, {}
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
    baseline.EvaluatorExecutor().Do({}, {}, {})
    assert keras_autograph._RULE in rules_seen
