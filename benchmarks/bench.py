"""`make bench`: the classic recipe and this pipeline, measured side by side on this machine.

(a) the classic Colab recipe (seed_cnn, Adam 1e-3, batch 1,024, fp32) for a fixed
    number of epochs: seconds per epoch and eval accuracy;
(b) input pipeline and precision probes for the default model: training steps/s on
    the real tf.data pipeline versus in-memory tensors, and bf16 versus fp32,
    interleaved so that the machine's speed changes hit both alike;
(c) the pipeline itself (`cifar10-pipeline run --no-cache`), stage by stage;
(d) CPU serving latency and throughput of the model it pushed.

Prints one table and writes it, with the raw figures, to <output-dir>/bench.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from components.cifar10_example_gen.sources import load_arrays
from components.trainer import data, model
from components.trainer.keras import keras, tf
from pipeline import data_source

CLASSIC_FULL_EPOCHS = 50  # the classic recipe's schedule


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
    return {"epochs": epochs, "seconds_per_epoch": seconds,
            "median_seconds_per_epoch": float(np.median(seconds)),
            "eval_accuracy": accuracy,
            "projected_full_run_seconds": float(np.median(seconds)) * CLASSIC_FULL_EPOCHS}


def _steps_per_second(net, dataset, steps: int) -> float:
    iterator = iter(dataset.repeat())
    net.train_on_batch(*next(iterator))  # trace once
    started = time.time()
    for _ in range(steps):
        net.train_on_batch(*next(iterator))
    return steps / (time.time() - started)


def input_and_precision_probe(arrays, steps: int, rounds: int) -> dict:
    """Steps/s of the default model: real tf.data pipeline vs in-memory tensors, bf16 vs fp32."""
    x_train, y_train = arrays["train"]
    recipe = model.RECIPES["airbench"]
    batch = recipe.per_replica_batch_size
    images, labels = tf.constant(x_train), tf.constant(y_train)
    real = data.training_dataset(images, labels, batch)
    fixed = tf.data.Dataset.from_tensors((images[:batch], labels[:batch]))
    results: dict[str, list[float]] = {"bf16_pipeline": [], "bf16_in_memory": [],
                                       "fp32_pipeline": []}
    nets = {}
    for precision in ("mixed_bfloat16", "float32"):
        keras.mixed_precision.set_global_policy(precision)
        net = model.build("airbench", x_train[:5000])
        model.compile_model(net, recipe, recipe.learning_rate, 100, 10)
        nets[precision] = net
    for _ in range(rounds):
        results["bf16_pipeline"].append(_steps_per_second(nets["mixed_bfloat16"], real, steps))
        results["bf16_in_memory"].append(_steps_per_second(nets["mixed_bfloat16"], fixed, steps))
        results["fp32_pipeline"].append(_steps_per_second(nets["float32"], real, steps))
    median = {k: float(np.median(v)) for k, v in results.items()}
    return {"batch": batch, "steps_per_round": steps, "rounds": results, "median": median,
            "pipeline_vs_in_memory": median["bf16_pipeline"] / median["bf16_in_memory"],
            "bf16_speedup": median["bf16_pipeline"] / median["fp32_pipeline"],
            "images_per_second_bf16": median["bf16_pipeline"] * batch}


def pipeline_run(source: str, output_dir: Path, extra: list[str]) -> dict:
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--data", source,
                           "--output-dir", str(output_dir), "--no-cache", *extra],
                          capture_output=True, text=True)
    wall = time.time() - started
    summary = json.loads((output_dir / "run_summary.json").read_text())
    summary["wall_seconds"] = wall
    summary["exit_status"] = done.returncode
    return summary


def time_to_accuracy(summary: dict, target: float) -> float | None:
    """Wall seconds from the start of the run until the first epoch whose eval accuracy
    (without test-time flip) reached `target`."""
    stages = summary["stage_seconds"]
    before_trainer = sum(v for k, v in stages.items()
                         if k in ("Cifar10ExampleGen", "ImportSchemaGen", "StatisticsGen",
                                  "ExampleValidator", "DataValidationGate"))
    trainer_startup = (summary.get("trainer_seconds") or 0) - (summary.get("fit_seconds") or 0)
    elapsed = 0.0
    for epoch in summary.get("history", []):
        elapsed += epoch["seconds"]
        if epoch.get("val_accuracy", 0) >= target:
            return before_trainer + max(0.0, trainer_startup) + elapsed
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="CIFAR-10 source (default as for `run`)")
    parser.add_argument("--classic-epochs", type=int, default=3)
    parser.add_argument("--probe-steps", type=int, default=20)
    parser.add_argument("--probe-rounds", type=int, default=3)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--skip-pipeline", action="store_true")
    args = parser.parse_args()

    source = data_source.resolve(args.data)
    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="cifar10-bench-"))
    output_dir.mkdir(parents=True, exist_ok=True)
    arrays = load_arrays(source)
    results: dict = {"source": source}
    print(f"(a) classic recipe, {args.classic_epochs} epochs ...", flush=True)
    results["classic"] = classic_recipe(arrays, args.classic_epochs)
    print("(b) input pipeline and precision probe ...", flush=True)
    results["probe"] = input_and_precision_probe(arrays, args.probe_steps, args.probe_rounds)
    if not args.skip_pipeline:
        print("(c) pipeline run --no-cache ...", flush=True)
        results["pipeline"] = pipeline_run(source, output_dir / "run", [])
        results["pipeline"]["time_to_80_seconds"] = time_to_accuracy(results["pipeline"], 0.80)
        if results["pipeline"].get("pushed"):
            print("(d) serving latency of the pushed model ...", flush=True)
            results["serving"] = subprocess.run(
                [sys.executable, "-m", "benchmarks.serving_latency", "--model-dir",
                 str(output_dir / "run" / "serving" / "cifar10")],
                capture_output=True, text=True).stdout.strip()
    (output_dir / "bench.json").write_text(json.dumps(results, indent=1, default=str))
    print(render(results))
    print(f"\nraw figures: {output_dir / 'bench.json'}")


def render(results: dict) -> str:
    classic, probe = results["classic"], results["probe"]
    rows = [
        ("classic: seconds per epoch (median, 45k images)", f"{classic['median_seconds_per_epoch']:.1f}"),
        (f"classic: eval accuracy after {classic['epochs']} epochs", f"{classic['eval_accuracy']:.4f}"),
        ("classic: projected 50-epoch run (s)", f"{classic['projected_full_run_seconds']:.0f}"),
        ("default model: images/s, bf16, real input pipeline", f"{probe['images_per_second_bf16']:.0f}"),
        ("input pipeline steps/s vs in-memory tensors", f"{probe['pipeline_vs_in_memory']:.2f}"),
        ("bf16 speed-up over fp32", f"{probe['bf16_speedup']:.2f}x"),
    ]
    run = results.get("pipeline")
    if run:
        for stage, seconds in run["stage_seconds"].items():
            rows.append((f"pipeline stage {stage} (s)", f"{seconds:.1f}"))
        ttr = run.get("time_to_80_seconds")
        rows += [
            ("pipeline: Trainer fit seconds", f"{run.get('fit_seconds')}"),
            ("pipeline: eval accuracy (TFMA, with test-time flip)", f"{run.get('eval_accuracy')}"),
            ("pipeline: blessed / exit status", f"{run.get('blessed')} / {run['exit_status']}"),
            ("pipeline: total wall seconds", f"{run['wall_seconds']:.0f}"),
            ("pipeline: time to 80% eval accuracy (s)", "not reached" if ttr is None else f"{ttr:.0f}"),
        ]
        if ttr is not None:
            rows.append(("time-to-80% ratio, pipeline / classic 50-epoch run "
                         "(classic never reaches 80%: a lower bound)",
                         f"{ttr / classic['projected_full_run_seconds']:.3f}"))
    width = max(len(r[0]) for r in rows)
    table = "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
    return table + (f"\n\nserving (CPU):\n{results['serving']}" if results.get("serving") else "")


if __name__ == "__main__":
    main()
