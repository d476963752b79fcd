"""Smoke tests for the benchmarks whose tables docs/data-validation.md shows (issue 64 item 6):
each runs the benchmark's own `main` on a tiny generated archive and reads the Markdown table
it prints: the header, one row per case its docstring promises, cells that parse, and what
must hold by construction. They keep a benchmark runnable; they measure nothing."""

from __future__ import annotations

import re

import pytest

from benchmarks import duplicate_thresholds


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
