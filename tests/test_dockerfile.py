"""The images install exactly the pins of requirements.lock (the same as `make`): no package
is installed unpinned or at another version, and the TPU build only exists in its own stage."""

import re
import shlex
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO_ROOT / "Dockerfile"
LOCK = REPO_ROOT / "requirements.lock"
WHEEL = re.compile(r"/([A-Za-z0-9_]+)-([0-9][^-]*)-cp\d+-[^/]*\.whl$")


def _lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.\-\[\],]+)==([^\s;]+)", line)
        if match:
            pins[re.sub(r"\[.*\]", "", match.group(1)).lower().replace("_", "-")] = match.group(2)
    return pins


def _stages() -> dict[str, dict]:
    """Stage name -> {'args': ARG defaults, 'runs': [command words of each pip call]}."""
    stages: dict[str, dict] = {}
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    current = None
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            current = stages.setdefault(words[-1], {"from": words[1], "args": {}, "runs": []})
        elif words[0] == "ARG" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            current["args"][name] = value
        elif words[0] == "RUN":
            for command in " ".join(words[1:]).split("&&"):
                current["runs"].append(shlex.split(command))
    return stages


def _pip(command):
    return command[:3] == ["python", "-m", "pip"] or command[:1] == ["pip"]


def _check_installs(stage, pins, allowed_replacement=None):
    """Every pip install of `stage` is the lock, the project, or the allowed replacement."""
    installed = []
    for command in stage["runs"]:
        if not _pip(command) or "install" not in command:
            continue
        args = command[command.index("install") + 1 :]
        assert "--no-deps" in args, f"re-resolves dependencies: {command}"
        targets = [a for a in args if not a.startswith("-")]
        if "-r" in args:
            assert targets == ["requirements.lock"], command
        elif "-e" in args:
            assert targets == ["."], command
        else:
            for target in targets:
                url = stage["args"].get(target.strip("${}\"'"), target)
                match = WHEEL.search(url)
                assert match, f"unpinned or unknown install: {target}"
                name, version = match.group(1).lower().replace("_", "-"), match.group(2)
                assert allowed_replacement and name == allowed_replacement, (
                    f"{name} is not installed from the lock"
                )
                installed.append((name, version))
    return installed


def test_the_cpu_image_installs_only_the_lock_and_the_project():
    stages, pins = _stages(), _lock_pins()
    default = list(stages)[-1]
    assert stages[default]["runs"] == []  # nothing on top of the shared stage
    base = stages[stages[default]["from"]]
    assert [
        "python",
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--no-deps",
        "-r",
        "requirements.lock",
    ] in base["runs"]
    assert _check_installs(base, pins) == []
    assert "tensorflow" in pins and "tf-keras" in pins and "google-cloud-aiplatform" in pins


def test_the_tpu_image_swaps_only_tensorflow_for_its_tpu_build_of_the_same_line():
    stages, pins = _stages(), _lock_pins()
    tpu = stages["tpu-trainer"]
    assert tpu["from"] in stages and tpu["from"] != "tpu-trainer"
    replaced = _check_installs(tpu, pins, allowed_replacement="tensorflow")
    [(name, version)] = replaced
    assert version.split(".")[:2] == pins["tensorflow"].split(".")[:2]
    uninstall = next(c for c in tpu["runs"] if _pip(c) and "uninstall" in c)
    assert uninstall[-1] == "tensorflow" and tpu["runs"].index(uninstall) == 0
    assert any(c[:1] == ["curl"] and c[-1] == "/lib/libtpu.so" for c in tpu["runs"])


def test_each_image_copies_the_files_the_project_metadata_names():
    """`pip install .` reads the readme and the license files pyproject.toml names; an image
    that does not copy one fails to build."""
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    named = set(re.findall(r'^readme = "([^"]+)"', pyproject, re.M))
    for files in re.findall(r"^license-files = \[([^\]]*)\]", pyproject, re.M):
        named |= set(re.findall(r'"([^"]+)"', files))
    assert {"README.md", "LICENSE"} <= named
    for dockerfile in ("Dockerfile", "Dockerfile.current"):
        copied = set()
        for line in (REPO_ROOT / dockerfile).read_text().splitlines():
            if line.startswith("COPY "):
                copied |= set(line.split()[1:-1])
        assert named <= copied, f"{dockerfile} does not copy {sorted(named - copied)}"


def _cuda_pins() -> dict[str, str]:
    """The CUDA libraries the locked TensorFlow asks for with its `and-cuda` extra."""
    import importlib.metadata

    installed = importlib.metadata.version("tensorflow")
    if installed != _lock_pins()["tensorflow"]:
        pytest.skip(
            f"the Dockerfile's TensorFlow ({_lock_pins()['tensorflow']}, requirements.lock) is "
            f"not the one installed here ({installed}, the other stack): its CUDA pins are not "
            "in this environment's metadata"
        )
    pins = {}
    for requirement in importlib.metadata.requires("tensorflow"):
        if "extra == 'and-cuda'" in requirement or 'extra == "and-cuda"' in requirement:
            name, version = requirement.split(";")[0].replace(" ", "").split("==")
            pins[name.lower()] = version
    return pins


def test_the_gpu_image_adds_exactly_the_cuda_libraries_the_locked_tensorflow_names():
    """TensorFlow's Linux wheel is a CUDA build that finds CUDA's libraries at run time; the
    `gpu` stage adds the ones its `and-cuda` extra pins, and nothing else, on the CPU
    image's stage, which stays the default target."""
    stages = _stages()
    gpu = stages["gpu"]
    assert gpu["from"] == stages[list(stages)[-1]]["from"] and list(stages)[-1] != "gpu"
    [install] = [c for c in gpu["runs"] if _pip(c) and "install" in c]
    assert "--no-deps" in install
    added = dict(a.split("==") for a in install if "==" in a)
    assert added == _cuda_pins() and len(added) >= 10
    assert not any(_pip(c) and "uninstall" in c for c in gpu["runs"])


def test_the_docs_build_the_gpu_image_they_train_on():
    text = (REPO_ROOT / "docs" / "vertex.md").read_text()
    assert "--target gpu" in text and "--target gpu" in DOCKERFILE.read_text()
