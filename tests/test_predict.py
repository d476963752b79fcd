"""`predict` for people: messages name the user's files (no Python internals), a folder
stands for the images in it, arguments are checked before the model loads, --top and
--samples are refused out of range, --model-dir takes a run folder, and --samples works
from the run that pushed the model whichever folder of it is named."""

import json

import pytest

from components.contract import NUM_CLASSES
from pipeline import cli
from pipeline.local import predict
from pipeline.local.summary import RunSummary

import cifar_fixtures as fx


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder as `run --output-dir` leaves it, as far as `predict` reads it: a pushed
    version (an untrained network of the real shape) and the eval split it ingested."""
    run = tmp_path_factory.mktemp("predict-run")
    fx.tiny_served_model(run)
    split = run / "artifacts" / "examples" / "Split-eval"
    split.mkdir(parents=True)
    fx.write_split(split / "data_tfrecord-00000-of-00001.gz", fx.balanced_labels(2), seed=3)
    RunSummary("r1", {}, {}, {}, {"examples": str(split.parent)}).write(run)
    return run


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the model is loaded."""

    def loaded(version_dir):
        raise AssertionError(f"the model was loaded ({version_dir})")

    monkeypatch.setattr(predict, "Classifier", loaded)


def _predict(capsys, *args) -> tuple[int, list[str], list[str]]:
    status = cli.main(["predict", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def test_a_file_it_cannot_classify_is_named_in_words(run_dir, tmp_path, capsys, no_model):
    notes, missing = tmp_path / "notes.png", tmp_path / "missing.png"
    notes.write_text("not an image")
    damaged = tmp_path / "damaged.png"
    damaged.write_bytes(fx.write_png(tmp_path / "whole.png").read_bytes()[:60])
    status, out, err = _predict(capsys, "--model-dir", run_dir, notes, missing, damaged)
    assert (status, out) == (2, [])
    assert err == [
        f"error: {notes}: not a PNG or JPEG image",
        f"error: {missing}: no such file",
        f"error: {damaged}: a damaged PNG image",
    ]


def test_a_folder_stands_for_its_image_files_sorted(run_dir, tmp_path, capsys):
    folder = tmp_path / "photos"
    for name in ("b.png", "a.JPG", "c.jpeg"):
        fx.write_png(folder / name)  # PNG bytes whatever the name: the content decides
    (folder / "notes.txt").write_text("skipped: not an image name")
    fx.write_png(folder / "sub" / "d.png")  # subfolders are not searched
    status, out, err = _predict(capsys, "--model-dir", run_dir, "--json", folder)
    assert status == 0, err
    assert [json.loads(line)["file"] for line in out] == [
        str(folder / name) for name in ("a.JPG", "b.png", "c.jpeg")
    ]


def test_a_folder_without_images_is_refused_in_words(run_dir, tmp_path, capsys, no_model):
    (tmp_path / "empty").mkdir()
    status, out, err = _predict(capsys, "--model-dir", run_dir, tmp_path / "empty")
    assert (status, out) == (2, [])
    assert err == [f"error: {tmp_path / 'empty'}: no PNG or JPEG files in this folder"]


def test_arguments_are_checked_before_the_model_loads(run_dir, tmp_path, capsys, no_model):
    status, _, err = _predict(capsys, "--model-dir", run_dir)
    assert status == 2 and err == ["error: give one or more IMAGE files or folders, or --samples N"]
    image = fx.write_png(tmp_path / "a.png")
    status, _, err = _predict(capsys, "--model-dir", run_dir, "--samples", "3", image)
    assert status == 2 and err == ["error: give IMAGE files or --samples N, not both"]
    status, _, err = _predict(capsys, "--model-dir", run_dir, "--data", "x.tar.gz", image)
    assert status == 2 and err == ["error: --data is read only with --samples N"]


@pytest.mark.parametrize(
    "flag, value", [("--top", 0), ("--top", NUM_CLASSES + 1), ("--samples", 0)]
)
def test_counts_out_of_range_are_refused_with_the_flag(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as refused:
        cli.main(["predict", flag, str(value), str(tmp_path / "a.png")])
    assert refused.value.code == 2
    assert f"argument {flag}: must be" in capsys.readouterr().err


def test_top_10_shows_every_class(run_dir, tmp_path, capsys):
    image = fx.write_png(tmp_path / "a.png")
    model_dir = run_dir / "serving" / "cifar10"
    status, out, _ = _predict(capsys, "--model-dir", model_dir, "--top", NUM_CLASSES, image)
    assert status == 0 and len(out[0].split(", ")) == NUM_CLASSES


def test_the_model_dir_may_be_the_run_folder(run_dir, tmp_path, capsys):
    image = fx.write_png(tmp_path / "a.png")
    status, out, err = _predict(capsys, "--model-dir", run_dir, image)
    assert status == 0, err
    assert err == [f"Model: {run_dir / 'serving' / 'cifar10' / '1'}"]
    assert out[0].startswith(f"{image}: ")
    assert predict.newest_version(str(run_dir)) == run_dir / "serving" / "cifar10" / "1"


@pytest.mark.parametrize("named", ["run", "serving", "version"])
def test_samples_come_from_the_run_whichever_folder_is_named(run_dir, capsys, named):
    model_dir = {
        "run": run_dir,
        "serving": run_dir / "serving" / "cifar10",
        "version": run_dir / "serving" / "cifar10" / "1",
    }[named]
    status, out, err = _predict(capsys, "--model-dir", model_dir, "--samples", "4")
    assert status == 0, err
    assert len(out) == 5 and out[-1].endswith("/4 correct")


def test_help_says_what_a_folder_stands_for(capsys):
    with pytest.raises(SystemExit):
        cli.main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a folder stands for the .png, .jpg and .jpeg files in it, sorted by name" in text
    assert "a run folder" in text


def test_a_model_it_cannot_load_is_one_line(tmp_path, capsys):
    version = tmp_path / "broken" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"not a SavedModel")
    image = fx.write_png(tmp_path / "a.png")
    status, out, err = _predict(capsys, "--model-dir", version, image)
    assert (status, out) == (2, [])
    assert len(err) == 1 and err[0].startswith(f"error: {version}: cannot load the model ("), err
    assert "b'" not in err[0]
