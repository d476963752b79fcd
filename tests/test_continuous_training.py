"""Continuous training end to end on tiny spans: span 1 pushes; span 2 arrives and a warm start
from the served model pushes again; with no new span the run trains nothing (exit 0); --force
and a window retrain; a changed published span and a half-copied span are refused; a network
that differs from the served one falls back to training from scratch."""

import json
import shutil

import numpy as np
import pytest

from components.contract import SERVED_SPANS_FILE, TRAINER_NODE

import cifar_fixtures as fx
from conftest import FAST_TRAINING, cli, versions

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("span_runs")]


def span_two(path):
    """The tiny archive's images shifted one pixel sideways, in swapped batch files: new bytes
    (a new fingerprint), no exact or near copy the gate finds (a shift changes both hashes;
    docs/data-validation.md), and the same distribution, so drift stays quiet (new images of
    1,200 drift by chance: sharpness 0.062 against 0.06 for one pair of seeds)."""
    members = {}
    for seed, name in ((1, 2), (2, 1)):
        labels = fx.balanced_labels(60, seed=seed)
        images = np.roll(fx.make_images(labels, seed), 1, axis=2)
        members[f"cifar-10-batches-bin/data_batch_{name}.bin"] = fx.binary_records(images, labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    return fx.write_tar(path, members)


def _summary(out):
    return json.loads((out / "run_summary.json").read_text())


def _first_loss(out):
    with open(_summary(out)["model_run_dir"] + "/history.json") as handle:
        return json.load(handle)[0]["loss"]


@pytest.fixture(scope="module")
def spans_run(tiny_archive, tmp_path_factory):
    root = tmp_path_factory.mktemp("spans") / "data"
    (root / "span-1").mkdir(parents=True)
    shutil.copy(tiny_archive, root / "span-1" / "cifar.tar.gz")
    out = tmp_path_factory.mktemp("span-out")
    common = ["--data", root, "--output-dir", out, "--accuracy-gate", "0.5", *FAST_TRAINING]
    first = cli("run", *common)
    assert first.returncode == 0, first.stderr[-4000:]
    facts = {"first": _summary(out), "first_loss": _first_loss(out), "served": versions(out)}
    span_two(root / "span-2" / "cifar.tar.gz")
    warm = cli("run", *common, "--warm-start")
    assert warm.returncode == 0, warm.stderr[-4000:]
    facts.update(warm=_summary(out), warm_loss=_first_loss(out), warm_stdout=warm.stdout)
    facts["warm_page"] = (out / "report.html").read_text()
    # the serving folder as these two nights left it, for tests that change what is served
    facts["two_nights"] = tmp_path_factory.mktemp("span-serving") / "serving"
    shutil.copytree(out / "serving", facts["two_nights"])
    return root, out, common, facts


def test_the_first_push_keeps_its_spans(spans_run):
    _, out, _, facts = spans_run
    assert facts["first"]["spans"] == [1] and facts["first"]["outcome"] == "pushed"
    assert facts["first"]["warm_start_from"] is None
    [version] = facts["served"]
    record = json.loads((out / "serving" / "cifar10" / version / SERVED_SPANS_FILE).read_text())
    assert record["spans"] == [1] and len(record["fingerprints"]["1"]) == 32
    # the digests of the 1,080 images it was trained on, for the next run to drop from eval
    index = out / "serving" / "cifar10" / version / "training_images.bin"
    assert index.stat().st_size == 1080 * 12
    dropped = facts["first"]["data_comparison"]["duplicates"]["eval_dropped"]
    assert dropped["copies_of_train"] == 0 and dropped["not_checked"] == "nothing served"


def test_a_new_span_warm_starts_from_the_served_model(spans_run):
    _, out, _, facts = spans_run
    [first_version] = facts["served"]
    warm = facts["warm"]
    assert warm["spans"] == [2] and warm["outcome"] == "pushed"
    assert warm["warm_start_from"] == str(out / "serving" / "cifar10" / first_version)
    assert f"warm start     from {warm['warm_start_from']}" in facts["warm_stdout"]
    page = facts["warm_page"]
    assert "span-2" in page and f"warm-started from {warm['warm_start_from']}" in page
    # the served weights were loaded: the first epoch's loss starts where span 1's training
    # ended (measured: 0.91 against 1.63 from scratch, label smoothing keeps it above 0.5)
    assert facts["warm_loss"] < 0.7 * facts["first_loss"]
    assert len(versions(out)) == 2
    # lineage: the fine-tuned model has seen span 1 through its starting weights, so its
    # version records span 1 (with span 1's own fingerprint) beside span 2
    serving = out / "serving" / "cifar10"
    first, second = (
        json.loads((serving / v / SERVED_SPANS_FILE).read_text()) for v in versions(out)
    )
    assert second["spans"] == [1, 2]
    assert second["fingerprints"]["1"] == first["fingerprints"]["1"]
    # and the images of both: its index is the union (span 2's images are shifted ones)
    first_index, second_index = (
        (serving / v / "training_images.bin").read_bytes() for v in versions(out)
    )
    assert len(second_index) == 2 * len(first_index) == 2160 * 12
    assert (
        "eval: 0 copies of train images dropped, 0 images the served model trained on dropped"
        in facts["warm_stdout"]
    )


def test_no_new_span_trains_nothing_and_exits_0(spans_run):
    _, out, common, _ = spans_run
    before = versions(out)
    done = cli("run", *common)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = done.stdout.strip().splitlines()
    served = f"no new span: served version {before[-1]} was trained on spans [1, 2]"
    assert line.startswith(served), line
    assert _summary(out)["outcome"] == "no_new_span" and versions(out) == before


def test_force_and_a_window_retrain_on_both_spans(spans_run):
    _, out, common, _ = spans_run
    done = cli("run", *common, "--spans", "2", "--force")
    assert done.returncode == 0, done.stderr[-4000:]
    facts = _summary(out)
    assert facts["spans"] == [1, 2] and facts["record_counts"] == {"train": 2160, "eval": 240}
    assert facts["stage_states"][TRAINER_NODE] == "complete"


def test_a_changed_published_span_is_refused(spans_run, tmp_path):
    root, out, common, _ = spans_run
    changed = tmp_path / "data"
    shutil.copytree(root, changed)
    fx.binary_archive(changed / "span-2" / "cifar.tar.gz", batches=2, per_class=61)
    args = [changed if a == root else a for a in common]
    done = cli("run", *args)
    assert done.returncode == 2
    assert "span-2: its content changed since served version" in done.stderr


def test_a_half_copied_span_is_refused_and_nothing_runs(spans_run, tmp_path):
    root, out, common, _ = spans_run
    partial = tmp_path / "data"
    shutil.copytree(root, partial)
    (partial / "span-3").mkdir()
    whole = (root / "span-2" / "cifar.tar.gz").read_bytes()
    (partial / "span-3" / "cifar.tar.gz").write_bytes(whole[: len(whole) // 2])
    before = versions(out)
    done = cli("run", *[partial if a == root else a for a in common])
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: span-3 ({partial / 'span-3'}) cannot be used: ")
    assert versions(out) == before


def test_a_different_network_trains_from_scratch_and_says_why(spans_run, tmp_path):
    root, out, _, _ = spans_run
    copy = tmp_path / "out"
    shutil.copytree(out / "serving", copy / "serving")  # the served versions only
    done = cli(
        "run", "--data", root, "--output-dir", copy, "--accuracy-gate", "0",
        "--max-regression", "1", "--max-class-drop", "1", "--force", "--warm-start",
        "--model", "seed_cnn", "--epochs", "1", "--precision", "float32",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    facts = _summary(copy)
    assert facts["warm_start_from"] is None
    assert facts["warm_start_note"].startswith("the served network has ")
    assert "warm start     none, from scratch: the served network has " in done.stdout


def test_a_rolled_back_version_stays_out_on_the_next_nights(spans_run, tmp_path):
    """Issue 62: at dd83add a version moved out of the serving folder by hand was retrained
    from its span and pushed again the next night. After `rollback`, the next night on the
    same spans trains nothing and names the rollback, `predict` serves the version before,
    and `--force` retrains. (The two served versions are spans_run's: span 1's, then span
    2's warm start; this test's own output folder starts from a copy of that serving folder.)"""
    root, _, _, facts = spans_run
    out = tmp_path / "out"
    shutil.copytree(facts["two_nights"], out / "serving")
    common = ["--data", root, "--output-dir", out, "--accuracy-gate", "0", *FAST_TRAINING]
    [first, bad] = versions(out)
    rolled = cli("rollback", "--output-dir", out, "--reason", "span 2 labels were wrong")
    assert rolled.returncode == 0, rolled.stderr
    assert versions(out) == [first]
    night = cli("run", *common)
    assert night.returncode == 0, night.stderr[-3000:]
    assert f"span-2 trained version {bad}, which was rolled back" in night.stdout
    assert "span 2 labels were wrong" in night.stdout and versions(out) == [first]
    assert _summary(out)["outcome"] == "no_new_span"
    served = cli("predict", fx.write_png(tmp_path / "a.png"), "--model-dir", out)
    assert served.returncode == 0, served.stderr
    assert f"Model: {out / 'serving' / 'cifar10' / first}" in served.stderr
    forced = cli("run", *common, "--force", "--max-regression", "1")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert len(versions(out)) == 2 and bad not in versions(out)
