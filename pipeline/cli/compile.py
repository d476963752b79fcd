"""`cifar10-pipeline compile`: the same topology for Vertex AI or Kubeflow Pipelines; each target's
own flags are argument groups of their own, refused with the other target
(`pipeline.cli.target_flags`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.cli import target_flags
from pipeline.cli.shared import (
    add_gate_args,
    add_serving_args,
    add_training_args,
    keep_versions,
    output_problem,
    training_config,
    wrote,
)
from pipeline.common import exit_status, kfp_platform
from pipeline.settings.tpu import ACCEPTED_NAMES as TPU_NAMES


def _vertex_target_args(args: argparse.Namespace) -> str:
    """Compiling for Vertex needs a project and region; Kubeflow needs neither. Empty when
    given. (`submit` takes them from the compiled file.)"""
    missing = [
        flag
        for flag, value in (("--project", args.project), ("--region", args.region))
        if not value
    ]
    return f"{' and '.join(missing)} required with --target vertex" if missing else ""


def _kubeflow_config(args: argparse.Namespace):
    from pipeline.kubeflow import compile as kubeflow_compile

    return kubeflow_compile.kubeflow_config(
        pipeline_root=args.pipeline_root,
        image=args.image,
        source_uri=args.data,
        training=training_config(args),
        workers=args.workers,
        trainer_cpu=args.trainer_cpu,
        trainer_memory_gb=args.trainer_memory_gb,
        trainer_gpus=args.trainer_gpus,
        gpu_resource=args.gpu_resource,
        s3_endpoint=args.s3_endpoint,
        s3_secret=args.s3_secret,
        **_shared_compile_settings(args),
    )


def _vertex_config(args: argparse.Namespace):
    from pipeline.vertex import options as vertex_options

    missing = _vertex_target_args(args)
    if missing:
        raise ValueError(missing)
    return vertex_options.vertex_config(
        project=args.project,
        region=args.region,
        pipeline_root=args.pipeline_root,
        image=args.image,
        source_uri=args.data,
        training=training_config(args),
        tpu_type=args.tpu_type,
        tpu_count=args.tpu_cores,
        workers=args.workers,
        worker_machine_type=args.worker_machine_type,
        worker_gpus=args.worker_gpus,
        worker_gpu_type=args.worker_gpu_type,
        dataflow_region=args.dataflow_region,
        dataflow_temp_location=args.dataflow_temp_location,
        endpoint=args.endpoint,
        endpoint_keep=args.endpoint_keep,
        service_account=args.service_account,
        network=args.network,
        tpu_image=args.tpu_image,
        labels=vertex_options.parse_labels(args.label),
        **_shared_compile_settings(args),
    )


def _shared_compile_settings(args: argparse.Namespace) -> dict:
    """The flags both targets honour, --beam-arg and --no-cache among them."""
    return {
        "beam_args": tuple(args.beam_arg),
        "enable_cache": not args.no_cache,
        "source_fingerprint": args.data_fingerprint,
        "eval_fraction": args.eval_fraction,
        "accuracy_gate": args.accuracy_gate,
        "max_regression": args.max_regression,
        "max_class_drop": args.max_class_drop,
        "accept_drift": args.accept_drift,
        "accept_labels": args.accept_labels,
        "accept_duplicates": args.accept_duplicates,
        "keep_versions": keep_versions(args),
        "notify_secret": _notify_secret(args),
    }


def _notify_secret(args: argparse.Namespace) -> str:
    """--notify-secret, checked for its target: a Kubernetes secret NAME[:KEY] or a Secret
    Manager secret name. Only the name is compiled in, never the URL."""
    if not args.notify_secret:
        return ""
    if args.target == "kubeflow":
        from pipeline.kubeflow.compile import check_notify_secret

        check_notify_secret(args.notify_secret)
    else:
        from components.night_report.secret import check_name

        check_name(args.notify_secret)
    return args.notify_secret


def _compile(args: argparse.Namespace, make_config, compile_pipeline) -> int:
    """The same topology for either target; only the configuration differs."""
    output = Path(args.output)
    return wrote(
        "Compiled", lambda: compile_pipeline(make_config(args), output), ValueError, output
    )


def _compile_kubeflow(args: argparse.Namespace) -> int:
    from pipeline.kubeflow import compile as kubeflow_compile

    return _compile(args, _kubeflow_config, kubeflow_compile.compile_pipeline)


def _compile_vertex(args: argparse.Namespace) -> int:
    from pipeline.vertex import compile as vertex_compile

    return _compile(args, _vertex_config, vertex_compile.compile_pipeline)


def cmd_compile(args: argparse.Namespace) -> int:
    """A flag the target cannot honour, or an --output that cannot be written, is refused
    before anything is imported or written."""
    refused = target_flags.refusal(args) or output_problem(Path(args.output))
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return exit_status.BAD_INPUT
    return {"kubeflow": _compile_kubeflow, "vertex": _compile_vertex}[args.target](args)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Compile for either target; each target's own settings are groups of their own."""
    parser = commands.add_parser(
        "compile",
        help="compile the pipeline for Vertex AI or Kubeflow Pipelines "
        "(KubeflowV2DagRunner, KFP v2 YAML)",
        description="Writes the pipeline (KFP v2 YAML; a .json --output writes Vertex's "
        "deprecated PipelineJob JSON): the same DAG as `run`. Vertex: the Trainer "
        "on a Cloud TPU worker pool (strategy=tpu) and, optionally, Beam steps on "
        "Dataflow and the Pusher deploying to a Vertex endpoint. Kubeflow: the "
        "Trainer in its own pod with the --trainer-* requests. A flag of one target is "
        "refused with the other (exit status 2), never dropped.",
    )
    parser.add_argument("--target", choices=["vertex", "kubeflow"], default="vertex")
    target_flags.add(parser, "--project", help="Google Cloud project id")
    target_flags.add(parser, "--region", help="e.g. us-central1")
    parser.add_argument(
        "--pipeline-root",
        required=True,
        metavar="URI",
        help="folder for artifacts and pushed models: gs:// (vertex), gs:// or s3:// (kubeflow)",
    )
    parser.add_argument(
        "--image", required=True, help="pipeline image built from this repo's Dockerfile"
    )
    parser.add_argument(
        "--data",
        required=True,
        metavar="URI",
        help="CIFAR-10 archive or folder in the same kind of store",
    )
    parser.add_argument(
        "--data-fingerprint",
        default="",
        help="a label for the data at --data, kept in the ingest's properties; not needed "
        "for fresh data: the compiled ingest is never cached and fingerprints every span itself",
    )
    target_flags.add(
        parser,
        "--tpu-type",
        help=f"Cloud TPU of the training job: {', '.join(TPU_NAMES)} (default: v2-8, "
        "unless --worker-machine-type asks for CPU or GPU workers)",
    )
    target_flags.add(
        parser,
        "--tpu-image",
        help="image of the training job: required on a Cloud TPU (Dockerfile target "
        "tpu-trainer); CPU/GPU workers default to --image",
    )
    target_flags.add(
        parser,
        "--tpu-cores",
        type=int,
        help="optional check: the TPU's cores (v2/v3) or chips (v5e)",
    )
    _add_vertex_step_args(parser)
    _add_vertex_worker_args(parser)
    _add_kubeflow_pod_args(parser)
    parser.add_argument(
        "--output", default="pipeline.yaml", help="file to write (default: %(default)s)"
    )
    _add_cloud_args(parser)
    add_training_args(parser)
    add_gate_args(parser)
    add_serving_args(parser)
    parser.set_defaults(func=cmd_compile)


