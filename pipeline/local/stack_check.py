"""The verdict of `make test-current-stack` (stack/debian13-check.sh), once per stack: that
stack's tiny run finished with every component complete and a model pushed, and the other
stack serves that model with the same answers as its own stack.

It reads the run's summary and the two `predict --json` outputs; nothing else.

    python -m pipeline.local.stack_check RUN_SUMMARY OWN_STACK_JSONL OTHER_STACK_JSONL
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from components import contract

# Every node of the pipeline, the served state first.
EXPECTED_NODES = contract.PIPELINE_NODES
# Both stacks run the same float32 graph on CPU; kernels may round differently.
PROBABILITY_TOLERANCE = 1e-3


def run_problems(summary: dict) -> list[str]:
    """What is wrong with a run that should have completed and pushed; empty when nothing."""
    problems = []
    if summary.get("failed"):
        problems.append(f"the run failed: {summary['failed']}")
    states = summary.get("stage_states") or {}
    for node in EXPECTED_NODES:
        if states.get(node) != "complete":
            problems.append(f"{node} is {states.get(node, 'missing')}, not complete")
    if not summary.get("pushed"):
        problems.append("no model was pushed")
    return problems


def _by_image(lines: list[str]) -> dict[str, dict[str, float]]:
    """Image file name -> {class: probability} from `predict --json` lines."""
    answers = {}
    for line in lines:
        record = json.loads(line)
        answers[Path(record["file"]).name] = {t["class"]: t["probability"] for t in record["top"]}
    return answers


def serving_problems(own: list[str], other: list[str]) -> list[str]:
    """Where the other stack's answers differ from the model's own stack's, same images."""
    ours, theirs = _by_image(own), _by_image(other)
    if not ours:
        return ["its own stack classified no image"]
    problems = []
    for image, expected in sorted(ours.items()):
        got = theirs.get(image)
        if got is None:
            problems.append(f"{image}: the other stack gave no answer")
        elif set(got) != set(expected) or any(
            abs(got[name] - p) > PROBABILITY_TOLERANCE for name, p in expected.items()
        ):
            problems.append(f"{image}: other stack {got} against own {expected}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Prints the verdict; exit status 1 when anything is wrong."""
    summary_path, own_path, other_path = map(Path, sys.argv[1:] if argv is None else argv)
    try:
        summary = json.loads(summary_path.read_text())
        problems = run_problems(summary) + serving_problems(
            own_path.read_text().splitlines(), other_path.read_text().splitlines()
        )
    except (OSError, ValueError, KeyError) as err:
        print(f"error: cannot check the run at {summary_path}: {err}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        images = len(own_path.read_text().splitlines())
        print(
            f"ok: every component complete, model pushed ({summary['pushed_version_dir']}), "
            f"served by the other stack with the same answers for {images} images"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
