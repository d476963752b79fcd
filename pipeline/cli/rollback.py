"""`cifar10-pipeline rollback`: take the served version (or every version newer than
`--to`) out of service, so the version before it is served, and keep it from coming back."""

from __future__ import annotations

import argparse
import sys

from pipeline.common import exit_status
from pipeline.operations.serving import add_folder_args, serving_model_dir


def cmd_rollback(args: argparse.Namespace) -> int:
    from components.atomic_pusher.endpoint_api import EndpointNotMoved
    from components.atomic_pusher.lock import PushLockTimeout
    from components.atomic_pusher.rollback import RollbackError, roll_back
    from components.storage import object_store, paths

    folder = serving_model_dir(args)
    if args.to is not None and not args.to.isdigit():
        print(f"error: --to {args.to}: a version is a number (a folder under {folder})",
              file=sys.stderr)  # fmt: skip
        return exit_status.BAD_INPUT
    try:
        done = roll_back(folder, args.reason, args.to, args.api_endpoint)
    except (RollbackError, object_store.ObjectStoreError, paths.DamagedRecord) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except (PushLockTimeout, EndpointNotMoved) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.ERROR
    except OSError as err:  # a full disk or a folder it may not write: nothing was moved
        print(f"error: {folder}: {err.strerror or err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    for version in done.rolled_back:
        print(f"rolled back   version {version}: kept aside under {folder}/.rolled-back/")
    print(f"served now    version {done.served} ({done.record['who']}, {done.record['when']})")
    if moved := done.record.get("endpoint"):
        served_id, before = moved["served_deployed_model_id"], moved["traffic_split_before"]
        print(f"endpoint      {moved['name']}: all traffic to deployed model {served_id} "
              f"(was {before})")  # fmt: skip
    print("later nights  will not retrain its spans unattended (run --force retrains them)")
    return exit_status.OK


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "rollback",
        help="take the served version out of service; the one before it is served",
        description="Moves the served version (or every version newer than --to) out of "
        "the folder TF Serving reads, under the push lock, with who, when and why. Later "
        "nights serve, warm-start from and compare with the version before it, and do not "
        "retrain the spans the rolled-back version was trained on unless run --force. A "
        "version deployed to a Vertex AI endpoint is rolled back there first: all traffic to "
        "the deployed model of the version served after.",
    )
    add_folder_args(parser)
    parser.add_argument("--to", metavar="VERSION", help="the version to serve (default: the "
                        "one before the served version)")  # fmt: skip
    parser.add_argument("--reason", required=True, help="why, kept with the rolled-back version")
    parser.add_argument("--api-endpoint", default="", metavar="HOST", help="the Vertex AI API "
                        "host, for versions deployed to an endpoint (default: the endpoint "
                        "region's REGION-aiplatform.googleapis.com)")  # fmt: skip
    parser.set_defaults(func=cmd_rollback)