def _add_vertex_step_args(parser: argparse.ArgumentParser) -> None:
    """Where Vertex runs the Beam steps and where its Pusher also deploys."""
    target_flags.add(
        parser, "--dataflow-region", help="run the Beam steps on Dataflow in this region"
    )
    target_flags.add(
        parser,
        "--dataflow-temp-location",
        metavar="GS_URI",
        help="Dataflow's temporary files (required with --dataflow-region, refused without)",
    )
    target_flags.add(
        parser,
        "--endpoint",
        help="also deploy each pushed version to this Vertex AI endpoint; "
        "<pipeline-root>/serving still records every version",
    )
    target_flags.add(
        parser,
        "--endpoint-keep",
        type=int,
        metavar="N",
        help="deployed models kept on the endpoint before the served one, for a rollback that "
        "only moves traffic; older ones are undeployed after each push (default: "
        f"{target_flags.COMPILE['--endpoint-keep'].default})",
    )


def _add_vertex_worker_args(parser: argparse.ArgumentParser) -> None:
    """CPU or GPU machines instead of a Cloud TPU; only `compile --target vertex` reads them."""
    vertex = parser.add_argument_group("vertex: CPU or GPU training workers instead of a TPU")
    target_flags.add(
        vertex,
        "--worker-machine-type",
        help="train on --workers N machines of this type (e.g. n1-standard-8): a chief pool "
        "of one and a worker pool of N-1",
    )
    target_flags.add(vertex, "--worker-gpus", type=int, metavar="N", help="GPUs per worker")
    target_flags.add(
        vertex, "--worker-gpu-type", help="Vertex accelerator type, e.g. NVIDIA_TESLA_T4"
    )


