"""Load-tested before it is visible (issue 62 item 3): the export carries TF Serving's warmup
records and its own answers to them, and the Pusher loads the staged copy in a fresh process,
replays the records and refuses a version whose variables are damaged or whose answers
changed, leaving the served version as it was."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2
from test_atomic_pusher import _push, _versions
from tfx.types import standard_artifacts

from components.atomic_pusher import executor as pusher
from components.contract import IMAGES_SIGNATURE
from components.serving import load_test, warmup
from components.trainer import export
from components.trainer.keras import keras

PASSED = "passed: 8 warmup records (100 images) replayed"


def _network(seed: int) -> keras.Model:
    """Untrained, but shaped like the real thing: uint8 [N,32,32,3] -> 10 logits."""
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.layers.Input((32, 32, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )


def _images(count: int = 300) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (count, 32, 32, 3), dtype=np.uint8)


def _exported(folder: Path, seed: int) -> Path:
    """A SavedModel as the Trainer leaves it: the export, then its warmup records."""
    module = export.export_serving_model(_network(seed), str(folder))
    assert export.write_warmup_requests(module, _images(), str(folder), "cifar10") == 100
    return folder


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("exported")
    return {seed: _exported(root / f"model-{seed}", seed) for seed in (1, 2)}


def test_the_warmup_file_is_tf_servings_format_for_this_signature(exported):
    path = exported[1] / warmup.WARMUP_FILE
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert 0 < len(records) <= 1000 and len(records) == len(warmup.BATCH_SIZES) + 1
    loaded = tf.saved_model.load(str(exported[1]))
    inputs = set(loaded.signatures[IMAGES_SIGNATURE].structured_input_signature[1])
    images = 0
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record)
        assert log.WhichOneof("log_type") == "predict_log"
        request = log.predict_log.request
        assert request.model_spec.name == "cifar10"
        assert request.model_spec.signature_name == IMAGES_SIGNATURE
        assert request.model_spec.signature_name in loaded.signatures
        assert set(request.inputs) == inputs
        payloads = tf.make_ndarray(request.inputs["images"])
        assert {tf.io.decode_png(p).shape for p in payloads} == {(32, 32, 3)}
        images += len(payloads)
    kept = warmup.read_answers(str(exported[1]))
    assert images == warmup.WARMUP_IMAGES and kept.shape == (images, 10)


def test_the_load_test_passes_a_good_version(exported, tmp_path):
    staged = tmp_path / "staged"
    shutil.copytree(exported[1], staged)
    said = load_test.load_test(str(staged))
    assert said.startswith(PASSED), said


def _model_artifact(tmp_path, source: Path, name: str):
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / name)
    shutil.copytree(source, tmp_path / name / "Format-Serving")
    return model


def _truncate_variables(model) -> None:
    folder = Path(model.uri) / "Format-Serving" / "variables"
    [data] = [p for p in folder.iterdir() if p.name.startswith("variables.data-")]
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])


def _swap_weights(model, other: Path) -> None:
    """The model's variables replaced by another network's: its answers are no longer the
    ones the Trainer kept."""
    folder = Path(model.uri) / "Format-Serving" / "variables"
    shutil.rmtree(folder)
    shutil.copytree(other / "variables", folder)


@pytest.mark.parametrize("damage", ["truncated variables", "changed model"])
def test_a_version_that_fails_its_load_test_is_not_pushed(exported, tmp_path, damage, monkeypatch):
    base = tmp_path / "serving" / "cifar10"
    facts = tmp_path / "facts"  # a compiled night's facts folder, for its report
    monkeypatch.setattr(pusher.night_facts, "facts_dir_of", lambda served: str(facts))
    first = _push(
        tmp_path, _model_artifact(tmp_path, exported[1], "first"), True, base, load_tested=True
    )
    [served] = _versions(base)
    assert first.get_string_custom_property(pusher.LOAD_TEST_KEY).startswith(PASSED)
    bad = _model_artifact(tmp_path, exported[1], "second")
    if damage == "truncated variables":
        _truncate_variables(bad)
    else:
        _swap_weights(bad, exported[2])
    with pytest.raises(pusher.LoadTestFailed, match="nothing pushed, the served version stays"):
        _push(tmp_path, bad, True, base, load_tested=True)
    kept = json.loads((facts / "AtomicPusher.json").read_text())
    assert "nothing pushed, the served version stays" in kept["load_test_failed"]
    assert _versions(base) == [served]
    assert not [n for n in os.listdir(base) if n.startswith(pusher.STAGING_PREFIX)]
    served_files = {p.name for p in (base / served).iterdir()}
    assert {"saved_model.pb", "variables", "assets.extra"} <= served_files


def test_a_model_without_warmup_records_is_not_pushed(tmp_path, monkeypatch):
    """Fail closed (issue 71 item 1): a version that cannot be load-tested never becomes
    visible; the night is load_test_failed, saying why, and nothing is served."""
    from test_atomic_pusher import _model

    facts = tmp_path / "facts"
    monkeypatch.setattr(pusher.night_facts, "facts_dir_of", lambda served: str(facts))
    base = tmp_path / "serving" / "cifar10"
    with pytest.raises(pusher.LoadTestFailed, match="no warmup records; nothing pushed"):
        _push(tmp_path, _model(tmp_path), True, base, load_tested=True)
    assert _versions(base) == []
    assert (
        "no warmup records"
        in json.loads((facts / "AtomicPusher.json").read_text())["load_test_failed"]
    )


def test_warmup_records_that_cannot_be_written_fail_the_export(tmp_path):
    """The Trainer no longer exports a version without its warmup records (it logged and
    went on, and the Pusher then skipped the load test)."""

    class Broken:
        def serve_images(self, images):
            raise ValueError("the signature rejects its own images")

    with pytest.raises(RuntimeError, match="warmup records.*rejects its own images"):
        export.write_warmup_requests(Broken(), _images(), str(tmp_path), "cifar10")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_answers_that_are_not_finite_fail_the_load_test(value):
    from components.serving.load_test import compare

    kept = np.full((2, 3), np.float32(value))
    with pytest.raises(ValueError, match="not finite"):
        compare(kept.copy(), kept)
    good = np.array([[0.7, 0.2, 0.1], [0.5, 0.4, 0.1]], np.float32)
    broken = good.copy()
    broken[1, 2] = value
    with pytest.raises(ValueError, match="not finite"):
        compare(broken, good)


def test_answers_that_differ_beyond_the_tolerance_are_refused():
    from components.serving.load_test import TOLERANCE, compare

    kept = np.array([[0.7, 0.2, 0.1], [0.5, 0.5 - TOLERANCE / 2, 0.0]], np.float32)
    assert compare(kept + TOLERANCE / 4, kept) <= TOLERANCE
    tie = kept[:, [1, 0, 2]].copy()  # the second record's top class flips within rounding
    tie[0] = kept[0]
    assert compare(tie, kept) <= TOLERANCE
    with pytest.raises(ValueError, match="change their top class"):
        compare(kept[:, [1, 0, 2]], kept)
    with pytest.raises(ValueError, match="differs by"):
        compare(kept + 10 * TOLERANCE, kept)


def test_a_pipeline_run_pushes_a_load_tested_version_with_its_warmup_records(first_run):
    """One `run` on tiny data: the pushed version holds the warmup records, and the summary
    and the printed report say the load test passed, with its time."""
    out, summary, done = first_run
    version = Path(summary["pushed_version_dir"])
    assert (version / warmup.WARMUP_FILE).is_file() and (version / warmup.ANSWERS_FILE).is_file()
    assert summary["load_test"].startswith(PASSED)
    assert " s (a fresh process, end to end)" in summary["load_test"]
    assert f"load test      {summary['load_test']}" in done.stdout


def test_a_failed_load_test_is_its_own_outcome_and_exit_status(tmp_path, monkeypatch, capsys):
    """`load_test_failed` in the summary, exit status 9, even wrapped by the orchestrator."""
    from types import SimpleNamespace

    from components.night_report import message as nights
    from components.serving.load_test import LoadTestFailed
    from pipeline.cli import run as cli_run
    from pipeline.common import exit_status
    from pipeline.local import runner
    from pipeline.local.summary import RunSummary

    failure = RuntimeError("the AtomicPusher execution failed")
    failure.__cause__ = LoadTestFailed("the staged version failed its load test (...)")
    facts = RunSummary(run_id="", record_counts={}, stage_seconds={}, stage_states={}, artifacts={})
    assert runner.outcome(facts, failure) == "load_test_failed" in nights.RED_OUTCOMES
    prepared = (
        SimpleNamespace(source_uri="/data"),
        SimpleNamespace(numbers=[0], counts={"train": 1, "test": 1}),
    )
    monkeypatch.setattr(cli_run, "_prepared", lambda *_: prepared)

    def run(*_):
        raise failure

    monkeypatch.setattr(runner, "run", run)
    assert cli_run._run(SimpleNamespace(), tmp_path, {}) == exit_status.LOAD_TEST_FAILED == 9
    assert "failed its load test" in capsys.readouterr().err


def test_a_version_that_fails_its_load_test_is_never_deployed_to_an_endpoint(
    exported, tmp_path, monkeypatch
):
    """`compile --endpoint`: the endpoint gets all traffic at deploy time, so the load test
    runs before the deploy, not only before the serving folder's commit."""
    from test_vertex_endpoint import IDS
    from test_vertex_endpoint import _push as push_to_endpoint

    from components.atomic_pusher import vertex_endpoint

    deploys = []
    monkeypatch.setattr(vertex_endpoint, "deploy", lambda *args: deploys.append(args) or IDS)
    bad = _model_artifact(tmp_path, exported[1], "bad")
    _truncate_variables(bad)
    base = tmp_path / "serving"
    with pytest.raises(pusher.LoadTestFailed, match="nothing pushed"):
        push_to_endpoint(tmp_path, bad, base, load_tested=True)
    assert deploys == []
    assert not base.exists() or _versions(base) == []


