"""`cifar10-pipeline`: run the pipeline locally, compile and submit it to Vertex AI or
Kubeflow Pipelines (after running the compiled file here under kfp.local, if you like),
classify images with the pushed model."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from components import stack
from components.trainer.config import MODELS, PRECISIONS, STRATEGIES, TrainingConfig
from pipeline import exit_status, library_log
from pipeline.config import DEFAULT_OUTPUT_DIR, DEFAULT_SERVING_DIR, PipelineConfig
from pipeline.submission import SubmitError
from pipeline.tpu import ACCEPTED_NAMES as TPU_NAMES
from pipeline.vertex_runner import WAIT_RETRY_SECONDS

# Commands whose libraries' console output (TensorFlow's C++ start-up errors, TFX and absl
# logging) goes to DEFAULT_OUTPUT_DIR/logs; `run` keeps its own log in its output folder.
LIBRARY_OUTPUT_TO_LOG = ("compile", "submit", "predict")


def _default(config_class: type, name: str):
    """A config dataclass's default: the CLI never restates it."""
    return next(f.default for f in dataclasses.fields(config_class) if f.name == name)


def _add_training_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training")
    group.add_argument(
        "--model",
        choices=MODELS,
        default=_default(TrainingConfig, "model"),
        help="airbench: the fast default (widths 32/64/128, 5 epochs); airbench94: the "
        "wider preset for more time or a TPU (64/256/256, 10 epochs, batch 1,024); seed_cnn: "
        "the classic Colab TPU recipe (default: %(default)s)",
    )
    group.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=_default(TrainingConfig, "strategy"),
        help="tf.distribute strategy (auto: TPU if configured, else several "
        "GPUs or --cpu-replicas, else one device)",
    )
    group.add_argument(
        "--tpu", default="", help="TPU name, grpc://HOST:8470 (Colab) or 'local' (TPU VM)"
    )
    group.add_argument(
        "--cpu-replicas",
        type=int,
        metavar="N",
        default=_default(TrainingConfig, "cpu_replicas"),
        help="split the CPU into N logical devices for MirroredStrategy",
    )
    group.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=1,
        help="train with N worker processes (MultiWorkerMirroredStrategy): run: N local "
        "processes on loopback; compile --target vertex: a chief and N-1 workers of "
        "--worker-machine-type (default: %(default)s)",
    )
    group.add_argument("--epochs", type=int, help="default: the model recipe's")
    group.add_argument(
        "--per-replica-batch-size", type=int, help="default: 128 on TPU, the recipe's elsewhere"
    )
    group.add_argument(
        "--learning-rate",
        type=float,
        help="peak learning rate at the recipe's reference batch; scaled with the global batch",
    )
    group.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=_default(TrainingConfig, "precision"),
        help="auto: bf16 on TPU; bf16/fp16 on GPUs that have it; bf16 on CPUs with "
        "native bf16 (AVX512_BF16, AMX), else float32",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=_default(TrainingConfig, "seed"),
        help="seeds weights, shuffling and augmentation (default: %(default)s)",
    )


def _training_config(args: argparse.Namespace) -> TrainingConfig:
    """The Trainer's settings; several workers train with multi_worker (auto becomes it, any
    other strategy is refused by the configuration that checks it)."""
    multi = args.workers > 1 and args.strategy == "auto"
    return TrainingConfig(
        model=args.model,
        strategy="multi_worker" if multi else args.strategy,
        tpu=args.tpu,
        cpu_replicas=args.cpu_replicas,
        epochs=args.epochs,
        per_replica_batch_size=args.per_replica_batch_size,
        learning_rate=args.learning_rate,
        precision=args.precision,
        seed=args.seed,
    )


