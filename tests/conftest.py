"""Test-wide settings: CPU only (tests must not depend on a GPU being there), and Keras 2
chosen the way every entry point chooses it: by importing `components` first."""

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import components  # noqa: F401
from components import contract

import cifar_fixtures as fx

# float32 pinned: `--precision auto` picks bf16 on CPUs that compute it natively, and the
# gates below are set for how float32 trains on tiny data. bf16 has its own runs
# (test_precision_paths.py).
FAST_TRAINING = ["--epochs", "3", "--per-replica-batch-size", "64", "--precision", "float32"]
PIPELINE_NODES = contract.PIPELINE_NODES  # tests import it from here
# Session and module fixtures that run the pipeline or train: `make test` and the targets of
# their own run two pytest-xdist workers with --dist loadgroup, and every test using one of
# these goes to the same worker, so each is built once.
SHARED_RUN_FIXTURES = ("first_run", "scenario", "trained", "bf16_run", "kubeflow_push")


# tryfirst: pytest-xdist reads the groups in its own pytest_collection_modifyitems, which
# otherwise runs before this one and never sees these marks.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # A test that shares a session run goes with it; then a test that shares its module's
    # module-scoped fixture goes where that fixture's other tests went (a run's group if one
    # of them is in it, else one group per module).
    taken = {}
    for item in items:
        if any(item.iter_markers("xdist_group")):
            group = "_".join(sorted(str(m.args[0]) for m in item.iter_markers("xdist_group")))
        else:
            group = next((n for n in SHARED_RUN_FIXTURES if n in item.fixturenames), "")
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
        for name in module_fixtures(item) if group else ():
            taken.setdefault(_fixture_key(item, name), group)
    for item in items:
        fixtures = module_fixtures(item)
        if fixtures and not any(item.iter_markers("xdist_group")):
            found = [taken[k] for k in (_fixture_key(item, n) for n in fixtures) if k in taken]
            group = found[0] if found else _module_stem(item) + "_module"
            item.add_marker(pytest.mark.xdist_group(group))
            for name in fixtures:
                taken.setdefault(_fixture_key(item, name), group)


def _module_stem(item) -> str:
    return item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def _fixture_key(item, name: str) -> str:
    return f"{item.nodeid.split('::')[0]}::{name}"


def module_fixtures(item) -> list[str]:
    """The module-scoped fixtures a test module defines for itself and `item` uses: built
    once per worker that runs one of its tests, so its tests belong on one worker."""
    module = item.nodeid.split("::")[0]
    info = getattr(item, "_fixtureinfo", None)
    found = []
    for name, defs in info.name2fixturedefs.items() if info else ():
        if any(d.scope == "module" and d.baseid == module for d in defs):
            found.append(name)
    return sorted(found)


@pytest.fixture(scope="session", autouse=True)
def temporary_files_under_pytest(tmp_path_factory):
    """Tests and the processes they start keep their temporary files (AutoGraph's generated
    modules, Beam's pipeline folders) under pytest's own temporary folder, which pytest
    prunes, not in the machine's /tmp: a run a test kills on purpose cannot clean up after
    itself, nor can a Beam pipeline whose construction a test makes fail."""
    folder = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))  # this process's own, once read
        yield folder


def cli(*args, timeout=900):
    """`cifar10-pipeline ARGS` in a fresh CPU-only process."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CIFAR10_DATA", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def one_line_error(capsys, *named: str) -> str:
    """The command's stderr: one line, `error: ...`, naming each of `named`."""
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for text in named:
        assert text in err, err
    return err


def versions(out: Path):
    base = out / "serving" / "cifar10"
    return sorted(p.name for p in base.iterdir() if p.name.isdigit()) if base.exists() else []


@pytest.fixture(scope="session")
def tiny_archive(tmp_path_factory):
    return fx.binary_archive(
        tmp_path_factory.mktemp("data") / "cifar.tar.gz", batches=2, per_class=60
    )


@pytest.fixture(scope="session")
def first_run(tiny_archive, tmp_path_factory):
    """One end-to-end run on tiny data, shared by the tests that inspect its results."""
    out = tmp_path_factory.mktemp("run")
    done = cli(
        "run", "--data", tiny_archive, "--output-dir", out, "--accuracy-gate", "0.5", *FAST_TRAINING
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out, json.loads((out / "run_summary.json").read_text()), done


@contextlib.contextmanager
def compiling_away_from_home(tmp_path_factory, name: str):
    """HOME and the working directory moved to fresh folders named after `name` while a
    pipeline compiles, so a test can tell whether either leaked into the compiled file:
    checking for `Path.home()` itself proves nothing where HOME is "/" (many containers)."""
    home, cwd = compiler_places(tmp_path_factory, name)
    home.mkdir()
    cwd.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.chdir(cwd)
        yield


def compiler_places(tmp_path_factory, name: str) -> tuple[Path, Path]:
    base = tmp_path_factory.getbasetemp()
    return base / f"{name}-compiler-home", base / f"{name}-compiler-cwd"