def test_the_kept_answers_are_computed_as_a_cpu_server_computes_them(tmp_path):
    """A model trained on a GPU exports from a process whose matmuls run in TF32 there (10-bit
    mantissas): answers kept that way differ from a CPU server's by more than the tolerance
    through arithmetic alone. They are computed on the CPU, TF32 off."""
    module = export.export_serving_model(_network(3), str(tmp_path / "m"))
    seen = []
    serve = module.serve_images

    def spy(**inputs):
        answer = serve(**inputs)
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        seen.append((tf32, answer["probabilities"].device))
        return answer

    assert tf.config.experimental.tensor_float_32_execution_enabled()  # TF's default
    warmup.write(spy, _images(), str(tmp_path / "m"), "cifar10")
    assert seen and all(not tf32 and device.endswith("CPU:0") for tf32, device in seen), seen
    assert tf.config.experimental.tensor_float_32_execution_enabled()  # restored


def test_a_mixed_precision_network_passes_and_a_changed_one_fails(tmp_path):
    """A network trained in bf16 (mixed_bfloat16, as the Trainer runs on a bf16 CPU) is
    exported as the Trainer exports it, a float32 copy, and passes the load test; the same
    version with its last layer's weights changed by 1% fails."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        trained = _network(4)
        assert trained.layers[-1].compute_dtype == "bfloat16"
    finally:
        keras.mixed_precision.set_global_policy(previous)
    network = export.float32_copy(trained, lambda: _network(4))
    folder = tmp_path / "bf16"
    module = export.export_serving_model(network, str(folder))
    export.write_warmup_requests(module, _images(), str(folder), "cifar10")
    said = load_test.load_test(str(folder))
    assert said.startswith(PASSED), said
    kernel = network.layers[-1].kernel
    kernel.assign(kernel * 1.01)
    changed = tmp_path / "changed"
    export.export_serving_model(network, str(changed))
    shutil.copytree(folder / "assets.extra", changed / "assets.extra")
    with pytest.raises(pusher.LoadTestFailed, match="a probability differs by"):
        load_test.load_test(str(changed))
