"""The cloud runbooks' local steps, in the order the pages give them, on both kinds of host:
once a checkout is set up with a stack (`make STACK=legacy setup`), no later `make` step
installs the other one. At dd83add a Debian 13 or Ubuntu 24.04 host reinstalled .venv as the
current stack at `make local-kfp`, which refuses s3:// and compiled with another stack."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNBOOKS = ["docs/vertex.md", "docs/kubeflow.md"]
HOSTS = {"debian12": "2.36", "debian13": "2.41", "ubuntu2404": "2.39"}
# What `make` needs of a checkout to decide; the installer itself is a stand-in that records
# the lock it was asked to install.
CHECKOUT_FILES = [
    "Makefile", "pyproject.toml", "requirements.lock", "requirements-current.lock",
    "requirements-kfp.lock", "components/__init__.py", "components/runtime/stack.py",
]  # fmt: skip
INSTALLER = """#!/bin/sh
mkdir -p "$2/bin" && echo "$3" >> installed.txt
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make_steps(page: str) -> list[list[str]]:
    """The page's `make ...` commands, in order, from its bash blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO_ROOT / page).read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line.split("   #", 1)[0]) for line in lines if line.startswith("make ")]


def _checkout(folder: Path) -> Path:
    for name in CHECKOUT_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, folder / name)
    (folder / "stack").mkdir()
    (folder / "stack" / "install.sh").write_text(INSTALLER)
    (folder / "stack" / "install.sh").chmod(0o755)
    return folder


def _make(checkout: Path, glibc: str, argv: list[str], dry: bool):
    env = {**os.environ, "CIFAR10_HOST_GLIBC": glibc}
    env.pop("STACK", None)
    python = [f"PYTHON310={sys.executable}", f"PYTHON313={sys.executable}"]
    return subprocess.run(
        ["make", *(["-n"] if dry else []), *argv[1:], *python],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("page", RUNBOOKS)
@pytest.mark.parametrize("host", HOSTS)
def test_no_runbook_step_switches_the_stack(page, host, tmp_path):
    steps = make_steps(page)
    assert steps[0][:3] == ["make", "STACK=legacy", "setup"], f"{page} sets up no stack first"
    assert len(steps) >= 2, f"{page}: no make step after the setup"
    checkout = _checkout(tmp_path)
    done = _make(checkout, HOSTS[host], steps[0], dry=False)
    assert done.returncode == 0, done.stderr
    assert (checkout / "installed.txt").read_text().split() == ["requirements.lock"]
    for step in steps[1:]:
        planned = _make(checkout, HOSTS[host], step, dry=True)
        assert planned.returncode == 0, planned.stderr
        assert "stack/install.sh" not in planned.stdout, f"{shlex.join(step)} reinstalls .venv"
        assert "requirements-current.lock" not in planned.stdout
        assert ".venv/bin/cifar10-pipeline" in planned.stdout, planned.stdout


@pytest.mark.parametrize("page", RUNBOOKS)
def test_each_runbook_says_it_needs_python_3_10(page):
    assert "Python 3.10" in (REPO_ROOT / page).read_text()


# A stand-in for uv on PATH: records its arguments; `python install` fails when asked to,
# `python find` names this interpreter.
FAKE_UV = f"""#!/bin/sh
echo "$*" >> "$UV_CALLS"
[ "$1 $2" = "python install" ] && [ -n "$UV_FAILS" ] && {{ echo "uv: no network" >&2; exit 1; }}
[ "$1 $2" = "python find" ] && echo {sys.executable}
exit 0
"""


def _setup_without_python_3_10(tmp_path: Path, uv_fails: bool):
    checkout = _checkout(tmp_path / "checkout")
    shutil.copy(REPO_ROOT / "stack" / "obtain-python.sh", checkout / "stack")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "uv").write_text(FAKE_UV)
    (tools / "uv").chmod(0o755)
    env = {
        **os.environ, "CIFAR10_HOST_GLIBC": "2.41", "PATH": f"{tools}:{os.environ['PATH']}",
        "UV_CALLS": str(tmp_path / "uv-calls.txt"), "UV_FAILS": "1" if uv_fails else "",
    }  # fmt: skip
    done = subprocess.run(
        ["make", "STACK=legacy", "setup", "PYTHON310="],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    calls = (tmp_path / "uv-calls.txt").read_text().splitlines()
    return checkout, done, calls


def test_the_legacy_stack_without_python_3_10_obtains_it_with_uv(tmp_path):
    checkout, done, calls = _setup_without_python_3_10(tmp_path, uv_fails=False)
    assert done.returncode == 0, done.stderr
    assert calls == ["python install 3.10", "python find --python-preference only-managed 3.10"]
    assert "obtaining it with uv (uv python install 3.10)" in done.stderr
    assert f"stack/install.sh {sys.executable} .venv requirements.lock" in done.stdout
    assert (checkout / "installed.txt").read_text().split() == ["requirements.lock"]


def test_the_legacy_stack_without_python_3_10_says_what_to_do_in_one_line(tmp_path):
    """uv tried first; when it cannot install Python either, one line says what to do."""
    checkout, done, calls = _setup_without_python_3_10(tmp_path, uv_fails=True)
    assert done.returncode != 0
    assert calls == ["python install 3.10"]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "needs Python 3.10, which this host lacks and uv could not install" in line
    assert "PYTHON310=" in line
    assert not (checkout / "installed.txt").exists()


def test_a_named_stack_still_switches_an_installed_checkout(tmp_path):
    checkout = _checkout(tmp_path)
    assert _make(checkout, "2.41", ["make", "STACK=legacy", "setup"], dry=False).returncode == 0
    planned = _make(checkout, "2.41", ["make", "STACK=current", "setup"], dry=True)
    assert "requirements-current.lock" in planned.stdout
