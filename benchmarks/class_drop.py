"""How far a class's accuracy on the served version's reference images falls when the pipeline
trains the next version on a clean span and on a faulty one: the measurement MAX_CLASS_DROP
(components/checks/reference_images.py) is set from.

    python -m benchmarks.class_drop --data cifar-10-binary-train.tar.gz \
        [--served 10000 --served 25000] [--span 4000] [--samples 3] [--epochs N]

For each served size: the pipeline trains on the first N images of the (shuffled) archive as
span 1 and pushes a version with its reference images. Then, for each case, a span 2 of
images that version never saw arrives and the nightly command (`run --warm-start`, every
stop accepted) fine-tunes a candidate on it; its Evaluator scores the candidate and the
served model on the served version's reference images. Cases: `--samples` disjoint clean
spans; cat and dog labels exchanged; 25% of labels replaced at random; images rotated 90
degrees. Prints the largest fall of one class (served minus candidate accuracy) and the class,
as a Markdown table. Candidates are never pushed (accuracy gate 1), so each one is judged
against the same served version. A class's fall needs 20 of its reference images (the
served version's eval split: about 2,000 served images). `--epochs N` makes every `run`
train N epochs, not the recipe's: a smoke test's, whose table measures nothing (it says so
above the table).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.bench_docs import measured_on
from benchmarks.label_thresholds import (
    CAT,
    DOG,
    served_spans_arguments,
    training_flags,
    write_archive,
)
from components.checks import reference_images
from components.cifar10_example_gen import sources
from components.contract import LABEL_NAMES, NUM_CLASSES, REFERENCE_CHECK_FILE


def _run(data_dir: str, out: str, *extra: str) -> tuple[int, str]:
    """`run`'s exit status and its last `error:` line, so a failed run says
    why (the log file it names is in a temporary folder that is gone by then)."""
    command = [sys.executable, "-m", "pipeline.cli", "run", "--data", data_dir]
    command += ["--output-dir", out, "--no-cache", *extra]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    return done.returncode, errors[-1] if errors else "it printed no error line"


def _cases(images, labels, rng) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    swapped = labels.copy()
    swapped[labels == CAT], swapped[labels == DOG] = DOG, CAT
    noisy = labels.copy()
    chosen = rng.random(len(labels)) < 0.25
    noisy[chosen] = rng.integers(0, NUM_CLASSES, int(chosen.sum()))
    return {
        "cat and dog exchanged": (images, swapped),
        "25% of labels random": (images, noisy),
        "rotated 90 degrees": (np.rot90(images, 1, axes=(1, 2)).copy(), labels),
    }


def _newest_check(out: str) -> dict:
    found = glob.glob(os.path.join(out, "**", REFERENCE_CHECK_FILE), recursive=True)
    if not found:
        raise SystemExit(f"no {REFERENCE_CHECK_FILE} under {out}: did the Evaluator run?")
    with open(max(found, key=os.path.getmtime)) as handle:
        return json.load(handle)


def _largest_fall(check: dict, served: int) -> tuple[float, int]:
    """(served minus candidate accuracy, class) of the class that fell most."""
    falls = [
        (s - c, label)
        for label, (s, c) in enumerate(zip(check["served"], check["candidate"]))
        if s is not None and c is not None
    ]
    if not falls:  # each class needs MIN_CLASS_IMAGES reference images, from its eval split
        raise SystemExit(
            f"no class has {reference_images.MIN_CLASS_IMAGES} of the {check['images']:,} "
            f"reference images a version served from {served:,} keeps: serve more"
        )
    return max(falls)


def measure(
    data: str,
    served_sizes: list[int],
    span: int,
    samples: int,
    seed: int,
    training: tuple[str, ...] = (),
) -> list:
    arrays = sources.load_arrays(data, eval_fraction=0.1)
    images = np.concatenate([arrays["train"][0], arrays["eval"][0]])
    labels = np.concatenate([arrays["train"][1], arrays["eval"][1]])
    order = np.random.default_rng(seed).permutation(len(labels))
    images, labels = images[order], labels[order]
    rows = []
    for size in served_sizes:
        with tempfile.TemporaryDirectory() as workdir:
            served = os.path.join(workdir, "span-1.tar.gz")
            write_archive(served, images[:size], labels[:size])
            out = os.path.join(workdir, "out")
            first = os.path.join(workdir, "data-0")
            os.makedirs(os.path.join(first, "span-1"))
            os.symlink(served, os.path.join(first, "span-1", "data.tar.gz"))
            status, why = _run(first, out, "--accuracy-gate", "0", *training)
            if status != 0:
                raise SystemExit(f"the served model ({size:,} images) was not pushed; {why}")
            rng = np.random.default_rng(seed + size)
            chunks = [(f"clean {i + 1}", size + i * span, None) for i in range(samples)]
            start = size + samples * span
            for case in ("cat and dog exchanged", "25% of labels random", "rotated 90 degrees"):
                chunks.append((case, start, case))
                start += span
            for number, (name, begin, fault) in enumerate(chunks, 1):
                chunk = slice(begin, begin + span)
                if chunk.stop > len(labels):
                    raise SystemExit(f"not enough unseen images for the spans of {span:,}")
                given_images, given = images[chunk], labels[chunk]
                if fault:
                    given_images, given = _cases(given_images, given, rng)[fault]
                data_dir = os.path.join(workdir, f"data-{number}")
                os.makedirs(os.path.join(data_dir, "span-2"))
                os.symlink(os.path.join(first, "span-1"), os.path.join(data_dir, "span-1"))
                write_archive(os.path.join(data_dir, "span-2", "data.tar.gz"), given_images, given)
                accept = ("--accept-labels", "--accept-drift", "--accept-duplicates")
                status, why = _run(
                    data_dir, out, "--warm-start", "--accuracy-gate", "1", *accept, *training
                )
                if status != 4:  # not blessed: nothing pushed, the next case sees the same
                    raise SystemExit(f"case {name}: the run ended with exit status {status}; {why}")
                check = _newest_check(out)
                drop, label = _largest_fall(check, size)
                rows.append({
                    "served": size, "span": span, "case": name, "images": check["images"],
                    "drop": drop, "class": LABEL_NAMES[label],
                    "blocked": drop > reference_images.MAX_CLASS_DROP,
                })  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        f"margin (largest fall allowed) {reference_images.MAX_CLASS_DROP}",
        "",
        "| served images | span | candidate trained on | reference images | largest class "
        "fall | class | blocked |",
        "|---:|---:|---|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['served']:,} | {r['span']:,} | {r['case']} | {r['images']:,} | "
            f"{r['drop'] * 100:+.1f} points | {r['class']} | {'yes' if r['blocked'] else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args = served_spans_arguments(parser, span=4000).parse_args(argv)
    print(measured_on())
    training = training_flags(args)
    rows = measure(
        args.data, args.served or [10000, 25000], args.span, args.samples, args.seed, training
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
