"""Vertex AI Pipelines: the same topology compiled with KubeflowV2DagRunner."""

from __future__ import annotations

from pathlib import Path

from pipeline import kfp_ir
from pipeline.settings.config import PipelineConfig


def compile_pipeline(config: PipelineConfig, output: Path) -> Path:
    """Writes the Vertex pipeline to `output`: KFP v2 YAML, or for a .json name the
    PipelineJob JSON that TFX marks deprecated."""
    from tfx import v1 as tfx

    from pipeline.topology import create_pipeline

    if config.vertex is None:
        raise ValueError("compile_pipeline needs a Vertex configuration")
    if output.suffix != ".json":
        spec = kfp_ir.build_pipeline_spec(config, config.vertex.image)
        return kfp_ir.write_pipeline_yaml(spec, output)
    output = output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=kfp_ir.runner_config(config.vertex.image),
        output_dir=str(output.parent),
        output_filename=output.name,
    )
    runner.run(
        create_pipeline(config),
        parameter_values=kfp_ir.parameter_defaults(config),
        write_out=True,
    )
    return output
