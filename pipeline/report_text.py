"""The one-screen summary printed at the end of `cifar10-pipeline run`."""

from __future__ import annotations

from typing import Any

from components.contract import LABEL_NAMES


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def render(facts: dict[str, Any]) -> str:
    counts = facts.get("record_counts", {})
    lines = ["", "== CIFAR-10 pipeline run ==",
             f"records        train {counts.get('train', 'n/a')}, eval {counts.get('eval', 'n/a')}"]
    states = facts.get("stage_states", {})
    for stage, seconds in facts.get("stage_seconds", {}).items():
        cached = " (cached)" if states.get(stage) == "cached" else ""
        lines.append(f"  {stage:<32} {seconds:7.1f}s{cached}")
    if facts.get("strategy"):
        lines.append(
            f"training       {facts.get('model')} on {facts['strategy']} strategy, "
            f"{facts.get('replicas')} replica(s), global batch {facts.get('global_batch_size')} "
            f"({facts.get('per_replica_batch_size')} per replica), {facts.get('epochs')} epochs, "
            f"{facts.get('precision')}, fit {facts.get('fit_seconds')}s")
    if "eval_accuracy" in facts:
        lines.append(f"eval accuracy  {_pct(facts['eval_accuracy'])}"
                     f" (last blessed model: {_pct(facts.get('baseline_accuracy'))})")
        per_class = facts.get("per_class_accuracy", {})
        if per_class:
            lines.append("  per class    " + ", ".join(
                f"{LABEL_NAMES[int(k)]} {_pct(v)}" for k, v in sorted(per_class.items(),
                                                                       key=lambda kv: int(kv[0]))))
    if "blessed" in facts:
        verdict = "BLESSED" if facts["blessed"] else "NOT BLESSED"
        lines.append(f"gate           {verdict}")
        for failure in facts.get("gate_failures", []):
            lines.append(f"  - {failure}")
    if states.get("Trainer") == "cached":
        lines.append("cache          inputs and config unchanged: the Trainer reused its model")
    if facts.get("pushed"):
        note = "" if facts.get("pushed_new_version") else " (already served; no new version)"
        lines.append(f"pushed         {facts.get('pushed_version_dir')}{note}")
    elif "pushed" in facts:
        lines.append("pushed         nothing (the previously served version stays)")
    lines.append(f"total          {facts.get('total_seconds', 'n/a')}s")
    return "\n".join(lines)
