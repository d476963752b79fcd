"""docs/design.md's "What runs where" table names what the code runs: the Beam steps are the
steps whose executors run Beam, and the endpoint's serving container is the one the Pusher
deploys with."""

import re
from pathlib import Path

from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor

from pipeline import dag_picture
from pipeline.topology import VERTEX_SERVING_IMAGE

PAGE = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def _row(first_cell: str) -> str:
    [row] = [line for line in PAGE.read_text().splitlines() if line.startswith(f"| {first_cell}")]
    return row


def _beam_steps() -> set[str]:
    return {
        component.id
        for component in dag_picture.default_pipeline().components
        if issubclass(component.executor_spec.executor_class, BaseBeamExecutor)
    }


def test_the_beam_row_names_the_steps_that_run_beam():
    named = set(re.findall(r"`(\w+)`", _row("Beam steps").split("|")[1]))
    assert named == _beam_steps()


def test_the_endpoint_row_names_the_serving_container_deployed():
    image = VERTEX_SERVING_IMAGE.rsplit("/", 1)[1].split(":")[0]  # tf2-cpu.2-16
    assert f"`{image}`" in _row("endpoint")
