"""`cifar10-pipeline gc`: remove the pipeline root's artifacts of old runs that no kept version
needs, and mark them in ML Metadata."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.common import exit_status
from pipeline.operations.serving import is_uri
from pipeline.settings.config import DEFAULT_OUTPUT_DIR


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more days, got {text}")
    return value


def cmd_gc(args: argparse.Namespace) -> int:
    from pipeline.local.runner import OutputDirError, RunLockedError
    from pipeline.operations import gc

    if is_uri(args.output_dir):
        print(f"error: --output-dir {args.output_dir}: gc works on a local run folder (its "
              "ML Metadata, metadata.sqlite); a compiled pipeline's artifacts are kept by its "
              "runner's ML Metadata, and its serving folder is bounded by --keep-versions",
              file=sys.stderr)  # fmt: skip
        return exit_status.BAD_INPUT
    output_dir = Path(args.output_dir).resolve()
    try:
        found = gc.collect(output_dir, args.older_than, args.dry_run)
    except RunLockedError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BUSY
    except (FileNotFoundError, OutputDirError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    verb = "would remove" if args.dry_run else "removed"
    for removal in found.remove:
        print(f"{verb:<13} {Path(removal.uri).relative_to(output_dir)} "
              f"({removal.bytes / 1e6:.1f} MB, {removal.age_days:g} days old)")  # fmt: skip
    total = sum(r.bytes for r in found.remove) / 1e6
    print(
        f"{verb} {len(found.remove)} artifacts ({total:.1f} MB) older than {args.older_than:g} "
        f"days; kept {found.kept_for_versions} in the lineage of the kept versions and "
        f"{found.kept_recent} newer ones"
    )
    return exit_status.OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "gc",
        help="remove old runs' artifacts that no kept version needs",
        description="Removes the artifacts under OUTPUT_DIR/artifacts of runs older than "
        "--older-than days, except every artifact in the lineage of a version in the serving "
        "folder (served or rolled back), and marks them DELETED in ML Metadata so that no "
        "later run reuses them from the cache.",
    )
    parser.add_argument(
        "--output-dir",
        default=str(DEFAULT_OUTPUT_DIR),
        metavar="DIR",
        help="a run's folder, as `run` takes it (default: %(default)s)",
    )
    parser.add_argument("--older-than", type=_days, required=True, metavar="DAYS")
    parser.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    parser.set_defaults(func=cmd_gc)
