"""The README's command blocks marked `<!-- runnable -->` work as a newcomer pastes them, in the
order shown: every command's flags parse with the CLI's own parser, every file a command reads
was written by a command before it, the data file they name is where `make run` gets its data,
and the cheap ones run, as written, in a fresh working folder.

What is not run as written, and why: `make run` trains on the 50,000-image archive for minutes
and, where no copy is at hand, downloads it, which a test cannot do offline; the session's tiny
run (`first_run`) stands in for it, its output folder linked as `out`. `submit --wait` needs
Vertex AI, `local-kfp` has tests of its own (tests/test_kfp_local.py), and `rollback` needs an
older version than the tiny run's one and would change the run other tests read
(tests/test_rollback.py runs it)."""

import hashlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CLI = ".venv/bin/cifar10-pipeline"
CACHED_ARCHIVE = "~/.cache/cifar10-pipeline/cifar-10-binary.tar.gz"


def runnable_lines() -> list[str]:
    """Each command line of the marked blocks, in order (`\\` continuations folded)."""
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- runnable -->\n```bash\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if line]


def runnable_commands() -> list[list[str]]:
    """Each command as argv, its trailing comment dropped."""
    return [shlex.split(line, comments=True) for line in runnable_lines()]


def as_cli_args(argv: list[str]) -> list[str] | None:
    """The cifar10-pipeline arguments a README command amounts to (`make run ARGS=`,
    `make local-kfp ARGS=`); None for a line that is not a cifar10-pipeline command."""
    if argv[0] == CLI:
        return argv[1:]
    if argv[0] != "make":
        return None
    assert argv[1] in ("run", "local-kfp"), argv
    [args] = [a.removeprefix("ARGS=") for a in argv[2:] if a.startswith("ARGS=")]
    return [argv[1], *shlex.split(args)]


def cli_commands() -> list[list[str]]:
    return [args for argv in runnable_commands() if (args := as_cli_args(argv)) is not None]


def test_the_readme_has_runnable_blocks_for_every_command():
    from pipeline.cli import build_parser

    used = {args[0] for args in cli_commands()}
    subcommands = build_parser()._subparsers._group_actions[0].choices
    assert used == set(subcommands), f"no runnable example for {set(subcommands) - used}"


@pytest.mark.parametrize("args", cli_commands(), ids=lambda args: " ".join(args[:2]))
def test_every_flag_parses(args):
    from pipeline.cli import build_parser

    build_parser().parse_args(args)  # SystemExit(2) on an unknown flag


def _value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _written_by(args: list[str]) -> set[str]:
    """Paths a command writes that a later one may read."""
    if args[0] == "run":
        out = _value(args, "--output-dir")
        return {out, f"{out}/serving/cifar10"}
    if args[0] == "compile":
        return {_value(args, "--output")}
    return set()


def _read_by(args: list[str]) -> set[str]:
    """Paths a command reads (predict's image files are left to the run below: the command
    that writes them is Python, whose writes cannot be read off its argv)."""
    read = {_value(args, "--model-dir")} - {None}
    if args[0] in ("submit", "local-kfp", "report"):
        read.add(args[1])
    return read


def test_each_command_reads_only_what_an_earlier_one_wrote():
    written: set[str] = set()
    targets = {}
    for args in cli_commands():
        missing = _read_by(args) - written
        assert not missing, f"{' '.join(args)} reads {missing}, which no earlier command writes"
        if args[0] == "compile":
            targets[_value(args, "--output")] = _value(args, "--target") or "vertex"
        if args[0] == "local-kfp":  # the file's target must be the one it is run as
            target = _value(args, "--target") or "kubeflow"
            assert targets[args[1]] == target, f"{' '.join(args)}: compiled for {targets[args[1]]}"
        written |= _written_by(args)


def _shared_copy() -> str:
    [path] = re.findall(r"^SHARED_DATA := (\S+)$", (REPO_ROOT / "Makefile").read_text(), re.M)
    return path


def test_the_data_the_readme_names_is_where_make_run_gets_it(tmp_path, monkeypatch):
    """A local `--data` in the blocks is the archive `make run` downloads or the shared copy
    it uses, and the README says where each is; `predict` and `report` need none."""
    from pipeline.settings import data_source

    readme = (REPO_ROOT / "README.md").read_text()
    assert _shared_copy() in readme and CACHED_ARCHIVE in readme
    local = [
        _value(args, "--data")
        for args in cli_commands()
        if "--data" in args and "://" not in _value(args, "--data")
    ]
    assert local and set(local) <= {CACHED_ARCHIVE, _shared_copy()}, local
    # ~/.cache/cifar10-pipeline/ (or $XDG_CACHE_HOME's) is where `run` finds the download
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(data_source.ENV_VAR, raising=False)
    cached = Path(os.path.expanduser(CACHED_ARCHIVE))
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"archive")
    assert data_source.resolve(None) == str(cached)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_source.cache_dir() == tmp_path / "xdg" / "cifar10-pipeline"


def test_the_download_is_kept_only_when_its_md5_matches(tmp_path):
    """The README's 'downloads the official archive once, checks its MD5': a wrong checksum
    leaves neither the file nor its `.part`."""
    from pipeline.settings import data_source

    source = tmp_path / "official.tar.gz"
    source.write_bytes(b"the archive's bytes")
    target = tmp_path / "cache" / "cifar-10-binary.tar.gz"
    with pytest.raises(data_source.DataSourceError, match="checksum mismatch"):
        data_source.download(source.as_uri(), target, md5="0" * 32)
    assert not target.parent.exists() or list(target.parent.iterdir()) == []
    right = hashlib.md5(source.read_bytes()).hexdigest()
    assert data_source.download(source.as_uri(), target, md5=right) == target
    assert target.read_bytes() == source.read_bytes()


def test_every_run_option_the_readme_lists_exists_with_its_choices():
    """`--flag a|b|c` in the README is exactly that flag's choices, and each `--flag` of the
    options list is one of `run`'s."""
    from pipeline.cli import build_parser

    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]
    actions = {opt: action for action in run_parser._actions for opt in action.option_strings}
    text = (REPO_ROOT / "README.md").read_text()
    options = text[text.index("- **Training options**") : text.index("- **New data as spans**")]
    listed = re.findall(r"`(--[\w-]+)(?: ([\w|]+))?`", options)
    assert len(listed) > 15
    for flag, choices in listed:
        assert flag in actions, f"README lists {flag}, which `run` does not have"
        if "|" in choices:
            assert choices.split("|") == list(actions[flag].choices), flag


@pytest.mark.integration
def test_the_cheap_commands_run_as_written(first_run, tmp_path):
    """Every block's line runs through bash in a fresh working folder that holds only `.venv`
    (this test's environment, importing this checkout) and `out` (the tiny run standing in
    for `make run`), so each file a command reads comes from a command before it."""
    out, _, _ = first_run
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / "out").symlink_to(out)
    assert (work / CLI).exists(), f"{CLI} is not installed in {sys.prefix}"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("CIFAR10_DATA", None)
    ran = []
    for line, argv in zip(runnable_lines(), runnable_commands()):
        args = as_cli_args(argv)
        if args is not None and (args[0] in ("run", "local-kfp", "rollback") or "--wait" in args):
            continue
        done = subprocess.run(
            ["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"{line}:\n{done.stderr[-3000:]}"
        ran.append(argv[1] if args is None else args[0])
    assert {"predict", "-c", "compile", "submit", "report", "status", "gc"} <= set(ran), ran
