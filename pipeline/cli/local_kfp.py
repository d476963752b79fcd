"""`cifar10-pipeline local-kfp`: a compiled file run here under kfp.local, in the kfp SDK's own
environment (`python -m pipeline.kfp_local`)."""

from __future__ import annotations

import argparse
import importlib.resources
import subprocess
import sys
from pathlib import Path

from components.runtime import stack
from pipeline.cli.shared import folder_problem
from pipeline.common import exit_status
from pipeline.settings.config import DEFAULT_OUTPUT_DIR


def cmd_local_kfp(args: argparse.Namespace) -> int:
    """Hands the file to `pipeline.kfp_local` in the kfp SDK's own environment; each step
    comes back to this environment's Python. The checkout is found from the installed
    package (editable, as `make` installs it), not from where the command runs."""
    refused = _path_problem(args)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return exit_status.BAD_INPUT
    checkout = Path(str(importlib.resources.files("pipeline"))).parent
    kfp_python = Path(args.kfp_python or stack.kfp_local_python(checkout))
    dockerfile = checkout / "Dockerfile"
    for needed, hint in (
        (kfp_python, "run `make setup-kfp`"),
        (dockerfile, "install from a checkout with `make setup`"),
    ):
        if not needed.exists():
            print(f"error: {needed} not found: {hint} (see docs/kubeflow.md)", file=sys.stderr)
            return exit_status.BAD_INPUT
    command = [str(kfp_python), "-m", "pipeline.kfp_local", args.pipeline_file]
    command += ["--target", args.target, "--output-dir", args.output_dir]
    command += ["--python", sys.executable, "--dockerfile", str(dockerfile)]
    if args.data:
        command += ["--data", args.data]
    if args.keep_uris:
        command += ["--keep-uris"]
    return subprocess.call(command)


def _path_problem(args: argparse.Namespace) -> str:
    """An --output-dir that cannot be a folder or a --data that is not there, before the
    kfp environment starts (seconds) and its first step finds out (a minute)."""
    folder = folder_problem(Path(args.output_dir))
    if folder:
        return f"--output-dir {folder}"
    if args.data and "://" not in args.data and not Path(args.data).exists():
        return f"--data {args.data}: no such file or folder"
    return ""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Run a compiled file under kfp.local."""
    local_kfp = commands.add_parser(
        "local-kfp",
        help="run a compiled pipeline file here under kfp.local, before building an image",
        description="Runs exactly PIPELINE_FILE (from `compile`) under KFP's local orchestrator "
        "(kfp.local, from .venv-kfp: `make setup-kfp`), each container step a process of this "
        "environment with the Dockerfile's ENV. The pipeline root maps to --output-dir, the "
        "data to --data, the image's WORKDIR to this checkout. --target vertex runs the steps "
        "that need no Google API and lists the others.",
    )
    local_kfp.add_argument("pipeline_file", metavar="PIPELINE_FILE")
    local_kfp.add_argument("--target", choices=["kubeflow", "vertex"], default="kubeflow")
    local_kfp.add_argument(
        "--data", metavar="PATH", help="local copy of the data that the file names (--data URI)"
    )
    local_kfp.add_argument(
        "--output-dir",
        default=str(DEFAULT_OUTPUT_DIR / "kfp-local"),
        help="stands in for the pipeline root; step logs under logs/ (default: %(default)s)",
    )
    local_kfp.add_argument(
        "--keep-uris",
        action="store_true",
        help="leave the file's s3:// or gs:// URIs (pipeline root, data, serving folder) as "
        "they are: the steps read and write that store, for s3:// with this environment's "
        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL (or S3_ENDPOINT), for "
        "gs:// with its Google credentials; --data is not used",
    )
    local_kfp.add_argument("--kfp-python", default="", help=argparse.SUPPRESS)
    local_kfp.set_defaults(func=cmd_local_kfp)