def _add_kubeflow_pod_args(parser: argparse.ArgumentParser) -> None:
    """The Trainer pod's requests; only `compile --target kubeflow` reads them."""
    kubeflow = parser.add_argument_group("kubeflow: the Trainer pod's requests")
    target_flags.add(
        kubeflow, "--trainer-cpu", type=float, metavar="VCPU", help="CPU request (default: none)"
    )
    target_flags.add(
        kubeflow,
        "--trainer-memory-gb",
        type=float,
        metavar="GB",
        help="memory request (default: none)",
    )
    target_flags.add(
        kubeflow,
        "--trainer-gpus",
        type=int,
        metavar="N",
        help="accelerators to request (default: none)",
    )
    target_flags.add(
        kubeflow,
        "--gpu-resource",
        help="Kubernetes resource name of the --trainer-gpus accelerator (default: "
        "nvidia.com/gpu; refused without --trainer-gpus)",
    )
    store = parser.add_argument_group("kubeflow: how the pods reach an s3:// store")
    target_flags.add(
        store,
        "--s3-endpoint",
        metavar="URL",
        help="the S3 API every pod gets as AWS_ENDPOINT_URL (default: the cluster's own store, "
        f"{kfp_platform.CLUSTER_ENDPOINT}; '' for AWS S3)",
    )
    target_flags.add(
        store,
        "--s3-secret",
        metavar="NAME",
        help="Kubernetes secret whose accesskey and secretkey every pod gets as "
        f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (default: {kfp_platform.STORE_SECRET}; "
        "'' for none, e.g. workload identity)",
    )


def _add_cloud_args(parser: argparse.ArgumentParser) -> None:
    """Beam options and caching (both targets); the Vertex training job's identity."""
    both = parser.add_argument_group("both targets: the Beam steps and caching")
    both.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="Beam pipeline option of every Beam step, repeatable, e.g. "
        "--beam-arg=--direct_num_workers=4 (kubeflow) or, on Dataflow, "
        "--beam-arg=--disk_size_gb=100 --beam-arg=--machine_type=n2-standard-4 "
        "--beam-arg=--max_num_workers=4 --beam-arg=--subnetwork=URL "
        "--beam-arg=--no_use_public_ips",
    )
    both.add_argument("--no-cache", action="store_true", help="compile every step with caching off")
    both.add_argument(
        "--notify-secret",
        default="",
        metavar="SECRET",
        help="where the exit handler, which reports every night (failed ones too), finds the "
        "webhook URL: kubeflow, a Kubernetes secret NAME[:KEY] (key 'url' by default) given to "
        "its container as $CIFAR10_NOTIFY_URL; vertex, a Secret Manager secret "
        "projects/P/secrets/NAME[/versions/V] read with the pipeline's service account. "
        "Without it the night is kept in the serving folder and delivered nowhere",
    )
    cloud = parser.add_argument_group("vertex: the training job's cloud settings")
    target_flags.add(
        cloud,
        "--service-account",
        help="the training CustomJob (and Dataflow workers) run as this account",
    )
    target_flags.add(
        cloud,
        "--network",
        metavar="projects/NUMBER/global/networks/NAME",
        help="VPC network the training CustomJob is peered with",
    )
    target_flags.add(
        cloud,
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="label on the training CustomJob (submit adds it to the PipelineJob), repeatable",
    )
