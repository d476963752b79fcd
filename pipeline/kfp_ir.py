"""The pipeline's one topology compiled to KFP v2 pipeline IR with TFX's KubeflowV2DagRunner:
the step both cloud targets share (`pipeline.vertex.compile`, `pipeline.kubeflow.compile`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.contract import RUNTIME_STATE_NODES
from components.storage.night_facts import NIGHT_KEY_PLACEHOLDER
from pipeline.common.compiled_target import NIGHT_REPORT_TASK, TFX_DAG, pipeline_tasks
from pipeline.common.files import write_atomically
from pipeline.settings.config import PipelineConfig

YAML_SUFFIXES = (".yaml", ".yml")


def resolver_executors(spec: dict[str, Any]) -> list[str]:
    """Executors the open-source KFP backend cannot run ("resolver not implemented")."""
    return sorted(
        name
        for name, executor in spec.get("deploymentSpec", {}).get("executors", {}).items()
        if "resolver" in executor
    )


def runner_config(image: str):
    """KubeflowV2DagRunner's settings for both targets: pipeline spec 2.1. Spec 2.0 (TFX's
    default) writes task constants as `runtimeValue.constantValue`, which the open-source
    KFP backend's driver and kfp.local refuse ("Expected constant."), and leaves out the
    inputs spec without which TFX's entrypoint reads the deprecated `inputs.parameters`
    that the backend no longer fills. Vertex AI runs 2.1 as well."""
    from tfx import v1 as tfx

    return tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
        default_image=image, use_pipeline_spec_2_1=True
    )


# Compiled with caching off, and no submit option turns caching on for them
# (pipeline/vertex/pipeline_file.py: with_caching).
UNCACHED_TASKS = RUNTIME_STATE_NODES


def parameter_defaults(config: PipelineConfig) -> dict[str, int]:
    """The runtime parameters each run may set (the span choice) and their defaults."""
    if not config.span_parameters:
        return {}
    return {"span": config.span, "span_window": config.span_window, "force": int(config.force)}


def build_pipeline_spec(config: PipelineConfig, image: str) -> dict[str, Any]:
    """The KFP v2 PipelineSpec of `create_pipeline(config)`, with the pipeline root as its
    default root and each runtime parameter's default in the spec itself (the YAML form has
    no runtimeConfig to carry either)."""
    from tfx import v1 as tfx

    from pipeline.topology import create_pipeline

    runner = tfx.orchestration.experimental.KubeflowV2DagRunner(config=runner_config(image))
    runner.set_exit_handler(night_report(config))
    pipeline = create_pipeline(config, night_key=NIGHT_KEY_PLACEHOLDER)
    spec = runner.run(pipeline, write_out=False)["pipelineSpec"]
    spec["defaultPipelineRoot"] = config.pipeline_root
    parameters = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    for name, value in parameter_defaults(config).items():
        parameters[name]["defaultValue"] = value
    _pass_parameters_down(spec)
    tasks = pipeline_tasks(spec)
    for name in UNCACHED_TASKS:
        tasks[name]["cachingOptions"] = {"enableCache": False}
    return spec


def _pass_parameters_down(spec: dict[str, Any]) -> None:
    """TFX nests the steps in the `tfx-dag` component when there is an exit handler but leaves
    the runtime parameters (the span choice) on the root alone, where the nested steps'
    `componentInputParameter` cannot reach them: the sub-DAG declares them and its task
    passes the root's on."""
    parameters = spec["root"].get("inputDefinitions", {}).get("parameters", {})
    if not parameters or TFX_DAG not in spec.get("components", {}):
        return
    declared = {name: {"parameterType": p["parameterType"]} for name, p in parameters.items()}
    spec["components"][TFX_DAG].setdefault("inputDefinitions", {})["parameters"] = declared
    task = spec["root"]["dag"]["tasks"][TFX_DAG]
    task.setdefault("inputs", {})["parameters"] = {
        name: {"componentInputParameter": name} for name in parameters
    }


def night_report(config: PipelineConfig):
    """The exit handler: after every night, failed ones too, the night's message kept in the
    serving folder and delivered (components/night_report)."""
    from tfx.orchestration.kubeflow.decorators import FinalStatusStr

    from components.night_report.component import NightReport

    vertex = config.vertex is not None
    return NightReport(
        final_status=FinalStatusStr(),
        serving_model_dir=config.serving_model_dir,
        night_key=NIGHT_KEY_PLACEHOLDER,
        runner="vertex" if vertex else "kubeflow",
        notify_secret=config.notify_secret if vertex else "",
    ).with_id(NIGHT_REPORT_TASK)


def yaml_output(output: Path) -> Path:
    if output.suffix not in YAML_SUFFIXES:
        raise ValueError(f"--output {output}: the KFP v2 pipeline file must end in .yaml")
    return output.resolve()


def write_pipeline_yaml(
    spec: dict[str, Any], output: Path, platform: dict[str, Any] | None = None
) -> Path:
    """Writes the spec, and the platform spec as a second YAML document if there is one (as
    the kfp compiler does), atomically: a failed write leaves no partial file behind."""
    import yaml

    output = yaml_output(output)
    documents = [spec, platform] if platform else [spec]
    return write_atomically(output, yaml.safe_dump_all(documents, sort_keys=True))
