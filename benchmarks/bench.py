"""`make bench`: the classic recipe and this pipeline, measured side by side on this machine.

(a) the classic Colab recipe (seed_cnn, Adam 1e-3, batch 1,024, fp32) for a fixed
    number of epochs: seconds per epoch (also scaled to the recipe's 50,000-image epoch,
    the unit of the pipeline's time budget) and eval accuracy;
(b) a throughput probe of the default model: training images/s under the Trainer's
    setting and under one change each (precision, batch size, input pipeline versus
    compute only, no input cache, thread counts, oneDNN off, XLA), each in a fresh
    process, interleaved so that the machine's changes of speed hit all alike; and
    the machine's own dense conv and matmul throughput in the Trainer's precision;
(c) the pipeline itself (`cifar10-pipeline run --no-cache`), stage by stage; its
    Trainer's training FLOPs over its fit seconds, against the conv throughput of (b),
    is the efficiency (the probe's few steps give a second, noisier figure); the
    training FLOPs to 84% eval accuracy, from its epochs' validation and the Evaluator;
(d) CPU serving latency and throughput of the model it pushed, and of every recipe's
    exported network with its test-time augmentation (latency does not depend on the
    weights, so an untrained export of each recipe stands in for a trained one);
(e) what the model-aware checks cost on the run's data, with the version it pushed as the
    served model: the gate's label check (a sample scored, judged, the shift statistic),
    its exact-copy hashing of both splits, and the Evaluator's scoring of two models on the
    reference images; what a next night with a served model adds to the pipeline.

Prints one table and writes it, with the raw figures, to <output-dir>/bench.json. A bench
whose pipeline ran and passed also writes its figures into docs/performance.md, in this CPU
kind's section, and the README's timing table (benchmarks/bench_docs.py; --no-docs skips).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import bench_docs
from benchmarks.bench_table import render
from benchmarks.model_checks import model_checks
from components.cifar10_example_gen import sources
from components.cifar10_example_gen.executor import to_example
from components.cifar10_example_gen.sources import load_arrays
from components.contract import (
    EXAMPLE_GEN_NODE,
    EXAMPLE_VALIDATOR_NODE,
    SCHEMA_NODE,
    STATISTICS_NODE,
    VALIDATION_GATE_NODE,
)
from components.trainer import export, flops, model
from components.trainer.hardware import decide_precision, detect
from components.trainer.keras import keras, tf
from pipeline.local.summary import RunSummary
from pipeline.settings import data_source

CLASSIC_FULL_EPOCHS = 50  # the classic recipe's schedule
CLASSIC_EPOCH_IMAGES = 50_000  # the classic recipe trains on the whole training release


def classic_recipe(arrays, epochs: int) -> dict:
    """The Colab TPU recipe on CPU: un-augmented batches of 1,024, Adam 1e-3, fp32."""
    keras.mixed_precision.set_global_policy("float32")
    (x_train, y_train), (x_eval, y_eval) = arrays["train"], arrays["eval"]
    recipe = model.RECIPES["seed_cnn"]
    net = model.build_seed_cnn()
    model.compile_model(net, recipe, recipe.learning_rate, len(x_train) // 1024, epochs)
    seconds = []
    for _ in range(epochs):
        started = time.time()
        net.fit(x_train, y_train, batch_size=1024, epochs=1, verbose=0, shuffle=True)
        seconds.append(time.time() - started)
    accuracy = float(np.mean(net.predict(x_eval, batch_size=1024, verbose=0).argmax(1) == y_eval))
    # Measured on the pipeline's training split (45k images); the classic recipe's epoch is
    # the whole release, so the time per epoch is scaled per image to 50,000.
    per_epoch = float(np.median(seconds)) * CLASSIC_EPOCH_IMAGES / len(x_train)
    return {
        "epochs": epochs,
        "images_per_epoch_measured": len(x_train),
        "seconds_per_epoch": seconds,
        "median_seconds_per_epoch": float(np.median(seconds)),
        "seconds_per_50k_epoch": per_epoch,
        "eval_accuracy": accuracy,
        "projected_full_run_seconds": per_epoch * CLASSIC_FULL_EPOCHS,
    }


# Settings of the throughput probe: name -> (arguments of benchmarks.throughput, environment).
# The first is the Trainer's own setting; every other one changes one thing.
PROBE_SETTINGS: dict[str, tuple[list[str], dict[str, str]]] = {
    "default: precision auto, batch 512, cached input, TF threads, oneDNN": ([], {}),
    "bf16 (mixed_bfloat16)": (["--precision", "mixed_bfloat16"], {}),
    "fp32": (["--precision", "float32"], {}),
    "batch 256": (["--batch", "256"], {}),
    "batch 1024": (["--batch", "1024"], {}),
    "input: one in-memory batch (compute only)": (["--input", "fixed"], {}),
    "input: TFRecords parsed every step (no cache)": (["--input", "tfrecord"], {}),
    "threads: intra-op 1, inter-op 1": (["--intra-op-threads", "1", "--inter-op-threads", "1"], {}),
    "threads: intra-op 2, inter-op 1": (["--intra-op-threads", "2", "--inter-op-threads", "1"], {}),
    "threads: intra-op 4, inter-op 4 (oversubscribed)": (
        ["--intra-op-threads", "4", "--inter-op-threads", "4"],
        {},
    ),
    "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)": ([], {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "XLA (jit_compile=True)": (["--xla"], {}),
}
PROBE_IMAGES = 8192


def _write_probe_inputs(arrays, folder: Path) -> tuple[Path, Path]:
    """The first PROBE_IMAGES training images as an .npz and as ExampleGen-format records."""
    images, labels = arrays["train"][0][:PROBE_IMAGES], arrays["train"][1][:PROBE_IMAGES]
    npz, records = folder / "probe_images.npz", folder / "probe_images.tfrecord.gz"
    np.savez(npz, images=images, labels=labels)
    with tf.io.TFRecordWriter(str(records), options="GZIP") as writer:
        for index, (image, label) in enumerate(zip(images, labels)):
            record = sources.Record(f"probe-{index}", int(label), image.tobytes())
            writer.write(to_example(record).SerializeToString())
    return npz, records


def throughput_probe(arrays, folder: Path, steps: int, rounds: int) -> dict:
    """Training images/s of the default model under each PROBE_SETTINGS entry, each in a
    fresh process, settings interleaved round by round."""
    npz, records = _write_probe_inputs(arrays, folder)
    runs: dict[str, list[dict]] = {name: [] for name in PROBE_SETTINGS}
    for round_number in range(rounds):
        for name, (extra, env) in PROBE_SETTINGS.items():
            print(f"    round {round_number + 1}/{rounds}: {name}", flush=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.throughput",
                    "--arrays",
                    str(npz),
                    "--tfrecords",
                    str(records),
                    "--steps",
                    str(steps),
                    *extra,
                ],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
            )
            if done.returncode != 0:
                raise RuntimeError(f"throughput probe '{name}' failed:\n{done.stderr[-2000:]}")
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    default = next(iter(PROBE_SETTINGS))
    baseline = float(np.median([r["images_per_second"] for r in runs[default]]))
    settings = {}
    for name, measured in runs.items():
        rate = float(np.median([r["images_per_second"] for r in measured]))
        settings[name] = {
            "images_per_second": rate,
            "relative_to_default": rate / baseline,
            "first_step_seconds": float(np.median([r["first_step_seconds"] for r in measured])),
            "runs": measured,
        }
    return {"steps": steps, "rounds": rounds, "settings": settings}


def machine_peak(rounds: int) -> dict:
    """The best of `rounds` fresh-process measurements of conv and matmul GFLOP/s, in the
    precision `auto` picks here, and of single-threaded Python; the default model's
    training FLOPs per image."""
    runs = []
    for _ in range(rounds):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.peak"], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    hardware = detect("cpu")
    forward = flops.forward_flops_per_image(model.build(model.RECIPES["airbench"]))
    return {
        "precision": runs[0]["precision"],
        "hardware": hardware.to_json(),
        "precision_reason": decide_precision("auto", hardware).reason,
        "conv3x3_gflops": max(r["conv3x3_gflops"] for r in runs),
        "matmul_gflops": max(r["matmul_gflops"] for r in runs),
        "python_seconds": min(r["python_seconds"] for r in runs),
        "training_flops_per_image": flops.training_flops(forward, 1),
        "runs": runs,
    }


def _serving_latency(model_dir: Path) -> str:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.serving_latency", "--model-dir", str(model_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def recipe_serving(folder: Path, images: np.ndarray) -> dict[str, str]:
    """Serving latency of each recipe's exported network, test-time augmentation included."""
    latencies = {}
    for name, recipe in model.RECIPES.items():
        network = model.build(recipe, model.stem_filters(recipe, images[:5000]))
        export.export_serving_model(
            network, str(folder / name / "1"), recipe.test_time_augmentation
        )
        latencies[name] = (
            f"{recipe.test_time_augmentation} test-time views, "
            f"{flops.forward_flops_per_image(network) / 1e6:.0f} MFLOP per view\n"
            + _serving_latency(folder / name)
        )
    return latencies


