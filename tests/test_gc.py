"""`cifar10-pipeline gc`: a run folder's old artifacts that no kept version needs are removed
and marked DELETED in ML Metadata, so the cache never hands a removed one to a later run;
the served version's lineage stays whole; --dry-run lists and removes nothing."""

import os
from pathlib import Path

import pytest

import cifar_fixtures as fx
from conftest import FAST_TRAINING, cli


def _artifacts(out: Path) -> dict[int, tuple[str, int]]:
    """{artifact id: (uri, state)} of the run folder's store."""
    from tfx.orchestration import metadata

    config = metadata.sqlite_metadata_connection_config(str(out / "metadata.sqlite"))
    with metadata.Metadata(config) as handle:
        return {a.id: (a.uri, a.state) for a in handle.store.get_artifacts()}


@pytest.mark.parametrize("flags, problem", [
    (["--older-than", "-1"], "must be 0 or more days"),
    (["--older-than", "soon"], "not a number of days"),
])  # fmt: skip
def test_bad_input_is_refused(tmp_path, capsys, flags, problem):
    from pipeline import cli as main_cli

    with pytest.raises(SystemExit) as refused:
        main_cli.main(["gc", "--output-dir", str(tmp_path), *flags])
    assert refused.value.code == 2 and problem in capsys.readouterr().err


def test_a_folder_without_a_store_is_one_line(tmp_path):
    done = cli("gc", "--output-dir", tmp_path, "--older-than", "0")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: {tmp_path / 'metadata.sqlite'}: no ML Metadata store; is {tmp_path} a run folder?"
    )


@pytest.mark.integration
def test_old_artifacts_no_kept_version_needs_are_removed_and_marked(tiny_archive, tmp_path):
    """The lineage is followed through the cache: night 1 trains but is not blessed; night 2
    (gate 0) reuses night 1's examples, statistics and model and pushes. gc keeps every
    artifact of night 2 and every one it read, although night 1 made them, and removes the
    rest of night 1 (its evaluation, blessing) and a stopped night: neither "keep the
    pushed run's own artifacts" nor "keep every run that pushed" passes this."""
    out = tmp_path / "out"
    night = ["--data", tiny_archive, "--output-dir", out, *FAST_TRAINING, "--learning-rate",
             "1e-7"]  # fmt: skip
    first = cli("run", *night, "--accuracy-gate", "0.8")
    assert first.returncode == 4, first.stderr[-2000:]  # not blessed
    night_1 = {i for i, (uri, _) in _artifacts(out).items() if uri}
    pushed = cli("run", *night, "--accuracy-gate", "0")
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    night_2 = {i for i, (uri, _) in _artifacts(out).items() if uri} - night_1
    kept = night_2 | (night_1 & _touched_by_last_run(out))
    reused = {_artifacts(out)[i][0].split("/")[-3] for i in kept - night_2}
    assert reused >= {"Trainer", "StatisticsGen", "ImportSchemaGen"}, reused
    # a night the gate stops (darker images drift): its artifacts feed no version
    other = fx.scaled_archive(tmp_path / "other.tar.gz", 0.5, per_class=60)
    refused = cli("run", "--data", other, "--output-dir", out, *FAST_TRAINING)
    assert refused.returncode == 3, refused.stderr[-2000:]
    before = _artifacts(out)
    unneeded = {i for i in before if i not in kept and before[i][0]}
    assert unneeded  # the stopped run's own examples, statistics, verdict...

    listed = cli("gc", "--output-dir", out, "--older-than", "0", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("would remove  artifacts/") == len(unneeded)
    assert _artifacts(out) == before and all(os.path.exists(before[i][0]) for i in unneeded)

    assert "removed 0 artifacts" in cli("gc", "--output-dir", out, "--older-than", "1").stdout
    done = cli("gc", "--output-dir", out, "--older-than", "0")
    assert done.returncode == 0 and f"removed {len(unneeded)} artifacts" in done.stdout
    after = _artifacts(out)
    for i in unneeded:
        assert after[i][1] == 4 and not os.path.exists(after[i][0])  # 4: Artifact.DELETED
    for i in kept:  # the served version's lineage, whole
        assert after[i][1] == before[i][1] and os.path.exists(after[i][0]), before[i][0]
    assert night_1 - kept and all(after[i][1] == 4 for i in night_1 - kept)  # its evaluation
    again = cli("run", "--data", other, "--output-dir", out, *FAST_TRAINING)
    assert again.returncode == 3, again.stderr[-2000:]  # recomputed, not read from the removed


def _touched_by_last_run(out: Path) -> set[int]:
    """The artifacts the executions of the newest pipeline run read or wrote (a cached
    execution's outputs are the earlier run's artifacts it reused)."""
    from tfx.orchestration import metadata

    config = metadata.sqlite_metadata_connection_config(str(out / "metadata.sqlite"))
    with metadata.Metadata(config) as handle:
        store = handle.store
        run = max(store.get_contexts_by_type("pipeline_run"), key=lambda c: c.id)
        executions = [e.id for e in store.get_executions_by_context(run.id)]
        events = store.get_events_by_execution_ids(executions)
        return {e.artifact_id for e in events}


def test_gc_while_a_run_holds_the_folder_is_busy_and_removes_nothing(tmp_path):
    """gc plans and removes under the run lock: while a run holds the folder, gc (also
    --dry-run, whose plan would be stale) exits 10 naming the holder and touches nothing."""
    import fcntl

    from tfx.orchestration import metadata

    config = metadata.sqlite_metadata_connection_config(str(tmp_path / "metadata.sqlite"))
    with metadata.Metadata(config):
        pass  # an empty store
    old = tmp_path / "artifacts" / "x"
    old.mkdir(parents=True)
    with open(tmp_path / ".run.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        for dry in ([], ["--dry-run"]):
            done = cli("gc", "--output-dir", tmp_path, "--older-than", "0", *dry)
            assert done.returncode == 10, done.stderr
            assert "another run (pid 4242) is using this output directory" in done.stderr
    assert old.is_dir()