def _add_gate_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data and evaluation")
    group.add_argument(
        "--eval-fraction",
        type=float,
        default=_default(PipelineConfig, "eval_fraction"),
        help="share of training records carved out for eval when the "
        "source has no test batch (class-balanced, deterministic)",
    )
    group.add_argument(
        "--accuracy-gate",
        type=float,
        default=_default(PipelineConfig, "accuracy_gate"),
        help="minimum eval accuracy for the model to be blessed and pushed (default: %(default)s)",
    )
    group.add_argument(
        "--max-regression",
        type=float,
        default=_default(PipelineConfig, "max_regression"),
        help="how far accuracy may fall below the baseline model (default: %(default)s)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    # Only light modules until the data is checked: TFX, Beam and TensorFlow take about a
    # minute to import here, and a mistyped --data must not wait for them.
    from components.cifar10_example_gen.sources import SourceError, count_records, fingerprint
    from components.trainer.hardware import PrecisionError
    from components.validation_gate.checks import DataValidationError
    from pipeline import data_source, local_runner, report_text

    known = (
        (SourceError, exit_status.BAD_INPUT),
        (PrecisionError, exit_status.BAD_INPUT),
        (local_runner.OutputDirError, exit_status.BAD_INPUT),
        (DataValidationError, exit_status.DATA_INVALID),
    )
    output_dir = Path(args.output_dir).resolve()
    try:  # arguments, data location and every record: SourceError is a ValueError too
        source = data_source.resolve(args.data)
        config = local_runner.local_config(
            output_dir,
            source,
            fingerprint(source),
            _training_config(args),
            eval_fraction=args.eval_fraction,
            accuracy_gate=args.accuracy_gate,
            max_regression=args.max_regression,
            enable_cache=not args.no_cache,
            beam_args=tuple(args.beam_arg),
            local_workers=args.workers,
        )
        checking = time.time()
        counts = count_records(source)
    except (ValueError, data_source.DataSourceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(
        f"Data: {source} ({counts['train']} training and {counts['test']} test records, "
        f"checked in {time.time() - checking:.1f}s)\nOutput: {output_dir}",
        file=sys.stderr,
    )
    try:
        with local_runner.exclusive_output_dir(output_dir):
            try:
                facts = local_runner.run(config, output_dir)
            finally:  # also for a failed run: the report says what did run and why it stopped
                report_path = _write_report(output_dir)
    except Exception as err:
        for cause in _causes(err):
            for error_type, status in known:
                if isinstance(cause, error_type):
                    print(f"error: {cause}", file=sys.stderr)
                    return status
        print(
            f"error: {type(err).__name__}: {err}\n(see the log file above for details)",
            file=sys.stderr,
        )
        return exit_status.ERROR
    print(report_text.render(facts))
    if report_path:
        print(f"report         {report_path}")
    if facts.blessed is False:
        return exit_status.NOT_BLESSED
    return exit_status.OK


def _write_report(output_dir: Path) -> Path | None:
    """The HTML report of a finished run; a broken report must not hide the outcome."""
    from pipeline import report

    try:
        return report.build_report(output_dir)
    except Exception as err:
        print(f"warning: could not write the report: {err}", file=sys.stderr)
        return None


def _causes(err: BaseException) -> list[BaseException]:
    """The exception and the ones it was raised from (an executor's error may arrive
    wrapped by the orchestrator)."""
    chain = [err]
    while (chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    return chain


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
    from pipeline import kubeflow_runner

    return kubeflow_runner.kubeflow_config(
        pipeline_root=args.pipeline_root,
        image=args.image,
        source_uri=args.data,
        training=_training_config(args),
        trainer_cpu=args.trainer_cpu,
        trainer_memory_gb=args.trainer_memory_gb,
        trainer_gpus=args.trainer_gpus,
        gpu_resource=args.gpu_resource,
        **_shared_compile_settings(args),
    )


def _vertex_config(args: argparse.Namespace):
    from pipeline import vertex_config

    missing = _vertex_target_args(args)
    if missing:
        raise ValueError(missing)
    return vertex_config.vertex_config(
        project=args.project,
        region=args.region,
        pipeline_root=args.pipeline_root,
        image=args.image,
        source_uri=args.data,
        training=_training_config(args),
        tpu_type=args.tpu_type,
        tpu_count=args.tpu_cores,
        workers=args.workers,
        worker_machine_type=args.worker_machine_type,
        worker_gpus=args.worker_gpus,
        worker_gpu_type=args.worker_gpu_type,
        dataflow_region=args.dataflow_region,
        dataflow_temp_location=args.dataflow_temp_location,
        endpoint=args.endpoint,
        beam_args=tuple(args.beam_arg),
        service_account=args.service_account,
        network=args.network,
        tpu_image=args.tpu_image,
        labels=vertex_config.parse_labels(args.label),
        enable_cache=not args.no_cache,
        **_shared_compile_settings(args),
    )


def _shared_compile_settings(args: argparse.Namespace) -> dict:
    return {
        "source_fingerprint": args.data_fingerprint,
        "eval_fraction": args.eval_fraction,
        "accuracy_gate": args.accuracy_gate,
        "max_regression": args.max_regression,
    }


def _submit_kubeflow(args: argparse.Namespace) -> int:
    from pipeline import kubeflow_runner

    try:
        submission = kubeflow_runner.load_submission(
            Path(args.pipeline_file), args.host, args.namespace, args.experiment, args.run_name
        )
        if args.dry_run:
            print(submission.describe())
            return exit_status.OK
        run_id = kubeflow_runner.submit(submission)
    except SubmitError as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(
        f"Submitted run {run_id} ('{submission.run_name}', experiment "
        f"'{submission.experiment}')\n{submission.host}/#/runs/details/{run_id}"
    )
    return exit_status.OK


def _submit_vertex(args: argparse.Namespace) -> int:
    from pipeline import vertex_config, vertex_file, vertex_runner

    try:
        submission = vertex_file.load_submission(
            Path(args.pipeline_file),
            args.project,
            args.region,
            args.service_account,
            args.network,
            vertex_config.parse_labels(args.label),
            args.enable_caching,
        )
        if args.dry_run:
            print(submission.describe())
            return exit_status.OK
        job = vertex_runner.submit(submission, args.api_endpoint)
        print(
            f"Submitted {job.resource_name}\n{vertex_runner.console_url(job.resource_name)}",
            flush=True,
        )
        if not args.wait:
            return exit_status.OK
        state = vertex_runner.wait(
            job,
            lambda line: print(line, file=sys.stderr, flush=True),
            args.poll_seconds,
            args.wait_retry_seconds,
        )
    except (SubmitError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    except vertex_runner.LostContact as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.LOST_CONTACT
    print(f"PipelineJob {submission.display_name} ended: {state}")
    return exit_status.OK if state == "PIPELINE_STATE_SUCCEEDED" else exit_status.ERROR


def _wrote(verb: str, write: Callable[[], Path], refused: type[Exception]) -> int:
    """A command that writes one file: its path when written, one line when `refused`."""
    try:
        path = write()
    except refused as err:
        print(f"error: {err}", file=sys.stderr)
        return exit_status.BAD_INPUT
    print(f"{verb} {path}")
    return exit_status.OK


def _compile(args: argparse.Namespace, make_config, compile_pipeline) -> int:
    """The same topology for either target; only the configuration differs."""
    return _wrote(
        "Compiled", lambda: compile_pipeline(make_config(args), Path(args.output)), ValueError
    )


def _compile_kubeflow(args: argparse.Namespace) -> int:
    from pipeline import kubeflow_runner

    return _compile(args, _kubeflow_config, kubeflow_runner.compile_pipeline)


def _compile_vertex(args: argparse.Namespace) -> int:
    from pipeline import vertex_compile

    return _compile(args, _vertex_config, vertex_compile.compile_pipeline)


def cmd_compile(args: argparse.Namespace) -> int:
    return {"kubeflow": _compile_kubeflow, "vertex": _compile_vertex}[args.target](args)


def cmd_submit(args: argparse.Namespace) -> int:
    return {"kubeflow": _submit_kubeflow, "vertex": _submit_vertex}[args.target](args)


def cmd_local_kfp(args: argparse.Namespace) -> int:
    """Hands the file to `pipeline.kfp_local` in the kfp SDK's own environment; each step
    comes back to this environment's Python. The checkout is found from the installed
    package (editable, as `make` installs it), not from where the command runs."""
    checkout = Path(str(importlib.resources.files("pipeline"))).parent
    kfp_python = Path(args.kfp_python or stack.kfp_local_python(checkout))
    dockerfile = checkout / "Dockerfile"
    for needed, hint in (
        (kfp_python, "run `make setup-kfp`"),
        (dockerfile, "install from a checkout with `make setup`"),
    ):
        if not needed.exists():
            print(f"error: {needed} not found: {hint} (see README, Kubeflow)", file=sys.stderr)
            return exit_status.BAD_INPUT
    command = [str(kfp_python), "-m", "pipeline.kfp_local", args.pipeline_file]
    command += ["--target", args.target, "--output-dir", args.output_dir]
    command += ["--python", sys.executable, "--dockerfile", str(dockerfile)]
    if args.data:
        command += ["--data", args.data]
    return subprocess.call(command)


def cmd_report(args: argparse.Namespace) -> int:
    from pipeline import report

    return _wrote(
        "Wrote", lambda: report.build_report(Path(args.run_dir).resolve()), FileNotFoundError
    )


def cmd_predict(args: argparse.Namespace) -> int:
    from pipeline import predict

    return predict.main(args)


def _add_run_parser(commands: argparse._SubParsersAction) -> None:
    """Run locally: data, output folder, training and gate."""
    run = commands.add_parser(
        "run",
        help="run the whole pipeline locally (Beam DirectRunner, SQLite metadata)",
        description="Ingest, validate, train, evaluate and push on this machine. Finished "
        "steps are reused from the metadata cache on a rerun.",
    )
    run.add_argument(
        "--data",
        metavar="PATH_OR_URL",
        help="CIFAR-10 archive (.tar.gz), extracted cifar-10-batches-bin/ or "
        "-py/ folder, image folder, gs:// path or URL. Default: "
        "$CIFAR10_DATA, then the local cache, then the official download",
    )
    run.add_argument(
        "--output-dir",
        default=str(DEFAULT_OUTPUT_DIR),
        help="artifacts, metadata, serving models and run_summary.json (default: %(default)s)",
    )
    run.add_argument(
        "--no-cache",
        action="store_true",
        help="rerun every component even if its inputs did not change",
    )
    run.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra Beam pipeline option, e.g. --beam-arg=--direct_num_workers=2",
    )
    _add_training_args(run)
    _add_gate_args(run)
    run.set_defaults(func=cmd_run)


def _add_compile_parser(commands: argparse._SubParsersAction) -> None:
    """Compile for either target; each target's own settings are groups of their own."""
    parser = commands.add_parser(
        "compile",
        help="compile the pipeline for Vertex AI or Kubeflow Pipelines "
        "(KubeflowV2DagRunner, KFP v2 YAML)",
        description="Writes the pipeline (KFP v2 YAML; a .json --output writes Vertex's "
        "deprecated PipelineJob JSON): the same DAG as `run`. Vertex: the Trainer "
        "on a Cloud TPU worker pool (strategy=tpu) and, optionally, Beam steps on "
        "Dataflow and the Pusher deploying to a Vertex endpoint. Kubeflow: the "
        "Trainer in its own pod with the --trainer-* requests.",
    )
    parser.add_argument("--target", choices=["vertex", "kubeflow"], default="vertex")
    parser.add_argument("--project", help="Google Cloud project id (vertex)")
    parser.add_argument("--region", help="e.g. us-central1 (vertex)")
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
        help="change this when the data at --data changes, so that Vertex caching re-ingests it",
    )
    parser.add_argument(
        "--tpu-type",
        default="",
        help=f"Cloud TPU of the training job: {', '.join(TPU_NAMES)} (default: v2-8, "
        "unless --worker-machine-type asks for CPU or GPU workers)",
    )
    parser.add_argument(
        "--tpu-image",
        default="",
        help="image of the TPU training job (Dockerfile target tpu-trainer; default: --image)",
    )
    parser.add_argument(
        "--tpu-cores", type=int, help="optional check: the TPU's cores (v2/v3) or chips (v5e)"
    )
    parser.add_argument(
        "--dataflow-region", default="", help="run the Beam steps on Dataflow in this region"
    )
    parser.add_argument("--dataflow-temp-location", default="", metavar="GS_URI")
    parser.add_argument(
        "--endpoint",
        default="",
        help="deploy the blessed model to this Vertex endpoint "
        "instead of pushing to <pipeline-root>/serving",
    )
    _add_vertex_worker_args(parser)
    _add_kubeflow_pod_args(parser)
    parser.add_argument(
        "--output", default="pipeline.yaml", help="file to write (default: %(default)s)"
    )
    _add_cloud_args(parser)
    _add_training_args(parser)
    _add_gate_args(parser)
    parser.set_defaults(func=cmd_compile)


def _add_vertex_worker_args(parser: argparse.ArgumentParser) -> None:
    """CPU or GPU machines instead of a Cloud TPU; only `compile --target vertex` reads them."""
    vertex = parser.add_argument_group("vertex: CPU or GPU training workers instead of a TPU")
    vertex.add_argument(
        "--worker-machine-type",
        default="",
        help="train on --workers N machines of this type (e.g. n1-standard-8): a chief pool "
        "of one and a worker pool of N-1",
    )
    vertex.add_argument("--worker-gpus", type=int, default=0, metavar="N", help="GPUs per worker")
    vertex.add_argument(
        "--worker-gpu-type", default="", help="Vertex accelerator type, e.g. NVIDIA_TESLA_T4"
    )


def _add_kubeflow_pod_args(parser: argparse.ArgumentParser) -> None:
    """The Trainer pod's requests; only `compile --target kubeflow` reads them."""
    kubeflow = parser.add_argument_group("kubeflow: the Trainer pod's requests")
    kubeflow.add_argument(
        "--trainer-cpu", type=float, default=0.0, metavar="VCPU", help="CPU request (default: none)"
    )
    kubeflow.add_argument(
        "--trainer-memory-gb",
        type=float,
        default=0.0,
        metavar="GB",
        help="memory request (default: none)",
    )
    kubeflow.add_argument(
        "--trainer-gpus",
        type=int,
        default=0,
        metavar="N",
        help="accelerators to request (default: none)",
    )
    kubeflow.add_argument(
        "--gpu-resource",
        default="nvidia.com/gpu",
        help="Kubernetes resource name of the accelerator (default: %(default)s)",
    )


def _add_cloud_args(parser: argparse.ArgumentParser) -> None:
    """Settings of the Vertex training job and its Dataflow workers."""
    cloud = parser.add_argument_group("cloud settings")
    cloud.add_argument(
        "--beam-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="Beam/Dataflow worker option, repeatable, e.g. "
        "--beam-arg=--disk_size_gb=100 --beam-arg=--machine_type=n2-standard-4 "
        "--beam-arg=--max_num_workers=4 --beam-arg=--subnetwork=URL "
        "--beam-arg=--no_use_public_ips",
    )
    cloud.add_argument(
        "--service-account",
        default="",
        help="the training CustomJob (and Dataflow workers) run as this account",
    )
    cloud.add_argument(
        "--network",
        default="",
        metavar="projects/NUMBER/global/networks/NAME",
        help="VPC network the training CustomJob is peered with",
    )
    cloud.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label on the training CustomJob (submit adds it to the PipelineJob), repeatable",
    )
    cloud.add_argument(
        "--no-cache", action="store_true", help="compile every step with caching off"
    )


def _add_submit_parser(commands: argparse._SubParsersAction) -> None:
    """Submit a compiled file; each target's settings are a group of their own."""
    parser = commands.add_parser(
        "submit",
        help="submit a compiled pipeline to Vertex AI or Kubeflow Pipelines",
        description="Creates a Vertex AI PipelineJob (google-cloud-aiplatform), or a Kubeflow "
        "Pipelines run (kfp Client), from a file written by `compile`.",
    )
    parser.add_argument("pipeline_file", metavar="PIPELINE_FILE")
    parser.add_argument("--target", choices=["vertex", "kubeflow"], default="vertex")
    _add_vertex_submit_args(parser)
    kubeflow = parser.add_argument_group("kubeflow")
    kubeflow.add_argument("--host", default="", help="KFP API URL, e.g. http://localhost:8080")
    kubeflow.add_argument(
        "--namespace", default="", help="profile namespace on multi-user clusters"
    )
    kubeflow.add_argument("--experiment", default="", help="default: the pipeline name")
    kubeflow.add_argument("--run-name", default="", help="default: <pipeline>-<timestamp>")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the file and print what would be submitted; no network",
    )
    parser.add_argument("--api-endpoint", default="", help=argparse.SUPPRESS)
    parser.set_defaults(func=cmd_submit)


