"""Vertex AI Pipelines: reading a compiled file (KFP v2 YAML, or the older PipelineJob JSON)
and checking it against `submit`'s flags, without the network or TFX."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.contract import RUNTIME_STATE_NODES, TRAINER_NODE
from pipeline.common import compiled_target
from pipeline.common.submission import (
    SubmitError,
    container_images,
    dated_name,
    has_dag,
    listed_parameters,
    pipeline_name,
    run_parameters,
)

# The Vertex Trainer's custom_config keys (tfx.extensions.google_cloud_ai_platform; importing
# TFX takes about 30 s, too long for `submit`; tests check they match).
TRAINING_ARGS_KEY = "ai_platform_training_args"
VERTEX_REGION_KEY = "ai_platform_vertex_region"


def _read_pipeline_job(path: Path) -> dict[str, Any]:
    """The PipelineJob body: the JSON file as written, or a YAML PipelineSpec wrapped with
    its default pipeline root as the output directory."""
    import yaml

    if path.suffix not in (".yaml", ".yml"):
        return json.loads(path.read_text())
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(str(err).splitlines()[0]) from err
    if not isinstance(spec, dict):
        raise ValueError("not a YAML mapping")
    return {
        "pipelineSpec": spec,
        "runtimeConfig": {"gcsOutputDirectory": spec.get("defaultPipelineRoot", "")},
    }


def with_caching(job: dict[str, Any], enable_caching: bool | None) -> dict[str, Any]:
    """The PipelineJob body with every task's caching set to `enable_caching` (None: as
    compiled), except the steps that read the span or serving folders, which stay uncached
    whatever is asked (aiplatform's own `enable_caching` would overwrite them too)."""
    spec = job["pipelineSpec"]
    for component in [spec["root"], *spec.get("components", {}).values()]:
        for name, task in component.get("dag", {}).get("tasks", {}).items():
            if name in RUNTIME_STATE_NODES or name == compiled_target.NIGHT_REPORT_TASK:
                task["cachingOptions"] = {"enableCache": False}
            elif enable_caching is not None:
                task["cachingOptions"] = {"enableCache": enable_caching}
    return job


def write_job(submission: Submission, folder: Path) -> Path:
    """The file `aiplatform.PipelineJob` is given: the compiled one with the submission's
    caching applied by `with_caching` (PipelineJob JSON)."""
    job = with_caching(_read_pipeline_job(submission.template_path), submission.enable_caching)
    path = folder / "pipeline_job.json"
    path.write_text(json.dumps(job))
    return path


@dataclass(frozen=True)
class Submission:
    """What `submit` sends: the compiled file plus the PipelineJob settings."""

    template_path: Path
    display_name: str
    project: str
    region: str
    pipeline_root: str
    tasks: tuple[str, ...]
    images: tuple[str, ...]
    service_account: str = ""
    network: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    enable_caching: bool | None = None  # None: each task as compiled
    parameters: tuple[tuple[str, Any], ...] = ()  # runtime parameters set for this run

    def describe(self) -> str:
        caching = {None: "as compiled", True: "on", False: "off"}[self.enable_caching]
        return "\n".join(
            [
                f"would submit PipelineJob '{self.display_name}'",
                f"  to         projects/{self.project}/locations/{self.region}",
                f"  root       {self.pipeline_root}",
                f"  images     {', '.join(self.images)}",
                f"  tasks      {', '.join(self.tasks)}",
                f"  runs as    {self.service_account or '(the project default service account)'}",
                f"  network    {self.network or '(none)'}",
                f"  labels     {', '.join(f'{k}={v}' for k, v in self.labels) or '(none)'}",
                f"  caching    {caching}",
                f"  parameters {listed_parameters(dict(self.parameters))}",
            ]
        )


def _trainer_settings(spec: dict) -> dict:
    """The Vertex Trainer's custom_config as compiled (project, region, CustomJob spec)."""
    trainer = compiled_target.pipeline_tasks(spec).get(TRAINER_NODE, {})
    runtime_value = (
        trainer.get("inputs", {})
        .get("parameters", {})
        .get("custom_config", {})
        .get("runtimeValue", {})
    )
    # Pipeline spec 2.1 (what `compile` writes) holds the string itself; files compiled
    # before, in spec 2.0, wrap it, and Vertex still runs them.
    value = runtime_value.get("constant", runtime_value.get("constantValue", {}).get("stringValue"))
    try:
        return json.loads(value) if value else {}
    except json.JSONDecodeError:
        return {}


def load_submission(
    path: Path,
    project: str = "",
    region: str = "",
    service_account: str = "",
    network: str = "",
    labels: tuple[tuple[str, str], ...] = (),
    enable_caching: bool | None = None,
    parameters: list[str] | None = None,
) -> Submission:
    """Validates a compiled file (YAML, or the older JSON) against the submit-time
    settings (no network).

    Project and region default to the ones compiled in; different ones are refused, since
    the training CustomJob would still go to the compiled ones. The service account,
    network and labels default to the training CustomJob's.
    """
    try:
        job = _read_pipeline_job(Path(path))
    except (OSError, ValueError) as err:
        raise SubmitError(f"{path}: not a readable pipeline file ({err})") from err
    spec = job.get("pipelineSpec", {}) if isinstance(job, dict) else {}
    if not has_dag(spec):
        raise SubmitError(
            f"{path}: not a compiled Vertex pipeline (no pipelineSpec DAG); "
            "create it with `cifar10-pipeline compile --target vertex`"
        )
    root = job.get("runtimeConfig", {}).get("gcsOutputDirectory", "")
    if not root.startswith("gs://"):
        raise SubmitError(f"{path}: runtimeConfig.gcsOutputDirectory must be a gs:// URI")
    trainer = _trainer_settings(spec)
    training_args = trainer.get(TRAINING_ARGS_KEY, {})
    compiled = {
        "project": training_args.get("project", ""),
        "region": trainer.get(VERTEX_REGION_KEY, ""),
    }
    chosen = {"project": project, "region": region}
    for flag, value in chosen.items():
        if value and compiled[flag] and value != compiled[flag]:
            raise SubmitError(
                f"{path} was compiled for {flag} '{compiled[flag]}', not "
                f"'{value}': compile again with --{flag} {value}"
            )
        chosen[flag] = value or compiled[flag]
        if not chosen[flag]:
            raise SubmitError(f"{path} names no {flag}; pass --{flag}")
    job_spec = training_args.get("job_spec", {})
    return Submission(
        template_path=Path(path),
        display_name=dated_name(pipeline_name(spec)),
        project=chosen["project"],
        region=chosen["region"],
        pipeline_root=root,
        tasks=tuple(sorted(compiled_target.pipeline_tasks(spec))),
        images=container_images(spec),
        service_account=service_account or job_spec.get("service_account", ""),
        network=network or job_spec.get("network", ""),
        labels=tuple(sorted({**training_args.get("labels", {}), **dict(labels)}.items())),
        enable_caching=enable_caching,
        parameters=tuple(sorted(run_parameters(spec, parameters or []).items())),
    )
