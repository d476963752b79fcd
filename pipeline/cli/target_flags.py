"""`compile` flags that one target alone honours. Given with the other target, each is refused
(exit status 2, one line naming the flag, the target it is for and why the other cannot
honour it) instead of being dropped from the file. "Given" means on the command line, its
default value too: these flags' parser default is argparse.SUPPRESS, so an absent one is
missing from the namespace, and `refusal` fills in the real default after looking."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

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

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


FLAGS = {
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


def add(group: argparse._ActionsContainer, flag: str, **kwargs) -> None:
    """Adds one target's flag to the parser; its default is FLAGS'."""
    spec = FLAGS[flag]
    help_text = kwargs.pop("help", "")
    kwargs["help"] = f"{help_text} ({spec.target} only)".strip().replace("%", "%%")
    group.add_argument(flag, default=argparse.SUPPRESS, **kwargs)


def refusal(args: argparse.Namespace) -> str:
    """Why the compile is refused: the first target flag given that `args.target` cannot
    honour ('' if none). Fills in the default of every target flag not given."""
    given = [spec for spec in FLAGS.values() if hasattr(args, spec.dest)]
    for spec in FLAGS.values():
        if not hasattr(args, spec.dest):
            default = spec.default
            setattr(args, spec.dest, list(default) if isinstance(default, list) else default)
    refused = [spec for spec in given if spec.target != args.target]
    if not refused:
        return ""
    spec = refused[0]
    return f"{spec.flag} is for --target {spec.target}; {spec.why}"
