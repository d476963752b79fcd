"""AtomicPusher: only blessed models, complete versions only, older versions kept."""

import json
import os
import re
from unittest import mock

import pytest
from tfx.types import standard_artifacts

from components.atomic_pusher import executor as pusher


def _model(tmp_path, name="model"):
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / name)
    serving = tmp_path / name / "Format-Serving"
    (serving / "variables").mkdir(parents=True)
    (serving / "saved_model.pb").write_bytes(b"graph-" + name.encode())
    (serving / "variables" / "variables.index").write_bytes(b"index")
    (serving / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    return model


def _blessing(tmp_path, blessed: bool):
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / f"blessing{int(blessed)}")
    blessing.set_int_custom_property("blessed", int(blessed))
    return blessing


def _fixture_load_test(staged: str) -> str:
    """The protocol tests' fixture models are a few bytes, not loadable SavedModels: their
    load test is this stand-in (tests/test_warmup.py runs the real one on real exports)."""
    return "passed: fixture model (not loaded)"


def _push(tmp_path, model, blessed, base, served=None, examples=None, load_tested=False):
    """The Pusher's Do on `model`; `load_tested` runs the real load test, else the stand-in."""
    if not load_tested:
        with mock.patch.object(pusher, "load_test", _fixture_load_test):
            return _push(tmp_path, model, blessed, base, served, examples, True)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    inputs = {"model": [model], "model_blessing": [_blessing(tmp_path, blessed)]}
    if served is not None:
        inputs["served_model"] = [served]
    if examples is not None:
        inputs["examples"] = [examples]
    pusher.Executor().Do(inputs, {"pushed_model": [pushed]}, {pusher.BASE_DIRECTORY_KEY: str(base)})
    return pushed


def _versions(base):
    return sorted(n for n in os.listdir(base) if n.isdigit()) if base.exists() else []