def _add_vertex_submit_args(parser: argparse.ArgumentParser) -> None:
    """What `submit --target vertex` may override in the compiled file, and --wait."""
    vertex = parser.add_argument_group("vertex")
    vertex.add_argument(
        "--project", default="", help="default: the compiled one; a different one is refused"
    )
    vertex.add_argument(
        "--region", default="", help="default: the compiled one; a different one is refused"
    )
    vertex.add_argument(
        "--service-account",
        default="",
        help="the PipelineJob runs as this account (default: the compiled training job's)",
    )
    vertex.add_argument("--network", default="", help="default: the compiled one")
    vertex.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="PipelineJob label, repeatable (added to the compiled ones)",
    )
    caching = vertex.add_mutually_exclusive_group()
    caching.add_argument(
        "--cache",
        dest="enable_caching",
        action="store_const",
        const=True,
        help="reuse cached step results (default: as compiled)",
    )
    caching.add_argument(
        "--no-cache",
        dest="enable_caching",
        action="store_const",
        const=False,
        help="rerun every step",
    )
    vertex.add_argument(
        "--wait", action="store_true", help="wait for the run to end, printing each step's state"
    )
    vertex.add_argument("--poll-seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    vertex.add_argument(
        "--wait-retry-seconds",
        type=float,
        default=WAIT_RETRY_SECONDS,
        help="with --wait: how long to keep polling through network or server errors before "
        "giving up with exit status 5; the job runs on (default: %(default)s)",
    )


