"""Kubeflow Pipelines (open source, 2.x): the `compile --target kubeflow` settings checked and
the same topology written as KFP v2 pipeline IR (YAML)."""

from __future__ import annotations

import re
from pathlib import Path

from components.storage import object_store
from pipeline.common import compiled_target, kfp_platform
from pipeline.kfp_ir import (
    build_pipeline_spec,
    resolver_executors,
    write_pipeline_yaml,
    yaml_output,
)
from pipeline.settings.config import (
    KubeflowConfig,
    PipelineConfig,
    TrainingConfig,
    check_beam_args,
    cloud_pipeline_config,
)

# TFX components open artifacts themselves with tf.io.gfile: gs:// is built in, s3://
# (AWS S3, MinIO or SeaweedFS through S3_ENDPOINT) needs tensorflow-io in the image, which the
# current stack has not (components/storage/object_store.py): compiling there refuses s3://.
ARTIFACT_STORE_SCHEMES = ("gs://", "s3://")


def _artifact_store_uri(flag: str, uri: str) -> str:
    if uri.startswith("minio://"):
        raise ValueError(
            f"{flag} '{uri}': TFX components open artifacts with tf.io.gfile, which has no "
            f"minio:// filesystem; address the bucket as s3://{uri[len('minio://') :]} with "
            "S3_ENDPOINT pointing at MinIO"
        )
    if not uri.startswith(ARTIFACT_STORE_SCHEMES):
        raise ValueError(
            f"{flag} must be a gs:// or s3:// URI that the cluster's pods can "
            f"reach, not a local path, got '{uri}'"
        )
    object_store.refuse_on_this_stack(uri, what=f"{flag} {uri}")
    return uri.rstrip("/")


def kubeflow_config(
    *,
    pipeline_root: str,
    image: str,
    source_uri: str,
    training: TrainingConfig,
    workers: int = 1,
    trainer_cpu: float = 0.0,
    trainer_memory_gb: float = 0.0,
    trainer_gpus: int = 0,
    gpu_resource: str | None = None,
    source_fingerprint: str = "",
    beam_args: tuple[str, ...] = (),
    pipeline_name: str = "cifar10",
    s3_endpoint: str | None = None,
    s3_secret: str | None = None,
    **overrides,
) -> PipelineConfig:
    """The pipeline on a KFP cluster: the standard Trainer in its own pod with the
    given requests; strategy `auto` then picks from the devices that pod sees (`gpu_resource`
    names the accelerator, None: KubeflowConfig's). The Beam steps run in their pods
    (DirectRunner) with `beam_args`. With an s3:// store the pods get `s3_endpoint` and
    `s3_secret`'s keys (None: the cluster's own store and secret)."""
    if gpu_resource is not None and not trainer_gpus:
        raise ValueError(
            "--gpu-resource needs --trainer-gpus N: it names the accelerator the Trainer's pod "
            "requests N of"
        )
    root = _artifact_store_uri("--pipeline-root", pipeline_root)
    source_uri = _artifact_store_uri("--data", source_uri)
    on_s3 = any(object_store.is_s3(uri) for uri in (root, source_uri))
    for flag, value in (("--s3-endpoint", s3_endpoint), ("--s3-secret", s3_secret)):
        if value is not None and not on_s3:
            raise ValueError(
                f"{flag} is for an s3:// --pipeline-root or --data; this file uses neither"
            )
    if s3_endpoint and not s3_endpoint.startswith(("http://", "https://")):
        raise ValueError(f"--s3-endpoint must be an http:// or https:// URL, got '{s3_endpoint}'")
    store = {}
    if on_s3:
        store = {
            "s3_endpoint": kfp_platform.CLUSTER_ENDPOINT if s3_endpoint is None else s3_endpoint,
            "s3_secret": kfp_platform.STORE_SECRET if s3_secret is None else s3_secret,
        }
    if not image:
        raise ValueError("--image is required: the pipeline image every step runs")
    if workers != 1:
        raise ValueError(
            f"--workers {workers} is not compiled for Kubeflow Pipelines: the Trainer is one "
            "pod (see docs/kubeflow.md)"
        )
    if training.strategy == "multi_worker":
        raise ValueError(
            "--workers / --strategy multi_worker are not compiled for Kubeflow Pipelines: "
            "the Trainer is one pod (see docs/kubeflow.md)"
        )
    return cloud_pipeline_config(
        pipeline_name=pipeline_name,
        pipeline_root=root,
        source_uri=source_uri,
        source_fingerprint=source_fingerprint,
        training=training,
        beam_args=check_beam_args(beam_args),
        kubeflow=KubeflowConfig(
            image=image,
            trainer_cpu=trainer_cpu,
            trainer_memory_gb=trainer_memory_gb,
            trainer_gpus=trainer_gpus,
            gpu_resource=KubeflowConfig.gpu_resource if gpu_resource is None else gpu_resource,
            **store,
        ),
        **overrides,
    )