def pipeline_run(source: str, output_dir: Path, extra: list[str]) -> dict:
    started = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "run",
            "--data",
            source,
            "--output-dir",
            str(output_dir),
            "--no-cache",
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    wall = time.time() - started
    summary = RunSummary.load(output_dir)
    return {
        "summary": summary.to_json(),
        "wall_seconds": wall,
        "exit_status": done.returncode,
        "time_to_80_seconds": time_to_accuracy(summary, 0.80),
        "training_flops_to_84": training_flops_to_accuracy(summary, 0.84),
    }


def training_flops_to_accuracy(summary: RunSummary, target: float) -> float | None:
    """Training FLOPs up to the end of the first epoch that showed `target`: its validation
    accuracy (without test-time augmentation; before the last epoch, on a fifth of the eval
    split) or, for the last epoch, the Evaluator's accuracy of the exported model, the
    gate's figure. Every epoch is the same number of whole batches, so epoch i of n cost
    i/n of the run's training FLOPs. None if the run never showed `target`."""
    training, history = summary.training, summary.history
    if training is None or not history:
        return None
    final = summary.evaluation.eval_accuracy if summary.evaluation else None
    for index, epoch in enumerate(history, start=1):
        last = index == len(history) and final is not None and final >= target
        if last or epoch.get("val_accuracy", 0) >= target:
            return training.training_flops * index / len(history)
    return None


