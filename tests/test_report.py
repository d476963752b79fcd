"""report.html from the end-to-end run: every section with that run's numbers, and a clean
render in headless Chromium (the screenshot stays in the test's temporary folder)."""

import os
import re
import shutil
import subprocess

import pytest

from components.contract import NUM_CLASSES
from pipeline.local.report_data import SAMPLES_PER_CLASS

pytestmark = pytest.mark.integration  # full pipeline runs in subprocesses


def test_report_has_every_section_with_numbers_from_the_run(first_run):
    out, summary, _ = first_run
    page = (out / "report.html").read_text()
    for heading in (
        "Outcome",
        "Data",
        "TFDV statistics and anomalies",
        "Training",
        "Evaluation",
        "Most confident mistakes",
        "Skew and drift",
    ):
        assert f">{heading}</h" in page
    assert "Records per split: train 1080, eval 120" in page
    assert f"{100 * summary['eval_accuracy']:.2f}%" in page
    # per-class eval records come from TFMA's per-label slices: 12 of each class
    assert page.count("<td>12</td>") >= 10
    assert "BLESSED" in page and summary["pushed_version_dir"] in page
    for epoch in summary["history"]:
        assert f"<td>{epoch['epoch']}</td><td>{epoch['seconds']:.1f}</td>" in page
    # charts and image grids are embedded, nothing is fetched; a run that classifies every
    # tiny eval record right has no mistakes panel to draw
    perfect = summary["eval_accuracy"] == 1.0
    assert ("<p>No mistakes.</p>" in page) == perfect
    # eval records per class, training curves, per-class accuracy and confusion, and the
    # image summaries' histograms per data set
    charts = 4
    tiles = page.count('<img class="tile" src="data:image/png;base64,')
    assert tiles >= SAMPLES_PER_CLASS * NUM_CLASSES + (0 if perfect else 1)
    assert len(re.findall(r'src="data:image/png;base64,', page)) == charts + tiles
    assert not re.search(r'src="(https?:)?//', page)


def _without_images(page: str) -> str:
    return re.sub(r'src="data:image/png;base64,[^"]*"', 'src=""', page)


def test_report_command_regenerates_it(first_run, tmp_path):
    """`report RUN_DIR` rewrites that run's page: its run id, its numbers, the same text
    and tables as the page the run wrote (images aside: PNG bytes may differ by library)."""
    from conftest import cli

    out, summary, _ = first_run
    written = (out / "report.html").read_text()
    (out / "report.html").unlink()
    done = cli("report", out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"Wrote {(out / 'report.html').resolve()}"
    page = (out / "report.html").read_text()
    assert f"<title>CIFAR-10 run {summary['run_id']}</title>" in page
    assert f"{100 * summary['eval_accuracy']:.2f}%" in page
    assert summary["pushed_version_dir"] in page
    assert _without_images(page) == _without_images(written)


def test_report_renders_in_headless_chromium(first_run, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        # CI must not lose the check silently: .ci/run installs Chromium.
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but chromium is not installed; .ci/run should have installed it")
        pytest.skip("chromium is not installed (.ci/run installs it)")
    out, _, _ = first_run
    screenshot = tmp_path / "report.png"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
            f"--screenshot={screenshot}",
            (out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    assert console == [], console
    assert screenshot.stat().st_size > 50_000
