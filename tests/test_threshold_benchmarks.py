"""Smoke tests for the benchmarks whose tables docs/data-validation.md shows (issue 64 item 6):
each runs the benchmark's own `main` on a tiny generated archive and reads the Markdown table
it prints: the header, one row per case its docstring promises, cells that parse, and what
must hold by construction. They keep a benchmark runnable; they measure nothing."""

from __future__ import annotations

import re

import pytest

from benchmarks import class_drop, drift_thresholds, duplicate_thresholds, label_thresholds
from components.checks import reference_images
from components.contract import LABEL_NAMES

import cifar_fixtures as fx

# Every `run` a pipeline-running benchmark starts trains one epoch: these check the table, not
# the model, which on a few hundred images tells no fault from a clean span reliably.
ONE_EPOCH = ["--epochs", "1"]


def markdown_table(printed: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows' cells of the one Markdown table in `printed`, the
    separator row left out."""
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, printed
    assert re.fullmatch(r"\|(-+:?\|)+", lines[1].replace("---:", "---")), lines[1]
    header, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    del rows[0]  # the separator
    assert all(len(row) == len(header) for row in rows), printed
    return header, rows


def number(cell: str) -> float:
    """A table's number: thousands separators, a sign, a %, bold or ` points` allowed."""
    found = re.fullmatch(r"\**([+-]?[\d,]*\.?\d+)\**(%| points)?", cell)
    assert found, f"not a number: {cell!r}"
    return float(found.group(1).replace(",", ""))


def test_duplicate_thresholds_counts_the_added_copies(tiny_archive, capsys):
    """1,200 images, 10% of them (120) added again per case: the unchanged copies read as 120
    exact copies, 120 of 1,320 images (9.1%, stopped); the release as generated has no exact
    copy at all."""
    assert duplicate_thresholds.main(["--data", str(tiny_archive), "--share", "0.1"]) == 0
    header, rows = markdown_table(capsys.readouterr().out)
    assert header == ["images", "exact copies", "near copies", "share", "stopped"]
    cases = [re.fullmatch(r"(.+) \(([\d,]+)\)", row[0]).groups() for row in rows]
    assert [case for case, _ in cases] == [
        "CIFAR-10 as released",
        "copied unchanged",
        "re-encoded as JPEG (quality 75)",
        "one level brighter",
        "mirrored",
        "shifted one pixel",
    ]
    assert [number(images) for _, images in cases] == [1200] + [1320] * 5
    by_case = {case: [number(cell) for cell in row[1:4]] for (case, _), row in zip(cases, rows)}
    assert all(0 <= share <= 100 for _, _, share in by_case.values())
    assert all(row[4] in ("yes", "no") for row in rows)
    assert by_case["CIFAR-10 as released"][0] == 0
    assert by_case["copied unchanged"][0] == 120
    assert by_case["copied unchanged"][2] == pytest.approx(100 * 120 / 1320, abs=0.001)
    assert rows[1][4] == "yes"


def test_drift_thresholds_tells_an_altered_copy_from_clean_draws(tiny_archive, capsys):
    """Samples of 500 of the 1,200 images, two clean draws: one row per promised case, each
    feature's distance a number in [0, 1] (JS divergence, L-infinity), and pixels x0.6 far
    beyond the clean draws in brightness: the whole histogram moves. A size the archive cannot
    give two disjoint samples of is refused, not measured on a short second sample."""
    with pytest.raises(SystemExit, match="size 1,000 needs 2,000 images"):
        drift_thresholds.main(["--data", str(tiny_archive), "--size", "1000"])
    argv = ["--data", str(tiny_archive), "--size", "500", "--draws", "2"]
    assert drift_thresholds.main(argv) == 0
    header, rows = markdown_table(capsys.readouterr().out)
    assert header[:3] == ["data", "images", "label"] and header[-1] == "stopped"
    assert "brightness" in header and len(header) == 12  # the label and 9 image summaries
    threshold, *rows = rows
    assert threshold[0] == "threshold" and all(0 < number(c) <= 1 for c in threshold[2:-1])
    assert [row[0] for row in rows] == [
        "same distribution (2 draws)",
        "pixels x0.6",
        "pixels x1.3",
        "mirrored",
        "blurred (3x3 box)",
        "JPEG quality 20",
        "one class removed",
        "80% of one class dropped",
    ]
    assert all(number(row[1]) == 500 and row[-1] in ("yes", "no") for row in rows)
    distance = {row[0]: [number(c) for c in row[2:-1]] for row in rows}
    assert all(0 <= d <= 1 for ds in distance.values() for d in ds)
    brightness = header.index("brightness") - 2
    clean, darker = distance["same distribution (2 draws)"], distance["pixels x0.6"]
    assert darker[brightness] > max(clean[brightness], number(threshold[2 + brightness]))
    assert rows[1][-1] == "yes"


@pytest.mark.benchmark_smoke
def test_label_thresholds_judges_every_case_with_the_served_version(tiny_archive, capsys):
    """A version the pipeline trained on 600 images (one epoch), one clean span and the faults
    on spans of 200 it never saw. A one-epoch model on 600 images separates nothing reliably,
    so only what holds by construction is checked: one row per case, rates in their ranges,
    the noise excess the estimate minus the reference's, and no shift statistic (the served
    eval split's 60 images are fewer than drift.MIN_SHIFT_SAMPLE)."""
    argv = ["--data", str(tiny_archive), "--served", "600", "--span", "200", "--samples", "1"]
    assert label_thresholds.main([*argv, *ONE_EPOCH]) == 0
    printed = capsys.readouterr().out
    assert "every run trained 1 epochs (--epochs), not the recipe's" in printed
    header, rows = markdown_table(printed)
    assert header[:3] == ["served images (eval acc.)", "span", "data"]
    assert header[3:] == [
        "exchange excess", "noise est. (reference)", "noise excess", "shift (KS)",
        "embeddings (MMD)", "stopped", "scoring s",
    ]  # fmt: skip
    assert [row[2] for row in rows] == [
        "clean 1", "cat and dog exchanged", "10% of labels random", "25% of labels random",
        "rotated 90 degrees", "upside down", "mirrored (left-right)", "BGR channel order",
        "grey", "red channel dropped", "Gaussian noise, sigma 12",
    ]  # fmt: skip
    for served, span, _, exchange, noise, excess, shift, mmd, stopped, seconds in rows:
        accuracy = re.fullmatch(r"600 \((.+)\)", served).group(1)
        assert 0 <= number(accuracy) <= 100 and number(span) == 200
        assert -1 <= number(exchange) <= 1
        estimate, reference = re.fullmatch(r"(\S+) \((\S+)\)", noise).groups()
        assert 0 <= number(estimate) <= 1 and 0 <= number(reference) <= 1
        assert number(excess) == pytest.approx(number(estimate) - number(reference), abs=2e-3)
        assert shift == mmd == "n/a" and stopped in ("yes", "no") and number(seconds) >= 0


@pytest.mark.benchmark_smoke
def test_class_drop_scores_every_candidate_against_the_served_version(tmp_path, capsys):
    """A version trained on 2,400 images (one epoch: its 240 eval images give a class the 20
    reference images a fall is measured on), then a one-epoch `run --warm-start` per case on
    a span of 640 it never saw (the Trainer needs a global batch of 512 training images). A
    one-epoch model separates nothing reliably, so only what holds by construction is
    checked: one row per case, falls in points within +-100, a class name, and `blocked`
    exactly where the fall passes the margin."""
    archive = fx.binary_archive(tmp_path / "cifar.tar.gz", batches=2, per_class=250)
    argv = ["--data", str(archive), "--served", "2400", "--span", "640", "--samples", "1"]
    assert class_drop.main([*argv, *ONE_EPOCH]) == 0
    printed = capsys.readouterr().out
    assert "every run trained 1 epochs (--epochs), not the recipe's" in printed
    header, rows = markdown_table(printed)
    assert header == [
        "served images", "span", "candidate trained on", "reference images",
        "largest class fall", "class", "blocked",
    ]  # fmt: skip
    assert [row[2] for row in rows] == [
        "clean 1", "cat and dog exchanged", "25% of labels random", "rotated 90 degrees",
    ]  # fmt: skip
    for served, span, _, images, fall, label, blocked in rows:
        assert number(served) == 2400 and number(span) == 640
        assert 0 < number(images) <= 2400 and -100 <= number(fall) <= 100
        assert fall.endswith(" points") and label in LABEL_NAMES
        margin = 100 * reference_images.MAX_CLASS_DROP
        if abs(number(fall) - margin) > 0.05:  # the cell is rounded to 0.1 points
            assert blocked == ("yes" if number(fall) > margin else "no")
