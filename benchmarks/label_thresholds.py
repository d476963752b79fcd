"""What the served model's label checks read on clean spans and on labelling faults: the
measurement EXCHANGE_MARGIN and NOISE_MARGIN (components/checks/label_agreement.py) are set from.

    python -m benchmarks.label_thresholds --data cifar-10-binary-train.tar.gz \
        [--served 10000 --served 25000] [--span 3000] [--samples 3] [--warm-start 4000] \
        [--epochs N]

For each served size: the pipeline (`cifar10-pipeline run`, default recipe, no gate) trains
on the first N images of the archive and pushes a version with its label reference; then
spans drawn from the images it never saw are scored with that version (as DataValidationGate
does) and judged: `--samples` disjoint clean spans, and one span with cat and dog labels
exchanged, with 10% and 25% of labels replaced at random, its images rotated, upside down,
in BGR order, grey, without red, noised, or mirrored. Prints a Markdown table: the largest
exchange excess over all class pairs (the smaller of its two directions, minus the
reference), the noise estimate's excess over the reference's, the representation shift (the
largest per-class Kolmogorov-Smirnov statistic of the class probabilities against the eval
split's) and the embeddings' maximum mean discrepancy against the eval split's sample
(components/checks/drift.py); a row stops the run when one is beyond its margin. `--epochs N` makes
every `run` train N epochs, not the recipe's: a smoke test's, whose table measures nothing
(it says so above the table).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

from benchmarks.bench_docs import measured_on
from components.checks import drift, label_agreement, model_scoring
from components.cifar10_example_gen import sources
from components.contract import LABEL_NAMES, NUM_CLASSES
from components.storage.served_versions import newest_complete_version

CAT, DOG = LABEL_NAMES.index("cat"), LABEL_NAMES.index("dog")


def write_archive(path: str, images: np.ndarray, labels: np.ndarray) -> str:
    """The official binary layout, 10,000 records a batch file."""
    members = {"cifar-10-batches-bin/batches.meta.txt": "\n".join(LABEL_NAMES).encode()}
    planar = images.transpose(0, 3, 1, 2).reshape(len(labels), -1)
    records = np.concatenate([labels.astype(np.uint8)[:, None], planar], axis=1)
    for number, start in enumerate(range(0, len(labels), 10000), 1):
        members[f"cifar-10-batches-bin/data_batch_{number}.bin"] = records[
            start : start + 10000
        ].tobytes()
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def _served_version(
    images, labels, workdir: str, warm_start: int = 0, training: tuple[str, ...] = ()
) -> str:
    """Trains and pushes with the pipeline (`training`: more `run` flags); returns the pushed
    version's folder. With `warm_start` N, the last N images are a second span the nightly
    command (`run --warm-start`) fine-tunes the first version on, and that version is
    returned."""
    out = os.path.join(workdir, "run")
    command = [sys.executable, "-m", "pipeline.cli", "run", "--output-dir", out, "--no-cache"]
    command += ["--accuracy-gate", "0", *training]
    if not warm_start:
        archive = write_archive(os.path.join(workdir, "served.tar.gz"), images, labels)
        subprocess.run([*command, "--data", archive], check=True, stdout=subprocess.DEVNULL)
    else:
        data = os.path.join(workdir, "spans")
        first = slice(0, len(labels) - warm_start)
        second = slice(len(labels) - warm_start, len(labels))
        for number, part in ((1, first), (2, second)):
            os.makedirs(os.path.join(data, f"span-{number}"))
            path = os.path.join(data, f"span-{number}", "data.tar.gz")
            write_archive(path, images[part], labels[part])
            if number == 1:
                subprocess.run([*command, "--data", data], check=True, stdout=subprocess.DEVNULL)
        nightly = ["--warm-start", "--max-regression", "1", "--max-class-drop", "1"]
        subprocess.run([*command, "--data", data, *nightly], check=True, stdout=subprocess.DEVNULL)
    serving = os.path.join(out, "serving", "cifar10")
    return os.path.join(serving, newest_complete_version(serving))


def _exchange_excess(judgement: label_agreement.Judgement, served) -> float:
    observed = label_agreement.rates(judgement.counts)
    expected = label_agreement.rates(served.counts)
    excess = observed - expected
    both = np.minimum(excess, excess.T)
    np.fill_diagonal(both, -1.0)
    return float(both.max())


def _image_faults(images: np.ndarray, rng) -> dict[str, np.ndarray]:
    """What an export bug does to images: rotated, flipped, channels swapped or dropped,
    noise added (the labels stay right)."""
    grey = images.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    noisy = images.astype(np.float32) + rng.normal(0, 12, images.shape)
    return {
        "rotated 90 degrees": np.rot90(images, 1, axes=(1, 2)).copy(),
        "upside down": images[:, ::-1].copy(),
        "mirrored (left-right)": images[:, :, ::-1].copy(),
        "BGR channel order": images[..., ::-1].copy(),
        "grey": np.repeat(np.round(grey)[..., None], 3, -1).astype(np.uint8),
        "red channel dropped": images * np.array([0, 1, 1], np.uint8),
        "Gaussian noise, sigma 12": np.clip(np.round(noisy), 0, 255).astype(np.uint8),
    }


def _faults(labels: np.ndarray, rng) -> dict[str, np.ndarray]:
    swapped = labels.copy()
    swapped[labels == CAT], swapped[labels == DOG] = DOG, CAT
    out = {"cat and dog exchanged": swapped}
    for share in (0.10, 0.25):
        noisy = labels.copy()
        chosen = rng.random(len(labels)) < share
        noisy[chosen] = rng.integers(0, NUM_CLASSES, int(chosen.sum()))
        out[f"{share:.0%} of labels random"] = noisy
    return out


def measure(
    data: str,
    served_sizes: list[int],
    span: int,
    samples: int,
    seed: int,
    warm_start: int = 0,
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
            started = time.time()
            used = size + warm_start
            version = _served_version(images[:used], labels[:used], workdir, warm_start, training)
            trained = time.time() - started
            with open(os.path.join(version, label_agreement.REFERENCE_FILE)) as handle:
                served = label_agreement.Reference.from_json(handle.read())
            with open(os.path.join(version, drift.EMBEDDING_FILE), "rb") as handle:
                kept = drift.embeddings_from_bytes(handle.read(), version)
            rng = np.random.default_rng(seed + size)
            spans = [(f"clean {i + 1}", used + i * span) for i in range(samples)]
            fault_start = used + samples * span
            for name, start in spans + [("faults", fault_start)]:
                chunk = slice(start, start + span)
                if chunk.stop > len(labels):
                    raise SystemExit(f"not enough unseen images for {samples} spans of {span}")
                started = time.time()
                probabilities, embeddings = model_scoring.scores(version, images[chunk])
                seconds = time.time() - started
                cases = {name: (probabilities, embeddings, labels[chunk])}
                if name == "faults":
                    cases = {
                        case: (probabilities, embeddings, given)
                        for case, given in _faults(labels[chunk], rng).items()
                    }
                    for case, altered in _image_faults(images[chunk], rng).items():
                        cases[case] = (*model_scoring.scores(version, altered), labels[chunk])
                for case, (scored, embedded, given) in cases.items():
                    ids = [str(i) for i in range(len(given))]
                    judged = label_agreement.judge(scored, given, ids, served, "")
                    mmd, _ = drift.compare_embeddings(kept, embedded)  # as the gate does
                    rows.append({
                        "served": size, "warm": warm_start, "span": span, "case": case,
                        "accuracy": float(np.trace(served.counts) / served.counts.sum()),
                        "exchange": _exchange_excess(judged, served),
                        "noise": judged.noise, "reference_noise": served.noise,
                        "shift": judged.shift, "mmd": mmd,
                        "stopped": bool(judged.problems() or judged.shift_problems()
                                        or (mmd or 0.0) > drift.MMD_THRESHOLD),
                        "score_seconds": seconds, "train_seconds": trained,
                    })  # fmt: skip
    return rows


def _or_na(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _warm(row: dict) -> str:
    return f" + {row['warm']:,} warm-started" if row.get("warm") else ""


def table(rows: list[dict]) -> str:
    lines = [
        f"exchange margin {label_agreement.EXCHANGE_MARGIN}, noise margin "
        f"{label_agreement.NOISE_MARGIN}, shift threshold {drift.SHIFT_THRESHOLD}, "
        f"embedding threshold {drift.MMD_THRESHOLD}",
        "",
        "| served images (eval acc.) | span | data | exchange excess | noise est. "
        "(reference) | noise excess | shift (KS) | embeddings (MMD) | stopped | scoring s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['served']:,}{_warm(r)} ({r['accuracy']:.1%}) | {r['span']:,} | {r['case']} | "
            f"{r['exchange']:+.3f} | {r['noise']:.3f} ({r['reference_noise']:.3f}) | "
            f"{r['noise'] - r['reference_noise']:+.3f} | "
            f"{_or_na(r['shift'], '.3f')} | {_or_na(r['mmd'], '.4f')} | "
            f"{'yes' if r['stopped'] else 'no'} | {r['score_seconds']:.1f} |"
        )
    return "\n".join(lines)


def served_spans_arguments(parser: argparse.ArgumentParser, span: int) -> argparse.ArgumentParser:
    """The flags of a measurement on versions served from --served images and spans of
    --span images they never saw (this one and benchmarks/class_drop.py)."""
    parser.add_argument("--data", required=True)
    parser.add_argument("--served", type=int, action="append", help="default: 10000 and 25000")
    parser.add_argument("--span", type=int, default=span)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--epochs", type=int, help="every `run` trains N epochs (default: the recipe's)"
    )
    return parser


def training_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The `run` flags `--epochs` stands for, and the line that says the table measures
    nothing then (printed above it)."""
    if args.epochs is None:
        return ()
    print(f"every run trained {args.epochs} epochs (--epochs), not the recipe's: a smoke test")
    return ("--epochs", str(args.epochs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--warm-start",
        type=int,
        default=0,
        help="N: the served version is the nightly fine-tune (run --warm-start) of the first "
        "on N more images, as a warm-started version that is served",
    )
    args = served_spans_arguments(parser, span=3000).parse_args(argv)
    print(measured_on())
    rows = measure(
        args.data,
        args.served or [10000, 25000],
        args.span,
        args.samples,
        args.seed,
        args.warm_start,
        training_flags(args),
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