def time_to_accuracy(summary: RunSummary, target: float) -> float | None:
    """Seconds from the start of the pipeline run until the end of the first epoch whose
    eval accuracy (without test-time augmentation; before the last epoch, on the fifth of
    the eval split that epoch's validation scored) reached `target`: the stages before the
    Trainer, the Trainer's loading and model building, then the epochs."""
    before_trainer = sum(
        v
        for k, v in summary.stage_seconds.items()
        if k
        in (
            EXAMPLE_GEN_NODE,
            SCHEMA_NODE,
            STATISTICS_NODE,
            EXAMPLE_VALIDATOR_NODE,
            VALIDATION_GATE_NODE,
        )
    )
    training = summary.training
    if training is None:
        return None
    trainer_startup = training.trainer_seconds - training.fit_seconds - training.export_seconds
    elapsed = 0.0
    for epoch in summary.history:
        elapsed += epoch["seconds"]
        if epoch.get("val_accuracy", 0) >= target:
            return before_trainer + max(0.0, trainer_startup) + elapsed
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", help="CIFAR-10 source (default as for `run`)")
    parser.add_argument("--classic-epochs", type=int, default=3)
    parser.add_argument("--probe-steps", type=int, default=12)
    parser.add_argument("--probe-rounds", type=int, default=2)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--skip-pipeline", action="store_true")
    parser.add_argument(
        "--no-docs",
        action="store_true",
        help="do not write this machine's figures into docs/performance.md and README.md",
    )
    args = parser.parse_args()

    source = data_source.resolve(args.data)
    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="cifar10-bench-"))
    output_dir.mkdir(parents=True, exist_ok=True)
    arrays = load_arrays(source)
    results: dict = {"source": source, "measured": bench_docs.measured_facts()}
    print(f"(a) classic recipe, {args.classic_epochs} epochs ...", flush=True)
    results["classic"] = classic_recipe(arrays, args.classic_epochs)
    print("(b) throughput probe ...", flush=True)
    results["probe"] = throughput_probe(arrays, output_dir, args.probe_steps, args.probe_rounds)
    results["peak"] = machine_peak(args.probe_rounds)
    if not args.skip_pipeline:
        print("(c) pipeline run --no-cache ...", flush=True)
        results["pipeline"] = pipeline_run(source, output_dir / "run", [])
        pushed = RunSummary.from_json(results["pipeline"]["summary"]).push
        if pushed is not None and pushed.pushed:
            print("(d) serving latency of the pushed model ...", flush=True)
            results["serving"] = _serving_latency(output_dir / "run" / "serving" / "cifar10")
            print("(e) the model-aware checks, with the pushed model as the served one ...")
            summary = RunSummary.from_json(results["pipeline"]["summary"])
            results["model_checks"] = model_checks(
                output_dir / "run" / "serving" / "cifar10", summary, output_dir / "checks"
            )
    print("(d) serving latency of each recipe's export ...", flush=True)
    results["recipe_serving"] = recipe_serving(output_dir / "recipes", arrays["train"][0])
    (output_dir / "bench.json").write_text(json.dumps(results, indent=1, default=str))
    print(render(results))
    print(f"\nraw figures: {output_dir / 'bench.json'}")
    _write_docs(results, args.no_docs)


def _write_docs(results: dict, skip: bool) -> None:
    """This machine's section of docs/performance.md and the README table, after a bench
    whose pipeline ran and exited 0; any other bench leaves the docs as they are."""
    if skip:
        return
    if results.get("pipeline", {}).get("exit_status") != 0:
        print("docs: not written (the pipeline did not run, or did not exit 0)")
        return
    kind = bench_docs.write_docs(results)
    print(f"docs: wrote the {kind} section of {bench_docs.PERFORMANCE_PAGE} and README.md's table")


if __name__ == "__main__":
    main()
