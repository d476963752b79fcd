"""The table `make bench` prints, from its results (the structure of bench.json)."""

from __future__ import annotations

import statistics

import numpy as np

from components.contract import TRAINER_NODE
from pipeline.local.summary import RunSummary


def _trainer_breakdown(training) -> str:
    total, load, fit, export = (
        training.trainer_seconds,
        training.load_seconds,
        training.fit_seconds,
        training.export_seconds,
    )
    return (
        f"{total:.1f} = {load:.1f} + {total - load - fit - export:.1f} + {fit:.1f} + {export:.1f}"
    )


def _epoch_seconds(summary: RunSummary) -> str:
    seconds = [e["seconds"] for e in summary.history]
    if len(seconds) < 2:
        return "n/a"
    return f"{seconds[0]:.1f}; {float(np.median(seconds[1:])):.1f}"


def render(results: dict) -> str:
    classic, probe = results["classic"], results["probe"]
    rows = [
        (
            f"classic: seconds per epoch (median, {classic['images_per_epoch_measured']} images)",
            f"{classic['median_seconds_per_epoch']:.1f}",
        ),
        (
            "classic: seconds per epoch of 50,000 images (scaled per image)",
            f"{classic['seconds_per_50k_epoch']:.1f}",
        ),
        (
            f"classic: eval accuracy after {classic['epochs']} epochs",
            f"{classic['eval_accuracy']:.4f}",
        ),
        ("classic: projected 50-epoch run (s)", f"{classic['projected_full_run_seconds']:.0f}"),
    ]
    peak, run = results.get("peak"), results.get("pipeline")
    summary = RunSummary.from_json(run["summary"], "bench.json pipeline summary") if run else None
    if peak:
        default_rate = next(iter(probe["settings"].values()))["images_per_second"]
        effective = default_rate * peak["training_flops_per_image"] / 1e9
        hardware = peak["hardware"]
        rows += [
            (
                "machine",
                f"{hardware['cpu_model']} ({', '.join(hardware['cpu_flags'])}); "
                f"precision {peak['precision']}: {peak['precision_reason']}",
            ),
            (
                f"machine: TF conv 3x3 / matmul 2048, {peak['precision']} (GFLOP/s)",
                f"{peak['conv3x3_gflops']:.0f} / {peak['matmul_gflops']:.0f}",
            ),
            (
                "machine: single-threaded Python, sum(range(10**8)) (s)",
                f"{peak['python_seconds']:.2f}" if "python_seconds" in peak else "not measured",
            ),
            (
                "probe: default model's training GFLOP/s (3 x forward FLOPs x images/s)",
                f"{effective:.0f} = {peak['training_flops_per_image'] / 1e6:.0f} MFLOP x "
                f"{default_rate:.0f} img/s",
            ),
            (
                "probe: efficiency, probe / conv throughput",
                f"{effective / peak['conv3x3_gflops']:.2f}",
            ),
        ]
        training = summary and summary.training
        if training and training.fit_seconds > 0:
            fitted = training.training_flops / training.fit_seconds / 1e9
            rows += [
                (
                    "pipeline fit: effective training GFLOP/s (training FLOPs / fit seconds, "
                    "validation passes included)",
                    f"{fitted:.0f} = {training.training_flops:.3g} / {training.fit_seconds:.1f} s",
                ),
                (
                    "efficiency: pipeline fit / conv throughput (goal >= 0.70)",
                    f"{fitted / peak['conv3x3_gflops']:.2f}",
                ),
            ]
    for name, measured in probe["settings"].items():
        rows.append(
            (
                f"probe, {name}: training images/s (x default; first step s)",
                f"{measured['images_per_second']:.0f} ({measured['relative_to_default']:.2f}x; "
                f"{measured['first_step_seconds']:.1f})",
            )
        )
    if run:
        training, evaluation = summary.training, summary.evaluation
        for stage, seconds in summary.stage_seconds.items():
            rows.append((f"pipeline stage {stage} (s)", f"{seconds:.1f}"))
        ttr = run["time_to_80_seconds"]
        fit = training.fit_seconds if training else 0.0
        rows += [
            (
                "pipeline: Trainer = load + build + fit + export (s)",
                _trainer_breakdown(training) if training else "did not train",
            ),
            ("pipeline: seconds per epoch (first; median of the rest)", _epoch_seconds(summary)),
            (
                "pipeline: seconds inside fit but outside the epochs (pauses)",
                f"{fit - sum(e['seconds'] for e in summary.history):.1f}",
            ),
            (
                "pipeline: overhead, everything but the Trainer's fit (s)",
                f"{run['wall_seconds'] - fit:.0f}",
            ),
            (
                "pipeline: eval accuracy (TFMA, exported model with test-time augmentation)",
                f"{evaluation.eval_accuracy if evaluation else None}",
            ),
            ("pipeline: blessed / exit status", f"{summary.blessed} / {run['exit_status']}"),
            ("pipeline: total wall seconds", f"{run['wall_seconds']:.0f}"),
            ("pipeline: training FLOPs", f"{training.training_flops:.2e}" if training else "0"),
            (
                "pipeline wall time in classic-recipe epochs of 50,000 images (goal <= 5)",
                f"{run['wall_seconds'] / classic['seconds_per_50k_epoch']:.1f}",
            ),
            (
                "pipeline: time to 80% eval accuracy (s)",
                "not reached" if ttr is None else f"{ttr:.0f}",
            ),
            ("pipeline: training FLOPs to 84% eval accuracy", _flops(run)),
        ]
        if ttr is not None:
            rows.append(
                (
                    "time-to-80% ratio, pipeline / classic 50-epoch run "
                    "(classic never reaches 80%: a lower bound)",
                    f"{ttr / classic['projected_full_run_seconds']:.3f}",
                )
            )
    if results.get("model_checks"):
        rows.append(("model-aware checks, a next night (s)", model_checks_text(results)))
    width = max(len(r[0]) for r in rows)
    table = "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
    if results.get("serving"):
        table += f"\n\nserving (CPU), the pushed model:\n{results['serving']}"
    for name, text in results.get("recipe_serving", {}).items():
        table += f"\n\nserving (CPU), recipe {name}:\n{text}"
    return table