def _add_local_kfp_parser(commands: argparse._SubParsersAction) -> None:
    """Run a compiled file under kfp.local."""
    local_kfp = commands.add_parser(
        "local-kfp",
        help="run a compiled pipeline file here under kfp.local, before building an image",
        description="Runs exactly PIPELINE_FILE (from `compile`) under KFP's local orchestrator "
        "(kfp.local, from .venv-kfp: `make setup-kfp`), each container step a process of this "
        "environment with the Dockerfile's ENV. The pipeline root maps to --output-dir, the "
        "data to --data, the image's WORKDIR to this checkout. --target vertex runs the steps "
        "that need no Google API and lists the others.",
    )
    local_kfp.add_argument("pipeline_file", metavar="PIPELINE_FILE")
    local_kfp.add_argument("--target", choices=["kubeflow", "vertex"], default="kubeflow")
    local_kfp.add_argument(
        "--data", metavar="PATH", help="local copy of the data that the file names (--data URI)"
    )
    local_kfp.add_argument(
        "--output-dir",
        default=str(DEFAULT_OUTPUT_DIR / "kfp-local"),
        help="stands in for the pipeline root; step logs under logs/ (default: %(default)s)",
    )
    local_kfp.add_argument("--kfp-python", default="", help=argparse.SUPPRESS)
    local_kfp.set_defaults(func=cmd_local_kfp)


