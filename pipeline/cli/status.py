"""`cifar10-pipeline status`: is the served model fresh and fine (exit 0), too old or of
unknown age, or a rollback of it unfinished (7), or did the last night go red (8)?"""

from __future__ import annotations

import argparse
import json
import sys

from components.night_report.message import CLOCK_SKEW_SECONDS, RED_OUTCOMES
from pipeline.common import exit_status
from pipeline.operations.serving import add_folder_args, serving_model_dir


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline.operations import status

    try:
        max_age = status.parse_duration(args.max_age) if args.max_age else None
    except ValueError as err:
        print(f"error: --max-age: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    folder = serving_model_dir(args)
    try:
        found = status.read(folder)
    except (ValueError, OSError) as err:
        print(f"error: {folder}: cannot read the serving folder: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(
        json.dumps(found.to_json(max_age), indent=1) if args.json else status.render(found, max_age)
    )
    if found.stale(max_age):
        return exit_status.STALE
    if found.last_night_red:
        return exit_status.LAST_NIGHT_RED
    return exit_status.OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="the served version, its age, spans and accuracy, and the last night's outcome",
        description="Exit status 0: fine; 7: nothing served, the served version is older "
        "than --max-age, or it is dated more than "
        f"{CLOCK_SKEW_SECONDS:.0f} s ahead of this host's clock (its age is unknown), or a "
        "rollback did not finish (run it again); 8: the "
        f"last night's outcome was red ({', '.join(RED_OUTCOMES)}). For cron and monitoring "
        "probes.",
    )
    add_folder_args(parser)
    parser.add_argument("--max-age", metavar="AGE", help="e.g. 26h: older is exit status 7")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=cmd_status)
