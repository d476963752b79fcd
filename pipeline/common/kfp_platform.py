"""How a compiled Kubeflow file gives its pods the `s3://` store: the endpoint in every container's
`env`, the keys from a Kubernetes secret through KFP's Kubernetes platform spec (`secretAsEnv`,
the second YAML document, as kfp-kubernetes' `use_secret_as_env` writes it). Nothing secret is
in the file: the secret's name and key names only. Shared by compile, submit and local-kfp, so
it imports nothing but PyYAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Kubeflow Pipelines' own artifact store (SeaweedFS since KFP 2.15, MinIO before): its
# in-cluster service and the secret the installation creates (and copies to each profile's
# namespace in multi-user mode), with its two key names.
CLUSTER_ENDPOINT = "http://minio-service.kubeflow:9000"
STORE_SECRET = "mlpipeline-minio-artifact"
SECRET_KEYS = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}
# What the steps read the endpoint from (components/storage/object_store.py, boto3 for Beam).
ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"


class PipelineFileError(ValueError):
    """A compiled file that is not one or two YAML mappings; the message is one line."""


def _executors(spec: dict[str, Any]) -> dict[str, Any]:
    return spec.get("deploymentSpec", {}).get("executors", {})


def add_store_access(spec: dict[str, Any], *, endpoint: str, secret: str) -> dict[str, Any]:
    """Sets `endpoint` (if any) in every container's env and returns the platform spec that
    gives every container the `secret`'s keys ({} if no secret)."""
    for executor in _executors(spec).values():
        container = executor.get("container")
        if container is None or not endpoint:
            continue
        env = [e for e in container.get("env", []) if e.get("name") != ENDPOINT_VARIABLE]
        container["env"] = [*env, {"name": ENDPOINT_VARIABLE, "value": endpoint}]
    if not secret:
        return {}
    secret_as_env = {
        # secretName for backends before KFP 2.4, secretNameParameter after (both, as the
        # kfp-kubernetes package writes them).
        "secretName": secret,
        "secretNameParameter": {"runtimeValue": {"constant": secret}},
        "keyToEnv": [{"secretKey": key, "envVar": var} for key, var in SECRET_KEYS.items()],
    }
    executors = {
        label: {"secretAsEnv": [secret_as_env]}
        for label, executor in _executors(spec).items()
        if "container" in executor
    }
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}


def add_secret_variable(
    platform: dict[str, Any], label: str, *, secret: str, key: str, variable: str
) -> dict[str, Any]:
    """The platform spec with `label`'s container also given `variable` from `key` of
    `secret` (only the secret's name is written: its value stays in the cluster)."""
    executors = (
        platform.setdefault("platforms", {})
        .setdefault("kubernetes", {})
        .setdefault("deploymentSpec", {})
        .setdefault("executors", {})
    )
    executors.setdefault(label, {}).setdefault("secretAsEnv", []).append(
        {
            "secretName": secret,
            "secretNameParameter": {"runtimeValue": {"constant": secret}},
            "keyToEnv": [{"secretKey": key, "envVar": variable}],
        }
    )
    return platform


def read_pipeline_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pipeline spec, platform spec) of a compiled YAML file: the first document and the
    optional second ({} if none), as kfp's Client reads them."""
    import yaml

    try:
        documents = [doc for doc in yaml.safe_load_all(Path(path).read_text()) if doc is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        if isinstance(err, UnicodeDecodeError):
            reason = "not UTF-8 text"
        elif isinstance(err, OSError):
            reason = err.strerror or type(err).__name__
        else:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise PipelineFileError(f"{path}: not a readable KFP pipeline YAML ({reason})") from err
    if not documents or len(documents) > 2 or not all(isinstance(d, dict) for d in documents):
        raise PipelineFileError(
            f"{path}: not a compiled pipeline (expected a pipeline spec and at most a platform "
            f"spec, found {len(documents)} YAML documents)"
        )
    return documents[0], documents[1] if len(documents) == 2 else {}


def secret_variables(platform: dict[str, Any], executor: str) -> dict[str, tuple[str, str]]:
    """The variables the platform spec gives `executor` from secrets: {env var: (secret, key)}."""
    config = (
        (platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}))
        .get("executors", {})
        .get(executor, {})
    )
    found = {}
    for entry in config.get("secretAsEnv", []):
        name = entry.get("secretNameParameter", {}).get("runtimeValue", {}).get("constant")
        for pair in entry.get("keyToEnv", []):
            found[pair["envVar"]] = (name or entry.get("secretName", ""), pair["secretKey"])
    return found
