"""README's picture of the pipeline, drawn from the pipeline `create_pipeline` builds (the one
every runner runs) and the exit handler the compiled files add, so it cannot drift from the
code: tests/test_dag_picture.py compares the two.

    .venv/bin/python -m pipeline.dag_picture    # redraws it in README.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

START, END = "<!-- dag:start -->", "<!-- dag:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"
EXIT_HANDLER_NOTE = "the end of every run, failed ones too (KFP's exit handler; locally, `run`)"


def steps(pipeline, exit_handler_id: str) -> list[tuple[str, list[str], list[str]]]:
    """(step, the steps whose outputs it reads, the steps it only runs after), in the order
    the pipeline runs them; the exit handler last."""
    order = [component.id for component in pipeline.components]
    drawn = []
    for component in pipeline.components:
        reads = {channel.producer_component_id for channel in component.inputs.values()}
        after = {node.id for node in component.upstream_nodes} - reads
        drawn.append((component.id, sorted(reads, key=order.index), sorted(after, key=order.index)))
    drawn.append((exit_handler_id, [], []))
    return drawn


def picture(pipeline, exit_handler_id: str) -> str:
    rows = steps(pipeline, exit_handler_id)
    width = max(len(step) for step, _, _ in rows)
    lines = []
    for number, (step, reads, after) in enumerate(rows, start=1):
        sources = reads + [f"after {step_id}" for step_id in after]
        if step == exit_handler_id:
            sources = [EXIT_HANDLER_NOTE]
        arrow = f"  ◄─ {', '.join(sources)}" if sources else ""
        lines.append(f"{number:>2}. {step:<{width}}{arrow}".rstrip())
    return "\n".join(lines)


def default_pipeline():
    """The pipeline of a default local config (any runner's has the same topology)."""
    from components.trainer.config import TrainingConfig
    from pipeline.settings.config import PipelineConfig
    from pipeline.topology import create_pipeline

    config = PipelineConfig(
        pipeline_name="cifar10",
        pipeline_root="/pipeline-root",
        source_uri="/data/cifar-10-binary.tar.gz",
        source_fingerprint="picture",
        serving_dir="/serving",
        training=TrainingConfig(),
    )
    return create_pipeline(config)


def default_picture() -> str:
    from pipeline.kfp_ir import NIGHT_REPORT_TASK

    return picture(default_pipeline(), NIGHT_REPORT_TASK)


def block(drawn: str) -> str:
    return f"{START}\n```\n{drawn}\n```\n{END}"


def redrawn(text: str, drawn: str) -> str:
    """`text` with its picture block replaced by `drawn`."""
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), flags=re.S)
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"expected one {START} ... {END} block")
    return pattern.sub(lambda _: block(drawn), text)


def main() -> int:
    README.write_text(redrawn(README.read_text(), default_picture()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
