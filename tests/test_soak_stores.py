"""The soak of tests/test_bounded_growth.py (benchmarks/soak.py: 60 simulated nights through
the product's code) on the object stores: s3:// against SeaweedFS (`make test-s3`), with each
night's message delivered to a local webhook, and gs:// against fake-gcs-server in a network
namespace of its own (`make test-gcs`, root only; no webhook reaches into it)."""

import json
import os
import sys
from pathlib import Path

import pytest
from test_bounded_growth import check_soak, run_soak

from benchmarks import soak
from components.night_report.message import NOTIFY_VARIABLE

import gcs_namespace
import http_stand_in
import seaweed

REPO_ROOT = str(Path(__file__).resolve().parents[1])


@pytest.mark.s3_store
@pytest.mark.integration  # minutes: a store's round trips, 60 nights of them
def test_sixty_nights_on_s3_stay_bounded(tmp_path):
    with seaweed.running(tmp_path / "seaweedfs") as server, http_stand_in.webhook() as (hook, url):
        env = {**os.environ, **server.env(), NOTIFY_VARIABLE: url}
        rows = run_soak(f"s3://{server.bucket}/soak", env)
        assert len(hook.received) == soak.NIGHTS - soak.NIGHTS // 10
    assert len(rows) == soak.NIGHTS
    check_soak(rows, delivered=True)


@pytest.mark.gcs_store
@pytest.mark.integration
def test_sixty_nights_on_gs_stay_bounded(tmp_path):
    reason = gcs_namespace.unusable()
    if reason:
        pytest.skip(f"gs:// namespace: {reason}")
    with gcs_namespace.running(tmp_path / "gcs-namespace") as namespace:
        root = f"gs://{namespace.bucket}/soak"
        done = namespace.run(sys.executable, "-m", "benchmarks.soak", root, PYTHONPATH=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.splitlines()[-1])
    assert len(rows) == soak.NIGHTS
    check_soak(rows, delivered=False)
