"""A wheel install works: every package folder is packaged, and the schema travels as
package data (found with importlib.resources, not through the source tree)."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_wheel_holds_every_package_and_the_schema(tmp_path):
    source = tmp_path / "source"  # a copy, so the build writes nothing into the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name)
    for folder in ("pipeline", "components", "data"):
        shutil.copytree(
            REPO_ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [wheel] = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        str(p.parent.relative_to(REPO_ROOT))
        for folder in ("pipeline", "components")
        for p in (REPO_ROOT / folder).rglob("__init__.py")
    }
    missing = {p for p in packages if f"{p}/__init__.py" not in names}
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert "cifar10_data/schema/schema.pbtxt" in names
    assert "pipeline/local/templates/report.html" in names  # the report template
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_schema_is_found_as_package_data():
    from pipeline.settings.config import SCHEMA_PATH

    assert SCHEMA_PATH.name == "schema.pbtxt" and SCHEMA_PATH.exists()
    assert "feature" in SCHEMA_PATH.read_text()


def test_a_local_pipeline_does_not_import_the_vertex_client(tmp_path):
    """google-cloud-aiplatform took seconds of every local run's start (through `tfx.v1`);
    only compiling or submitting for Vertex needs it."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pipeline.settings.config import TrainingConfig\n"
        "from pipeline.local.runner import local_config\n"
        "from pipeline.topology import create_pipeline\n"
        "from tfx.orchestration.local.local_dag_runner import LocalDagRunner\n"
        f"config = local_config(Path({str(tmp_path)!r}), '/d/c.tar.gz', 'f', TrainingConfig())\n"
        "create_pipeline(config)\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.cloud.aiplatform')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_local_beam_components_do_not_package_tfx_for_remote_workers(tmp_path, monkeypatch):
    """Any Beam argument makes TFX build an sdist of itself before every Beam component
    (1-2 s each, for remote workers the in-memory DirectRunner does not have)."""
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.utils import dependency_utils

    from components.cifar10_example_gen.executor import Executor
    from pipeline.local.runner import local_config
    from pipeline.settings.config import TrainingConfig

    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1))
    config = local_config(tmp_path, "/d/c.tar.gz", "f", TrainingConfig())
    Executor(BaseBeamExecutor.Context(beam_pipeline_args=list(config.beam_args)))
    assert built == []
    # The check above can fail: a Beam argument, as a user may pass, does build it.
    extra = local_config(
        tmp_path, "/d", "f", TrainingConfig(), beam_args=("--direct_num_workers=1",)
    )
    Executor(BaseBeamExecutor.Context(beam_pipeline_args=list(extra.beam_args)))
    assert built == [1]


def test_the_project_is_licensed_apache_2():
    """A LICENSE file with the Apache License 2.0 text, and the SPDX name in the metadata."""
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in pyproject
    assert 'license-files = ["LICENSE"]' in pyproject