# TFX's step entrypoint, and the wrapper that registers s3:// and exits without the abort
# tensorflow-io causes at interpreter exit (components/storage/s3_entrypoint.py).
TFX_ENTRYPOINT = [
    "python",
    "-m",
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
]
S3_ENTRYPOINT = ["python", "-m", "components.storage.s3_entrypoint"]


def _with_s3_entrypoint(spec: dict) -> None:
    """Every TFX step of `spec` started through the s3:// wrapper, same arguments."""
    for executor in spec.get("deploymentSpec", {}).get("executors", {}).values():
        container = executor.get("container", {})
        if container.get("command") == TFX_ENTRYPOINT:
            container["command"] = list(S3_ENTRYPOINT)


def compile_pipeline(config: PipelineConfig, output: Path) -> Path:
    """Writes the KFP v2 pipeline IR (YAML) to `output`."""
    if config.kubeflow is None:
        raise ValueError("compile_pipeline needs a Kubeflow configuration")
    output = yaml_output(output)  # before the slow part
    spec = build_pipeline_spec(config, config.kubeflow.image)
    unsupported = resolver_executors(spec)
    if unsupported:  # the topology must stay runnable on the open-source backend
        raise RuntimeError(f"resolver executors in the compiled pipeline: {unsupported}")
    platform = {}
    if any(object_store.is_s3(uri) for uri in (config.pipeline_root, config.source_uri)):
        _with_s3_entrypoint(spec)
        platform = kfp_platform.add_store_access(
            spec, endpoint=config.kubeflow.s3_endpoint, secret=config.kubeflow.s3_secret
        )
    if config.notify_secret:
        platform = _notify_secret(spec, platform, config.notify_secret)
    return write_pipeline_yaml(spec, output, platform)


# A Kubernetes secret's name (a DNS subdomain) and a key in it.
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
NOTIFY_KEY = "url"


def check_notify_secret(value: str) -> tuple[str, str]:
    """(secret, key) of `--notify-secret NAME[:KEY]` (key `url` by default)."""
    name, _, key = value.partition(":")
    key = key or NOTIFY_KEY
    if not SECRET_NAME.match(name) or not SECRET_KEY.match(key):
        raise ValueError(
            f"--notify-secret '{value}': with --target kubeflow, name a Kubernetes secret and "
            f"optionally its key: NAME[:KEY] (default key '{NOTIFY_KEY}')"
        )
    return name, key


def _notify_secret(spec: dict, platform: dict, value: str) -> dict:
    """The exit handler's container gets the webhook URL from the secret."""
    from components.night_report.message import NOTIFY_VARIABLE

    secret, key = check_notify_secret(value)
    task = compiled_target.pipeline_tasks(spec)[compiled_target.NIGHT_REPORT_TASK]
    label = spec["components"][task["componentRef"]["name"]]["executorLabel"]
    return kfp_platform.add_secret_variable(
        platform, label, secret=secret, key=key, variable=NOTIFY_VARIABLE
    )
