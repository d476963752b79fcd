"""`cifar10-pipeline submit`: a compiled file checked offline, then a Vertex AI PipelineJob (with
--wait, followed to its end) or a Kubeflow Pipelines run. A file compiled for the other target
than --target, and a flag of the other target (`pipeline.cli.target_flags`), are refused."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.cli import target_flags
from pipeline.common import compiled_target, exit_status, kfp_platform
from pipeline.common.submission import SubmitError, has_dag
from pipeline.vertex.submit import WAIT_RETRY_SECONDS


def _submit_kubeflow(args: argparse.Namespace) -> int:
    from pipeline.kubeflow import submit as kubeflow_submit

    try:
        submission = kubeflow_submit.load_submission(
            Path(args.pipeline_file),
            args.host,
            args.namespace,
            args.experiment,
            args.run_name,
            args.parameter,
        )
        if args.dry_run:
            print(submission.describe())
            return exit_status.OK
        run_id = kubeflow_submit.submit(submission)
    except SubmitError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(
        f"Submitted run {run_id} ('{submission.run_name}', experiment "
        f"'{submission.experiment}')\n{submission.host}/#/runs/details/{run_id}"
    )
    return exit_status.OK


def _vertex_dry_run(submission, args: argparse.Namespace) -> str:
    """What would be submitted, then how: the API endpoint if given, the wait if asked."""
    lines = [submission.describe()]
    if args.api_endpoint:
        lines.append(f"  api        {args.api_endpoint}")
    if args.wait:
        lines.append(
            f"  then       wait for the end, polling every {args.poll_seconds:g} s through up "
            f"to {args.wait_retry_seconds:g} s of network or server errors"
        )
    return "\n".join(lines)


def _submit_vertex(args: argparse.Namespace) -> int:
    from pipeline.vertex import options as vertex_options
    from pipeline.vertex import pipeline_file as vertex_file
    from pipeline.vertex import submit as vertex_submit

    try:
        submission = vertex_file.load_submission(
            Path(args.pipeline_file),
            args.project,
            args.region,
            args.service_account,
            args.network,
            vertex_options.parse_labels(args.label),
            True if args.cache else False if args.no_cache else None,
            args.parameter,
        )
        if args.dry_run:
            print(_vertex_dry_run(submission, args))
            return exit_status.OK
        job = vertex_submit.submit(submission, args.api_endpoint)
        print(
            f"Submitted {job.resource_name}\n{vertex_submit.console_url(job.resource_name)}",
            flush=True,
        )
        if not args.wait:
            return exit_status.OK
        state = vertex_submit.wait(
            job,
            lambda line: print(line, file=sys.stderr, flush=True),
            args.poll_seconds,
            args.wait_retry_seconds,
        )
    except (SubmitError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except vertex_submit.LostContact as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.LOST_CONTACT
    print(f"PipelineJob {submission.display_name} ended: {state}")
    return exit_status.OK if state == "PIPELINE_STATE_SUCCEEDED" else exit_status.ERROR


def _file_target_refusal(args: argparse.Namespace) -> str:
    """One line naming --target when the file was compiled for the other target: '' when it
    was for this one, or is no compiled pipeline (the target's own reading says why then).
    A Kubeflow file may be two YAML documents, a Vertex one the older PipelineJob JSON."""
    try:
        spec, _ = kfp_platform.read_pipeline_file(Path(args.pipeline_file))
    except kfp_platform.PipelineFileError:
        return ""
    spec = spec.get("pipelineSpec", spec)  # the PipelineJob JSON holds the spec
    if not has_dag(spec):
        return ""
    try:
        return compiled_target.mismatch(args.pipeline_file, args.target, spec)
    except (AttributeError, TypeError, IndexError):  # malformed steps: the reading says how
        return ""


def cmd_submit(args: argparse.Namespace) -> int:
    """A file compiled for the other target is refused before its target reads it, then a
    flag of the other target (`target_flags`)."""
    refused = _file_target_refusal(args) or target_flags.refusal(args, target_flags.SUBMIT)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return exit_status.BAD_INPUT
    return {"kubeflow": _submit_kubeflow, "vertex": _submit_vertex}[args.target](args)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Submit a compiled file; each target's settings are a group of their own."""
    parser = commands.add_parser(
        "submit",
        help="submit a compiled pipeline to Vertex AI or Kubeflow Pipelines",
        description="Creates a Vertex AI PipelineJob (google-cloud-aiplatform), or a Kubeflow "
        "Pipelines run (kfp Client), from a file written by `compile`.",
    )
    parser.add_argument("pipeline_file", metavar="PIPELINE_FILE")
    parser.add_argument(
        "--target",
        choices=["vertex", "kubeflow"],
        default="vertex",
        help="the target PIPELINE_FILE was compiled for; a file of the other is refused "
        "(default: %(default)s)",
    )
    _add_vertex_submit_args(parser)
    kubeflow = parser.add_argument_group("kubeflow")
    for flag, help_text in (
        ("--host", "KFP API URL, e.g. http://localhost:8080"),
        ("--namespace", "profile namespace on multi-user clusters"),
        ("--experiment", "default: the pipeline name"),
        ("--run-name", "default: <pipeline>-<timestamp>"),
    ):
        target_flags.add(kubeflow, flag, target_flags.SUBMIT, help=help_text)
    parser.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a runtime parameter of this run, repeatable: span=N (-1: the newest), "
        "span_window=K, force=1 (default: as compiled)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the file and print what would be submitted; no network",
    )
    parser.set_defaults(func=cmd_submit)


def _add_vertex_submit_args(parser: argparse.ArgumentParser) -> None:
    """What `submit --target vertex` may override in the compiled file, and --wait."""
    vertex = parser.add_argument_group("vertex")
    for flag, help_text in (
        ("--project", "default: the compiled one; a different one is refused"),
        ("--region", "default: the compiled one; a different one is refused"),
        ("--service-account", "the PipelineJob runs as this account (default: the compiled "
         "training job's)"),
        ("--network", "default: the compiled one"),
        ("--api-endpoint", argparse.SUPPRESS),
    ):  # fmt: skip
        target_flags.add(vertex, flag, target_flags.SUBMIT, help=help_text)
    target_flags.add(
        vertex,
        "--label",
        target_flags.SUBMIT,
        action="append",
        metavar="KEY=VALUE",
        help="PipelineJob label, repeatable (added to the compiled ones)",
    )
    caching = vertex.add_mutually_exclusive_group()
    target_flags.add(
        caching,
        "--cache",
        target_flags.SUBMIT,
        action="store_true",
        help="reuse cached step results (default: as compiled)",
    )
    target_flags.add(
        caching, "--no-cache", target_flags.SUBMIT, action="store_true", help="rerun every step"
    )
    _add_wait_args(vertex)


def _add_wait_args(vertex: argparse._ArgumentGroup) -> None:
    target_flags.add(
        vertex,
        "--wait",
        target_flags.SUBMIT,
        action="store_true",
        help="wait for the run to end, printing each step's state",
    )
    target_flags.add(
        vertex,
        "--poll-seconds",
        target_flags.SUBMIT,
        type=float,
        help="with --wait: seconds between two looks at the run's state (default: "
        f"{target_flags.SUBMIT['--poll-seconds'].default:g})",
    )
    target_flags.add(
        vertex,
        "--wait-retry-seconds",
        target_flags.SUBMIT,
        type=float,
        help="with --wait: how long to keep polling through network or server errors before "
        f"giving up with exit status 5; the job runs on (default: {WAIT_RETRY_SECONDS:g})",
    )