def _flops(run: dict) -> str:
    flops = run.get("training_flops_to_84")  # absent from a bench.json written before it
    return "not reached" if flops is None else f"{flops:.2e}"


def model_checks_text(results: dict) -> str:
    """(e): what the gate's label and copy checks and the Evaluator's reference check cost,
    with the run's own version as the served model."""
    checks = results["model_checks"]
    growth = checks.get("peak_growth_mb")  # absent from a bench.json written before it
    return (
        f"{checks['total_seconds']:.1f} = labels {checks['label_seconds']:.1f} "
        f"({checks['scored']:,} scored) + copies {checks['copy_seconds']:.1f} "
        f"({checks['images']:,} images, exact and near) + reference classes "
        f"{checks['reference_seconds']:.1f}"
        + ("" if growth is None else f"; peak memory +{growth:,.0f} MB")
    )


def percent(value: float | None) -> str:
    return "none" if value is None else f"{100 * value:.2f}%"


def _python(peak: dict, outside: float) -> str:
    """The host's interpreter speed, which most of the time outside the fit follows, and
    that time in its units, so the figure compares between hosts of one kind."""
    seconds = peak.get("python_seconds")
    if not seconds:
        return "not measured"
    return f"{seconds:.2f} s (everything but the fit = {outside / seconds:.0f} times that)"


def section_rows(results: dict) -> list[tuple[str, str]]:
    """The figures a reader compares between kinds, from bench.json's structure."""
    run, peak, classic = results["pipeline"], results["peak"], results["classic"]
    s = run["summary"]
    fit, wall = s["fit_seconds"], run["wall_seconds"]
    outside = {name: sec for name, sec in s["stage_seconds"].items() if name != TRAINER_NODE}
    outside["Trainer outside the fit"] = s["trainer_seconds"] - fit
    epochs = [e["seconds"] for e in s["history"]]
    build = s["trainer_seconds"] - s["load_seconds"] - fit - s["export_seconds"]
    efficiency = s["training_flops"] / fit / 1e9 if fit else 0.0
    probe = next(iter(results["probe"]["settings"].values()))["images_per_second"]
    ttr, to_84 = run.get("time_to_80_seconds"), run.get("training_flops_to_84")
    rows = [
        ("whole pipeline, ingest to push", f"{wall:.0f} s wall ({s['total_seconds']} s its own)"),
        (
            "eval accuracy",
            f"{percent(s.get('eval_accuracy'))}, {'blessed' if s['blessed'] else 'not blessed'}",
        ),
        ("precision", f"{s['precision']} ({s['precision_reason']})"),
        (
            "Trainer = load + build + fit + export",
            f"{s['trainer_seconds']:.1f} = {s['load_seconds']:.1f} + {build:.1f} + "
            f"{fit:.1f} + {s['export_seconds']:.1f} s",
        ),
        (
            "epochs (first; median of the rest)",
            f"{epochs[0]:.1f}; {statistics.median(epochs[1:]):.1f} s" if len(epochs) > 1 else "n/a",
        ),
        (
            "everything but the fit",
            f"{wall - fit:.0f} s: "
            + ", ".join(f"{name} {seconds:.1f}" for name, seconds in outside.items()),
        ),
        ("single-threaded Python: sum(range(10**8))", _python(peak, wall - fit)),
        ("training FLOPs", f"{s['training_flops']:.3g}"),
        (
            "efficiency: fit GFLOP/s / TF's 3x3 conv",
            f"{efficiency / peak['conv3x3_gflops']:.2f} ({efficiency:.0f} against "
            f"{peak['conv3x3_gflops']:.0f}; matmul {peak['matmul_gflops']:.0f})",
        ),
        (
            "throughput probe, images/s (x default)",
            f"default {probe:.0f}; "
            + ", ".join(
                f"{name} {m['images_per_second']:.0f} ({m['images_per_second'] / probe:.2f})"
                for name, m in list(results["probe"]["settings"].items())[1:]
            ),
        ),
        (
            "classic recipe, s per epoch of 50,000 images",
            f"{classic['seconds_per_50k_epoch']:.1f} (pipeline = "
            f"{wall / classic['seconds_per_50k_epoch']:.1f} classic epochs)",
        ),
        ("time to 80% eval accuracy", "not reached" if ttr is None else f"{ttr:.0f} s"),
        (
            "training FLOPs to 84% eval accuracy",
            "not reached" if to_84 is None else f"{to_84:.3g}",
        ),
    ]
    if results.get("model_checks"):
        rows.append(("model-aware checks, a next night (s)", model_checks_text(results)))
    serving = [line for line in results.get("serving", "").splitlines()[1:] if line.strip()]
    if serving:
        rows.append(("serving, the pushed model", "; ".join(" ".join(x.split()) for x in serving)))
    return rows
