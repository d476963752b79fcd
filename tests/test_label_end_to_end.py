"""Exchanged labels end to end: a run pushes a model with its reference images; the next run's
data has the labels of cat and dog exchanged. The gate stops it (exit 3); with
--accept-labels it trains, its own eval split (exchanged too) passes the accuracy gate, and
the Evaluator's check on the served version's reference images still refuses the push
(exit 4), naming the classes: the second line holds when the first is overridden."""

import json

import numpy as np
import pytest

from components.contract import LABEL_NAMES

import cifar_fixtures as fx
from conftest import FAST_TRAINING, cli, versions

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("label_runs")]

CAT, DOG = LABEL_NAMES.index("cat"), LABEL_NAMES.index("dog")
# 125 images a class in each of two batches: the eval carve keeps 24 a class, enough for
# each class to be judged on the reference images (components/checks/reference_images.py).
PER_CLASS = 125


def _archive(path, seed: int, exchanged: bool):
    members = {"cifar-10-batches-bin/batches.meta.txt": "\n".join(LABEL_NAMES).encode()}
    for batch in (1, 2):
        labels = fx.balanced_labels(PER_CLASS, seed=seed + batch)
        images = fx.make_images(labels, seed=seed + batch)
        given = labels.copy()
        if exchanged:
            given[labels == CAT], given[labels == DOG] = DOG, CAT
        members[f"cifar-10-batches-bin/data_batch_{batch}.bin"] = fx.binary_records(images, given)
    return fx.write_tar(path, members)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("labels")
    out = folder / "out"
    common = ["--output-dir", out, "--accuracy-gate", "0.5", *FAST_TRAINING]
    first = cli("run", "--data", _archive(folder / "clean.tar.gz", 0, False), *common)
    assert first.returncode == 0, first.stderr[-4000:]
    served = versions(out)
    exchanged = _archive(folder / "exchanged.tar.gz", 10, True)
    stopped = cli("run", "--data", exchanged, *common)
    accepted = cli("run", "--data", exchanged, *common, "--accept-labels")
    return out, served, stopped, accepted


def test_exchanged_labels_stop_the_run_before_training(runs):
    out, served, stopped, _ = runs
    assert stopped.returncode == 3, stopped.stderr[-4000:]
    assert "labels of cat and dog look exchanged" in stopped.stderr
    assert versions(out) == served


def test_accepted_exchanged_labels_are_refused_by_the_reference_images(runs):
    out, served, _, accepted = runs
    assert accepted.returncode == 4, accepted.stderr[-4000:]
    assert "ACCEPTED with --accept-labels" in accepted.stdout
    [version] = served
    reference = np.load(out / "serving" / "cifar10" / version / "assets.extra" /
                        "reference_images.npz")  # fmt: skip
    kept = len(reference["labels"])  # the first run's eval carve: 12 a class and batch
    assert kept == 240 and np.bincount(reference["labels"]).min() >= 20
    lines = [x for x in accepted.stdout.splitlines() if f"on the served version's {kept}" in x]
    assert any(x.startswith(f"  - class cat on the served version's {kept} reference images")
               for x in lines), accepted.stdout  # fmt: skip
    assert any(x.startswith("  - class dog on the") for x in lines), accepted.stdout
    assert any(x.startswith("reference      ") for x in lines), accepted.stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["blessed"] is False and summary["eval_accuracy"] >= 0.5
    assert versions(out) == served  # nothing pushed
