"""`python -m pipeline.kfp_local PIPELINE_FILE ...`: plan, run and summarise a compiled file under
kfp.local (started by `cifar10-pipeline local-kfp`)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pipeline.kfp_local
from pipeline.common import compiled_target, exit_status
from pipeline.kfp_local.plan import (
    LocalRunError,
    Plan,
    make_plan,
    read_dockerfile,
    store_environment,
)
from pipeline.kfp_local.steps import HostSteps, Step, last_error, run_plan, task_folders

# The ExampleGen's mark on a night with nothing new (components.contract.NO_NEW_SPAN_PROPERTY
# and its reason), named here, not imported, since this environment has no TFX.
NO_NEW_SPAN, NO_NEW_SPAN_REASON = "no_new_span", "no_new_span_reason"
# The Pusher's mark on a night whose served version changed under it
# (components.atomic_pusher.executor.SERVED_CHANGED_KEY).
SERVED_CHANGED = "served_changed"


def summary(plan: Plan, done: list[Step], kfp_version: str) -> str:
    """What ran, how long each step took, and what came out (blessing, pushed version)."""
    lines = [f"kfp.local (kfp {kfp_version}, SubprocessRunner, each step a host process)"]
    for step in done:
        lines.append(
            f"  {step.name:<22} {'SUCCESS' if step.ok else 'FAILED':<8} {step.seconds:4.0f} s"
        )
    ran = {step.name for step in done}
    stopped = {name: "an earlier step failed" for name in plan.steps if name not in ran}
    for name, reason in {**stopped, **plan.not_run}.items():
        lines.append(f"  {name:<22} not run: {reason}")
    lines.extend(night_lines(plan, done))
    outputs = {key: meta for step in done for key, meta in step.outputs.items()}
    if "blessing" in outputs:
        lines.append(f"blessed        {'yes' if outputs['blessing'].get('blessed') else 'no'}")
    if outputs.get("pushed_model", {}).get("pushed"):
        lines.append(f"pushed         {outputs['pushed_model'].get('pushed_destination')}")
    return "\n".join(lines)


def night_lines(plan: Plan, done: list[Step]) -> list[str]:
    """What the exit handler said (components/night_report/handler.py): the night's outcome
    and whether its message was delivered; or that it did not run."""
    handler = compiled_target.exit_task(plan.spec)
    if not handler:
        return []
    step = next((s for s in done if s.name == handler), None)
    if step is None:
        return [f"night report   not run ({handler} did not start)"]
    said = [
        line.strip()
        for line in step.log.read_text(errors="replace").splitlines()
        if line.startswith(("outcome ", "notification ", "record "))
    ]
    return [f"night report   ({handler}, the exit handler, ran after the steps)"] + [
        f"  {line}" for line in said
    ]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.kfp_local", description=pipeline.kfp_local.__doc__
    )
    parser.add_argument("pipeline_file", type=Path)
    parser.add_argument("--target", choices=["kubeflow", "vertex"], default="kubeflow")
    parser.add_argument("--data", type=Path, help="local copy of the data the file names")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--python", required=True, help="the project's Python for the steps")
    parser.add_argument("--dockerfile", type=Path, required=True)
    parser.add_argument(
        "--keep-uris", action="store_true", help="leave the s3:// and gs:// URIs as they are"
    )
    return parser


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from kfp import __version__ as kfp_version

    args = _parser().parse_args(argv)
    output_dir = args.output_dir.resolve()
    try:
        image = read_dockerfile(args.dockerfile)
        plan = make_plan(
            args.pipeline_file,
            args.target,
            output_dir,
            args.data.resolve() if args.data else None,
            args.dockerfile.resolve().parent,
            image,
            keep_uris=args.keep_uris,
        )
        store_env = store_environment(plan, dict(os.environ))
    except (LocalRunError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    log_dir = output_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    steps = HostSteps(
        python=args.python,
        image=image,
        workdir=args.dockerfile.resolve().parent,
        log_dir=log_dir,
        names=task_folders(plan),
        total=len(plan.steps),
        report=_progress,
        local_root=str(output_dir),
        remote_root=plan.remote_root,
        store_env=store_env,
    )
    for name, reason in plan.not_run.items():
        _progress(f"not run here: {name} ({reason})")
    start = time.monotonic()
    run_plan(plan, steps, output_dir, log_dir / "kfp.log")
    print(summary(plan, steps.done, kfp_version))
    print(f"took           {time.monotonic() - start:.0f} s; logs in {log_dir}")
    failed = [step for step in steps.done if not step.ok]
    if failed:
        print(
            f"error: step {failed[0].name} failed: {last_error(failed[0].log)} "
            f"(log {failed[0].log})",
            file=sys.stderr,
        )
        return exit_status.ERROR
    if len(steps.done) < len(plan.steps):
        print(f"error: kfp.local stopped early; see {log_dir / 'kfp.log'}", file=sys.stderr)
        return exit_status.ERROR
    examples = next((s.outputs["examples"] for s in steps.done if "examples" in s.outputs), {})
    if examples.get(NO_NEW_SPAN):
        # Every step succeeded and passed the night on: nothing trained, nothing pushed.
        print(f"outcome        no_new_span: {examples.get(NO_NEW_SPAN_REASON, '')}")
        return exit_status.OK
    blessing = next((s.outputs["blessing"] for s in steps.done if "blessing" in s.outputs), {})
    if blessing and not blessing.get("blessed"):
        print("outcome        not_blessed")
        return exit_status.NOT_BLESSED  # as `run`: the gate said no, nothing was pushed
    pushed = next(
        (s.outputs["pushed_model"] for s in steps.done if "pushed_model" in s.outputs), {}
    )
    if pushed.get(SERVED_CHANGED):  # a green step: the night's outcome, as `run` reports it
        print(f"outcome        served_changed: {pushed[SERVED_CHANGED]}")
        return exit_status.SERVED_CHANGED
    print("outcome        pushed")
    return exit_status.OK


if __name__ == "__main__":
    sys.exit(main())