def test_blessed_model_is_pushed_in_serving_layout(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    pushed = _push(tmp_path, _model(tmp_path), True, base)
    [version] = _versions(base)
    assert (base / version / "saved_model.pb").read_bytes() == b"graph-model"
    assert (base / version / "variables" / "variables.index").exists()
    assert pushed.get_int_custom_property("pushed") == 1
    assert pushed.get_string_custom_property("pushed_destination") == str(base / version)


def test_unblessed_model_is_not_pushed_and_old_versions_stay(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _push(tmp_path, _model(tmp_path, "first"), True, base)
    before = _versions(base)
    pushed = _push(tmp_path, _model(tmp_path, "second"), False, base)
    assert _versions(base) == before
    assert pushed.get_int_custom_property("pushed") == 0


def test_new_model_adds_a_higher_version_and_the_served_model_adds_none(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    first, second = _model(tmp_path, "first"), _model(tmp_path, "second")
    _push(tmp_path, first, True, base)
    _push(tmp_path, second, True, base)
    versions = _versions(base)
    assert len(versions) == 2 and int(versions[1]) > int(versions[0])
    pushed = _push(tmp_path, second, True, base)  # a rerun re-blessing the served model
    assert _versions(base) == versions and pushed.get_int_custom_property("new_version") == 0
    _push(tmp_path, first, True, base)  # an older version's model: served again, as new
    assert len(_versions(base)) == 3


def test_push_that_fails_midway_leaves_no_partial_version(tmp_path, monkeypatch):
    base = tmp_path / "serving" / "cifar10"
    real_copy = pusher.io_utils.fileio.copy

    def copy_then_die(src, dst, *args, **kwargs):
        if str(src).endswith("saved_model.pb"):
            raise OSError("disk full (simulated)")
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(pusher.io_utils.fileio, "copy", copy_then_die)
    with pytest.raises(OSError, match="disk full"):
        _push(tmp_path, _model(tmp_path), True, base)
    assert _versions(base) == []  # only the hidden staging folder exists
    monkeypatch.setattr(pusher.io_utils.fileio, "copy", real_copy)
    _push(tmp_path, _model(tmp_path, "again"), True, base)  # the next push cleans up
    assert len(_versions(base)) == 1
    assert not [n for n in os.listdir(base) if n.startswith(pusher.STAGING_PREFIX)]


def _served_state(tmp_path, version):
    """The ServedState step's output as a run that read `version` (None: nothing served)."""
    from components.storage.served_versions import ServedState

    served = standard_artifacts.Model()
    served.uri = str(tmp_path / f"served-{version}")
    os.makedirs(served.uri, exist_ok=True)
    with open(os.path.join(served.uri, "served_state.json"), "w") as out:
        out.write(ServedState(version=version).to_json())
    return served


def test_a_push_stops_when_the_served_version_changed_since_the_run_read_it(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _push(tmp_path, _model(tmp_path, "first"), True, base, served=_served_state(tmp_path, None))
    [first] = _versions(base)
    second = _model(tmp_path, "second")
    # an outcome, not a failed step (at dd83add the step failed: a red run on KFP)
    stopped = _push(tmp_path, second, True, base, served=_served_state(tmp_path, None))
    assert stopped.get_int_custom_property("pushed") == 0
    assert re.search(f"it read nothing, .* serves {first};",
                     stopped.get_string_custom_property(pusher.SERVED_CHANGED_KEY))  # fmt: skip
    assert _versions(base) == [first]
    _push(tmp_path, second, True, base, served=_served_state(tmp_path, first))
    assert len(_versions(base)) == 2


def _examples_with_spans(tmp_path, fingerprints):
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    os.makedirs(examples.uri, exist_ok=True)
    record = {"spans": sorted(int(n) for n in fingerprints), "fingerprints": fingerprints}
    with open(os.path.join(examples.uri, "training_spans.json"), "w") as out:
        json.dump(record, out)
    return examples


def test_a_warm_started_version_records_its_ancestors_spans(tmp_path):
    """Lineage: a model fine-tuned from the version trained on span 1 has seen span 1 too,
    so its version records spans 1 and 2, and span 1 is not new to it."""
    base = tmp_path / "serving" / "cifar10"
    model = _model(tmp_path, "tuned")
    with open(os.path.join(model.uri, "warm_started_from.json"), "w") as out:
        json.dump({"version_dir": "/served/100", "spans": {"1": "aaa"}}, out)
    examples = _examples_with_spans(tmp_path, {"2": "bbb"})
    _push(tmp_path, model, True, base, examples=examples)
    [version] = _versions(base)
    record = json.loads((base / version / "training_spans.json").read_text())
    assert record == {"spans": [1, 2], "fingerprints": {"1": "aaa", "2": "bbb"}}


def test_a_version_trained_from_scratch_records_its_own_spans(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    _push(
        tmp_path,
        _model(tmp_path),
        True,
        base,
        examples=_examples_with_spans(tmp_path, {"2": "bbb"}),
    )
    [version] = _versions(base)
    record = json.loads((base / version / "training_spans.json").read_text())
    assert record == {"spans": [2], "fingerprints": {"2": "bbb"}}


def _with_index(examples, digests):
    with open(os.path.join(examples.uri, "training_images.bin"), "wb") as out:
        out.write(b"".join(sorted(digests)))
    return examples


def _served_with_index(tmp_path, version, digests):
    """The ServedState step's output holding `version` and its index (None: it has none)."""
    from components.storage.served_versions import ServedState

    served = _served_state(tmp_path, version)
    state = ServedState(serving_model_dir="/served", version=version)
    with open(os.path.join(served.uri, "served_state.json"), "w") as out:
        out.write(state.to_json())
    if digests is not None:
        with open(os.path.join(served.uri, "training_images.bin"), "wb") as out:
            out.write(b"".join(sorted(digests)))
    return served


def test_a_version_keeps_the_index_of_the_images_it_was_trained_on(tmp_path):
    base = tmp_path / "serving" / "cifar10"
    examples = _with_index(_examples_with_spans(tmp_path, {"2": "bbb"}), [b"b" * 12, b"a" * 12])
    _push(tmp_path, _model(tmp_path), True, base, examples=examples)
    [version] = _versions(base)
    assert (base / version / "training_images.bin").read_bytes() == b"a" * 12 + b"b" * 12


@pytest.mark.parametrize("ancestors", [[b"c" * 12, b"a" * 12], None])
def test_a_warm_started_version_keeps_its_ancestors_images_too(tmp_path, ancestors):
    """Fine-tuned from version 100, the model has seen 100's training images too: its index
    is the union. When 100 has no index, what the new model saw is not known: no index."""
    base = tmp_path / "serving" / "cifar10"
    model = _model(tmp_path, "tuned")
    with open(os.path.join(model.uri, "warm_started_from.json"), "w") as out:
        json.dump({"version_dir": "/served/100", "spans": {"1": "aaa"}}, out)
    examples = _with_index(_examples_with_spans(tmp_path, {"2": "bbb"}), [b"b" * 12, b"a" * 12])
    served = _served_with_index(tmp_path, "100", ancestors)
    (base / "100").mkdir(parents=True)
    (base / "100" / "saved_model.pb").write_bytes(b"graph")
    _push(tmp_path, model, True, base, served=served, examples=examples)
    [version] = [v for v in _versions(base) if v != "100"]
    index = base / version / "training_images.bin"
    if ancestors is None:
        assert not index.exists()
    else:
        assert index.read_bytes() == b"a" * 12 + b"b" * 12 + b"c" * 12


def test_a_version_is_named_by_the_push_time_in_unix_seconds(tmp_path, monkeypatch):
    """What docs/vertex.md shows (`.../serving/cifar10/1796423881/`): the push's Unix time,
    bumped past the highest numbered folder, so versions only increase."""
    from components.atomic_pusher import lease as lock

    monkeypatch.setattr(lock.time, "time", lambda: 1796423881.7)
    assert lock.next_version(pusher._highest_version(str(tmp_path))) == 1796423881
    (tmp_path / "1796423890").mkdir()
    assert lock.next_version(pusher._highest_version(str(tmp_path))) == 1796423891
    (tmp_path / ".rolled-back" / "1796423895").mkdir(parents=True)  # never used twice
    assert lock.next_version(pusher._highest_version(str(tmp_path))) == 1796423896
