"""`compile` and `submit` flags that one target alone honours (COMPILE, SUBMIT). Given with the
other target, each is refused (exit status 2, one line naming the flag, the target it is for
and why the other cannot honour it) instead of being dropped; so is one given without the
flag it is a setting of (`needs`). "Given" means on the command line, its default value too:
these flags' parser default is argparse.SUPPRESS, so an absent one is missing from the
namespace, and `refusal` fills in the real default after looking."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from components.contract import DEFAULT_ENDPOINT_KEEP
from pipeline.vertex.submit import WAIT_RETRY_SECONDS

VERTEX = "vertex"
KUBEFLOW = "kubeflow"

_TPU = (
    "a Kubeflow Trainer is one pod, not a Cloud TPU job: request its resources with "
    "--trainer-cpu, --trainer-memory-gb and --trainer-gpus"
)
_WORKERS = (
    "a Kubeflow Trainer is one pod, not Vertex worker pools: request its resources with "
    "--trainer-cpu, --trainer-memory-gb and --trainer-gpus"
)
_DATAFLOW = (
    "a Kubeflow file runs its Beam steps in their own pods (pass Beam options with --beam-arg)"
)
_POD = (
    "Vertex trains on a Cloud TPU (--tpu-type) or on --worker-machine-type machines "
    "(--worker-gpus, --worker-gpu-type), not in a pod with requests"
)

_GCS = "Vertex AI pipelines keep their artifacts and data on gs://, with the job's identity"


@dataclass(frozen=True)
class TargetFlag:
    flag: str
    target: str  # the one target that honours it
    default: object
    why: str  # why the other target cannot
    needs: str = ""  # the flag it is a setting of, refused without it

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


COMPILE = {
    flag.flag: flag
    for flag in (
        TargetFlag(
            "--project", VERTEX, None, "a Kubeflow file runs on the cluster that submit --host "
            "names, in no Google Cloud project",
        ),
        TargetFlag(
            "--region", VERTEX, None, "a Kubeflow file runs on the cluster that submit --host "
            "names, in no Vertex AI region",
        ),
        TargetFlag("--tpu-type", VERTEX, "", _TPU),
        TargetFlag("--tpu-image", VERTEX, "", _TPU),
        TargetFlag("--tpu-cores", VERTEX, None, _TPU),
        TargetFlag("--worker-machine-type", VERTEX, "", _WORKERS),
        TargetFlag("--worker-gpus", VERTEX, 0, _WORKERS),
        TargetFlag("--worker-gpu-type", VERTEX, "", _WORKERS),
        TargetFlag("--dataflow-region", VERTEX, "", _DATAFLOW),
        TargetFlag("--dataflow-temp-location", VERTEX, "", _DATAFLOW),
        TargetFlag("--endpoint", VERTEX, "", "a Kubeflow file cannot deploy to a Vertex endpoint"),
        TargetFlag(
            "--endpoint-keep", VERTEX, DEFAULT_ENDPOINT_KEEP,
            "a Kubeflow file cannot deploy to a Vertex endpoint", needs="--endpoint",
        ),
        TargetFlag(
            "--service-account", VERTEX, "", "it is the identity of Vertex's training "
            "CustomJob; Kubeflow pods run as their namespace's service account",
        ),
        TargetFlag(
            "--network", VERTEX, "", "it peers Vertex's training CustomJob with a VPC "
            "network; Kubeflow pods are on the cluster's network",
        ),
        TargetFlag(
            "--label", VERTEX, [], "it labels Vertex's training CustomJob and PipelineJob; "
            "a Kubeflow file has neither",
        ),
        TargetFlag("--trainer-cpu", KUBEFLOW, 0.0, _POD),
        TargetFlag("--trainer-memory-gb", KUBEFLOW, 0.0, _POD),
        TargetFlag("--trainer-gpus", KUBEFLOW, 0, _POD),
        TargetFlag("--gpu-resource", KUBEFLOW, None, _POD),
        TargetFlag("--s3-endpoint", KUBEFLOW, None, _GCS),
        TargetFlag("--s3-secret", KUBEFLOW, None, _GCS),
    )
}  # fmt: skip


_KFP_RUN = "a Kubeflow run goes to the cluster that --host names"
_VERTEX_JOB = "a Vertex AI PipelineJob goes to the project and region compiled in the file"
_NO_CACHE = (
    "kfp's Client would set it on every step, also the two that must stay uncached "
    "(compile --target kubeflow --no-cache sets it in the file)"
)
_WAIT = "a Kubeflow run is not followed to its end (see it on the cluster's dashboard)"

SUBMIT = {
    flag.flag: flag
    for flag in (
        TargetFlag("--project", VERTEX, "", _KFP_RUN + ", in no Google Cloud project"),
        TargetFlag("--region", VERTEX, "", _KFP_RUN + ", in no Vertex AI region"),
        TargetFlag(
            "--service-account", VERTEX, "", "a Kubeflow run's pods run as their namespace's "
            "service account",
        ),
        TargetFlag("--network", VERTEX, "", "a Kubeflow run's pods are on the cluster's network"),
        TargetFlag("--label", VERTEX, [], "a Kubeflow run has no labels"),
        TargetFlag("--cache", VERTEX, False, _NO_CACHE),
        TargetFlag("--no-cache", VERTEX, False, _NO_CACHE),
        TargetFlag("--wait", VERTEX, False, _WAIT),
        TargetFlag("--poll-seconds", VERTEX, 30.0, _WAIT, needs="--wait"),
        TargetFlag("--wait-retry-seconds", VERTEX, WAIT_RETRY_SECONDS, _WAIT, needs="--wait"),
        TargetFlag("--api-endpoint", VERTEX, "", _KFP_RUN),
        TargetFlag("--host", KUBEFLOW, "", _VERTEX_JOB),
        TargetFlag("--namespace", KUBEFLOW, "", _VERTEX_JOB + ", in no Kubernetes namespace"),
        TargetFlag("--experiment", KUBEFLOW, "", _VERTEX_JOB + ", in no KFP experiment"),
        TargetFlag("--run-name", KUBEFLOW, "", _VERTEX_JOB + ", named by its pipeline and time"),
    )
}  # fmt: skip


def add(group: argparse._ActionsContainer, flag: str, table: dict = COMPILE, **kwargs) -> None:
    """Adds one target's flag of `table` (COMPILE, SUBMIT) to the parser; its default is
    the table's."""
    spec = table[flag]
    help_text = kwargs.pop("help", "")
    if help_text != argparse.SUPPRESS:
        kwargs["help"] = f"{help_text} ({spec.target} only)".strip().replace("%", "%%")
    else:
        kwargs["help"] = help_text
    group.add_argument(flag, default=argparse.SUPPRESS, **kwargs)


def refusal(args: argparse.Namespace, table: dict = COMPILE) -> str:
    """Why the command is refused: the first flag of `table` given that `args.target` cannot
    honour, else the first given without the flag it needs ('' if none). Fills in the
    default of every flag of `table` not given."""
    given = [spec for spec in table.values() if hasattr(args, spec.dest)]
    for spec in table.values():
        if not hasattr(args, spec.dest):
            default = spec.default
            setattr(args, spec.dest, list(default) if isinstance(default, list) else default)
    refused = [spec for spec in given if spec.target != args.target]
    if refused:
        spec = refused[0]
        return f"{spec.flag} is for --target {spec.target}; {spec.why}"
    names = {spec.flag for spec in given}
    alone = [spec for spec in given if spec.needs and spec.needs not in names]
    if alone:
        spec = alone[0]
        return f"{spec.flag} needs {spec.needs}: it is a setting of {spec.needs}"
    return ""
