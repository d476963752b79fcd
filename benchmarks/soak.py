"""A year of nights on one serving folder, compressed: `python -m benchmarks.soak ROOT` runs
NIGHTS simulated nights against ROOT (a local folder, gs://... or s3://...) through the
product's own code for each part a compiled night touches: ServedState's facts, the Pusher's
commit (publish_version, --keep-versions 3: a small fixture model, no training), the exit
handler's report (kept in `.nights/` and delivered to $CIFAR10_NOTIFY_URL when set), a
`rollback` every 20th night, and every 10th night a run that dies before its handler and
leaves its facts behind. The clock is simulated (one day a night; the stores' object times
stay real, so a dead night's facts count as stale from the first night a week past the
start). It prints, as JSON, each night's outcome and, after night 5, every 10th and the last, the
files and bytes under ROOT: what a serving folder keeps over time (docs/operations.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time

NIGHTS = 60
KEEP_VERSIONS = 3
DAY = 86400.0


@contextlib.contextmanager
def simulated_days(start: float):
    """time.time() runs from `start`, one DAY further each call of `next_night`."""
    real, offset = time.time, [0.0]
    began = real()
    time.time = lambda: start + offset[0] + (real() - began)
    try:
        yield lambda: offset.__setitem__(0, offset[0] + DAY)
    finally:
        time.time = real


def fixture_model(folder: str) -> str:
    """A SavedModel's layout with small contents: what a commit moves, not what it serves."""
    os.makedirs(os.path.join(folder, "variables"))
    for name, size in (
        ("variables/variables.index", 200),
        ("variables/variables.data-00000-of-00001", 20_000),
    ):
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(os.urandom(size))
    with open(os.path.join(folder, "saved_model.pb"), "wb") as handle:
        handle.write(b"graph" * 1000)
    return folder


def footprint(root: str) -> tuple[int, int]:
    """(files, bytes) under `root`."""
    from components.storage import object_store, paths

    if not paths.is_remote(root):
        files = paths.walk(root)
        return len(files), sum(os.path.getsize(f) for f in files)
    gfile, files, size = object_store.gfile(root), 0, 0
    for path in paths.walk(root):
        try:
            size += gfile.stat(path).length
            files += 1
        except Exception:
            continue
    return files, size


def night(serving: str, number: int, scratch: str) -> str | None:
    """One night; returns its outcome as reported, or None for a run that died."""
    from components.atomic_pusher.executor import publish_version
    from components.cifar10_example_gen.spans import record_json
    from components.contract import SERVED_SPANS_FILE
    from components.night_report.handler import report_night
    from components.storage import night_facts, served_versions

    key = f"soak-night-{number}"
    facts = night_facts.folder(serving, key)
    before = served_versions.newest_complete_version(serving)
    night_facts.write(facts, night_facts.SERVED, {"served_before": before})
    night_facts.write(facts, night_facts.EXAMPLES, {"spans": [number], "no_new_span": False})
    if number % 10 == 3:
        return None  # killed before its exit handler: its facts stay behind
    model = fixture_model(os.path.join(scratch, f"model-{number}"))  # each night's own Trainer
    spans_record = os.path.join(scratch, f"training_spans-{number}.json")
    with open(spans_record, "w") as handle:
        handle.write(record_json({number: f"print-{number}"}))
    publish_version(model, serving, (spans_record, SERVED_SPANS_FILE), keep_versions=KEEP_VERSIONS)
    night_facts.write(facts, night_facts.EVALUATION, {"blessed": True, "eval_accuracy": 0.9})
    with contextlib.redirect_stdout(sys.stderr):
        reported = report_night('{"state": "SUCCEEDED"}', serving, key, "kubeflow", "")
    if number % 20 == 10:
        from components.atomic_pusher.rollback import roll_back

        roll_back(serving, why=f"soak night {number}")
    delivered = reported["notification"].startswith("delivered to ")
    return reported["outcome"] + (" delivered" if delivered else "")


def soak(root: str, nights: int = NIGHTS) -> list[dict]:
    from components.storage import paths

    serving = paths.join(root, "serving", "cifar10")
    measured = {5, nights} | set(range(10, nights, 10))  # listing a store costs a call a file
    rows = []
    with tempfile.TemporaryDirectory() as scratch, simulated_days(time.time()) as next_night:
        for number in range(1, nights + 1):
            said = night(serving, number, scratch)
            row = {"night": number, "outcome": said}
            if number in measured:
                row["files"], row["bytes"] = footprint(root)
            rows.append(row)
            next_night()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("root", help="a local folder, gs://bucket/path or s3://bucket/path")
    parser.add_argument("--nights", type=int, default=NIGHTS)
    args = parser.parse_args(argv)
    if args.nights < 1:
        parser.error(f"--nights {args.nights}: at least 1")
    print(json.dumps(soak(args.root, args.nights)))
    return 0


if __name__ == "__main__":
    from components.storage import object_store

    status = main()
    sys.stdout.flush()
    if object_store.active():  # tensorflow-io (s3://) aborts teardown (tensorflow/io#2039)
        os._exit(status)
    sys.exit(status)
