"""`cifar10-pipeline report`: (re)write a finished run's HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.shared import wrote
from pipeline.settings.config import DEFAULT_OUTPUT_DIR


def cmd_report(args: argparse.Namespace) -> int:
    """A folder it cannot make a page of (no run, an outdated, damaged or foreign summary,
    a damaged artifact) is one line naming the file, exit status 2."""
    from pipeline.local import report
    from pipeline.local.report_data import ArtifactError
    from pipeline.local.summary import SummaryError

    return wrote(
        "Wrote",
        lambda: report.build_report(Path(args.run_dir).resolve()),
        (FileNotFoundError, SummaryError, ArtifactError),
    )


def add_parser(commands: argparse._SubParsersAction) -> None:
    """(Re)write a run's HTML report."""
    report_parser = commands.add_parser(
        "report",
        help="(re)write RUN_DIR/report.html from a finished run",
        description="Writes a self-contained HTML page (data, training curves, evaluation, "
        "verdict) from RUN_DIR/run_summary.json and the run's artifacts.",
    )
    report_parser.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?", default=str(DEFAULT_OUTPUT_DIR)
    )
    report_parser.set_defaults(func=cmd_report)
