"""Drift end to end: a run pushes a model with its training data's statistics; the next run on
darker data stops before training with exit status 3, and --accept-drift trains anyway and
says so in the run summary, on the console and in the report. The first run is the suite's
`first_run` (the same command); the next two run in a folder holding a copy of its serving
folder."""

import json
import shutil

import pytest

from components.contract import SERVED_STATISTICS_FILE, TRAINER_NODE

import cifar_fixtures as fx
from conftest import FAST_TRAINING, cli, versions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def runs(first_run, tmp_path_factory):
    """Three runs: the tiny archive (first_run, gate 0.5), then the same records x0.6 beside a
    copy of its serving folder, then those again with --accept-drift."""
    pushed, _, first = first_run
    out = tmp_path_factory.mktemp("drift")
    shutil.copytree(pushed / "serving", out / "serving")
    dark = fx.scaled_archive(tmp_path_factory.mktemp("dark") / "dark.tar.gz", 0.6, per_class=60)
    common = ["--output-dir", out, "--accuracy-gate", "0.5", *FAST_TRAINING]
    served = versions(out)
    stopped = cli("run", "--data", dark, *common)
    after_stop = versions(out), json.loads((out / "run_summary.json").read_text())
    accepted = cli("run", "--data", dark, *common, "--accept-drift")
    return out, first, served, stopped, after_stop, accepted


def test_a_first_run_has_nothing_to_drift_from_and_keeps_its_statistics(runs):
    out, first, served, *_ = runs
    assert "drift          no served model: nothing to drift from" in first.stdout
    [version] = served
    kept = out / "serving" / "cifar10" / version / SERVED_STATISTICS_FILE
    assert kept.stat().st_size > 0


def test_darker_data_stops_before_training_with_exit_status_3(runs):
    out, _, served, stopped, (after, summary), _ = runs
    assert stopped.returncode == 3, stopped.stderr[-4000:]
    [version] = served
    for feature in ("image_brightness", "image_red_mean"):
        line = f"  - drift: feature '{feature}': Jensen-Shannon divergence "
        [found] = [x for x in stopped.stderr.splitlines() if x.startswith(line)]
        assert found.endswith(
            f"(this run's train split against the training data of served version {version})"
        )
    assert "--accept-drift trains on it anyway" in stopped.stderr
    assert after == served  # nothing pushed
    assert TRAINER_NODE not in summary["stage_states"]  # nothing trained


def test_accept_drift_trains_pushes_and_records_it(runs):
    out, _, served, _, _, accepted = runs
    assert accepted.returncode == 0, accepted.stderr[-4000:]
    assert "  ACCEPTED with --accept-drift: " in accepted.stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["data_comparison"]["drift_accepted"] is True
    assert summary["stage_states"][TRAINER_NODE] == "complete"
    assert len(versions(out)) == len(served) + 1
    page = (out / "report.html").read_text()
    assert "ACCEPTED with --accept-drift" in page and "image_brightness" in page