def _add_report_parser(commands: argparse._SubParsersAction) -> None:
    """(Re)write a run's HTML report."""
    report_parser = commands.add_parser(
        "report",
        help="(re)write RUN_DIR/report.html from a finished run",
        description="Writes a self-contained HTML page (data, training curves, evaluation, "
        "verdict) from RUN_DIR/run_summary.json and the run's artifacts.",
    )
    report_parser.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?", default=str(DEFAULT_OUTPUT_DIR)
    )
    report_parser.set_defaults(func=cmd_report)


def _add_predict_parser(commands: argparse._SubParsersAction) -> None:
    """Classify images with the pushed model."""
    predict_parser = commands.add_parser(
        "predict",
        help="classify image files with the newest pushed model, on CPU",
        description="Loads the newest version under --model-dir and prints the top classes "
        "for each PNG or JPEG file.",
    )
    predict_parser.add_argument("images", nargs="*", metavar="IMAGE")
    predict_parser.add_argument(
        "--model-dir",
        default=str(DEFAULT_SERVING_DIR),
        help="folder of numbered versions, or one version (default: %(default)s)",
    )
    predict_parser.add_argument("--top", type=int, default=3, help="classes to show per image")
    predict_parser.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="N",
        help="demo: classify N eval images of --data and print true versus predicted",
    )
    predict_parser.add_argument(
        "--data",
        metavar="PATH_OR_URL",
        help="source for --samples (default: the eval split of the run that pushed the model)",
    )
    predict_parser.add_argument("--json", action="store_true", help="print JSON lines")
    predict_parser.set_defaults(func=cmd_predict)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cifar10-pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status: 0 ok, 1 unexpected error, 2 bad input, 3 data failed "
        "validation, 4 model not blessed, 5 submit --wait lost contact (the job may still run)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for add_parser in (
        _add_run_parser,
        _add_compile_parser,
        _add_submit_parser,
        _add_local_kfp_parser,
        _add_report_parser,
        _add_predict_parser,
    ):
        add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Library deprecation notices (google-api-core on Python 3.10, TF/TFX internals) are
    # not actionable for a user of this CLI; the full logs still go to the log file.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="google")
    args = build_parser().parse_args(argv)
    if args.command not in LIBRARY_OUTPUT_TO_LOG:
        return args.func(args)
    # The process id too: two commands started in the same second must not share a log.
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    log_path = DEFAULT_OUTPUT_DIR / "logs" / f"{args.command}-{stamp}.log"
    with library_log.to_file(log_path.resolve()):
        return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
