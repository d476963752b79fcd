"""A night with nothing new passes through every step after the ExampleGen: the Trainer
trains nothing (TFX's executor, the local multi-worker one and Vertex's, which must not
start a CustomJob), and each output artifact says why it is empty."""

import json

import pytest
from tfx.components.trainer import executor as tfx_trainer_executor
from tfx.types import standard_artifacts

from components.trainer import local_workers, nothing_new


def _night(tmp_path, no_new_span=True):
    examples = standard_artifacts.Examples()
    if no_new_span:
        examples.set_int_custom_property("no_new_span", 1)
        examples.set_string_custom_property("no_new_span_reason", "no new span: version 9")
    model, model_run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model.uri, model_run.uri = str(tmp_path / "model"), str(tmp_path / "model_run")
    return {"examples": [examples]}, {"model": [model], "model_run": [model_run]}


def _refuse(*_args, **_kwargs):
    raise AssertionError("training started on a night with nothing new")


@pytest.mark.parametrize("executor", ["tfx", "local_workers", "vertex"])
def test_the_trainer_trains_nothing_and_says_why(tmp_path, monkeypatch, executor):
    if executor == "vertex":
        from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex

        from components.trainer import vertex_trainer

        monkeypatch.setattr(vertex.GenericExecutor, "Do", _refuse)
        make = vertex_trainer.Executor
    else:
        monkeypatch.setattr(tfx_trainer_executor.GenericExecutor, "Do", _refuse)
        monkeypatch.setattr(local_workers, "run_group", _refuse)
        make = {"tfx": nothing_new.GenericExecutor, "local_workers": local_workers.Executor}[
            executor
        ]
    inputs, outputs = _night(tmp_path)
    config = json.dumps({local_workers.LOCAL_WORKERS_KEY: 2})
    make().Do(inputs, outputs, {"custom_config": config})
    for name in ("model", "model_run"):
        assert (tmp_path / name / "NOTHING_TRAINED").read_text() == "no new span: version 9"
        assert outputs[name][0].get_int_custom_property("no_new_span") == 1


def test_a_night_with_a_new_span_trains(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(
        tfx_trainer_executor.GenericExecutor, "Do", lambda *args: started.append(True)
    )
    inputs, outputs = _night(tmp_path, no_new_span=False)
    nothing_new.GenericExecutor().Do(inputs, outputs, {})
    assert started == [True] and not (tmp_path / "model" / "NOTHING_TRAINED").exists()
