"""README's picture of the pipeline is the pipeline's: redrawn from `create_pipeline` and the
exit handler, it must equal what README shows, and it is the same for every runner."""

import re
from pathlib import Path
from types import SimpleNamespace

from pipeline import dag_picture
from pipeline.kfp_ir import NIGHT_REPORT_TASK

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_shows_the_picture_the_topology_draws():
    text = (REPO / "README.md").read_text()
    drawn = dag_picture.default_picture()
    assert dag_picture.block(drawn) in text, "redraw it: .venv/bin/python -m pipeline.dag_picture"
    assert "ServedState" in drawn and NIGHT_REPORT_TASK in drawn


def test_the_readme_counts_the_steps_it_draws():
    drawn = dag_picture.default_picture()
    words = {9: "nine", 10: "ten", 11: "eleven"}
    assert f"The {words[len(drawn.splitlines())]} steps" in (REPO / "README.md").read_text()


def test_the_kubeflow_pipeline_draws_the_same_picture(tmp_path):
    from components.trainer.config import TrainingConfig
    from pipeline.kubeflow import compile as kubeflow_compile
    from pipeline.topology import create_pipeline

    kubeflow = create_pipeline(
        kubeflow_compile.kubeflow_config(
            pipeline_root="gs://b/root", image="IMAGE", source_uri="gs://b/c.tar.gz",
            training=TrainingConfig(),
        )
    )  # fmt: skip
    assert dag_picture.picture(kubeflow, NIGHT_REPORT_TASK) == dag_picture.default_picture()


def _component(name, reads=(), after=()):
    inputs = {f"in{i}": SimpleNamespace(producer_component_id=p) for i, p in enumerate(reads)}
    upstream = [SimpleNamespace(id=n) for n in (*reads, *after)]
    return SimpleNamespace(id=name, inputs=inputs, upstream_nodes=upstream)


def test_an_edge_is_drawn_as_a_read_or_as_an_order():
    pipeline = SimpleNamespace(
        components=[_component("A"), _component("B", reads=["A"]), _component("C", ["B"], ["A"])]
    )
    assert dag_picture.picture(pipeline, "Report").splitlines() == [
        " 1. A",
        " 2. B       ◄─ A",
        " 3. C       ◄─ B, after A",
        f" 4. Report  ◄─ {dag_picture.EXIT_HANDLER_NOTE}",
    ]


def test_redrawing_replaces_only_the_block():
    text = f"before\n{dag_picture.START}\nold\n{dag_picture.END}\nafter\n"
    assert dag_picture.redrawn(text, "new") == f"before\n{dag_picture.block('new')}\nafter\n"
    assert re.search("old", dag_picture.redrawn(text, "new")) is None
