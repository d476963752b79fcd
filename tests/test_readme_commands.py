"""The README's command blocks marked `<!-- runnable -->` compose in the order shown: every
command's flags parse with the CLI's own parser, every file a command reads was written by a
command before it, and the cheap ones run on tiny data (the `run` itself is the session's
tiny run, `first_run`; `submit --wait` needs Vertex AI and `local-kfp` has its own tests)."""

import glob
import re
import shlex
from pathlib import Path

import pytest

import cifar_fixtures as fx
from conftest import cli

REPO_ROOT = Path(__file__).resolve().parents[1]
CLI = ".venv/bin/cifar10-pipeline"
pytestmark = pytest.mark.integration


def runnable_commands() -> list[list[str]]:
    """Each command of the marked blocks, in order, as argv (comments and `\\` folded)."""
    text = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"<!-- runnable -->\n```bash\n(.*?)```", text, flags=re.S)
    commands = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("   #", 1)[0].strip()
            if line:
                commands.append(shlex.split(line))
    return commands


def as_cli_args(argv: list[str]) -> list[str]:
    """The cifar10-pipeline arguments a README command amounts to (`make local-kfp ARGS=`)."""
    if argv[0] == CLI:
        return argv[1:]
    assert argv[:2] == ["make", "local-kfp"], argv
    [args] = [a.removeprefix("ARGS=") for a in argv[2:] if a.startswith("ARGS=")]
    return ["local-kfp", *shlex.split(args)]


def test_the_readme_has_runnable_blocks_for_every_command():
    from pipeline.cli import build_parser

    used = {as_cli_args(argv)[0] for argv in runnable_commands()}
    subcommands = build_parser()._subparsers._group_actions[0].choices
    assert used == set(subcommands), f"no runnable example for {set(subcommands) - used}"


@pytest.mark.parametrize("argv", runnable_commands(), ids=lambda argv: " ".join(argv[:3]))
def test_every_flag_parses(argv):
    from pipeline.cli import build_parser

    build_parser().parse_args(as_cli_args(argv))  # SystemExit(2) on an unknown flag


def _written_by(args: list[str]) -> set[str]:
    """Paths a command writes that a later one may read."""
    written = set()
    if args[0] == "run":
        out = args[args.index("--output-dir") + 1]
        written |= {out, f"{out}/serving/cifar10"}
    if args[0] == "compile":
        written.add(args[args.index("--output") + 1])
    return written


def _read_by(args: list[str]) -> set[str]:
    read = set()
    if "--model-dir" in args:
        read.add(args[args.index("--model-dir") + 1])
    if args[0] in ("submit", "local-kfp", "report"):
        read.add(args[1])
    return read


def test_each_command_reads_only_what_an_earlier_one_wrote():
    written: set[str] = set()
    targets = {}
    for argv in runnable_commands():
        args = as_cli_args(argv)
        missing = _read_by(args) - written
        assert not missing, f"{' '.join(argv)} reads {missing}, which no earlier command writes"
        if args[0] == "compile":
            targets[args[args.index("--output") + 1]] = args[args.index("--target") + 1]
        if args[0] == "local-kfp":  # the file's target must be the one it is run as
            target = args[args.index("--target") + 1] if "--target" in args else "kubeflow"
            assert targets[args[1]] == target, f"{' '.join(argv)}: compiled for {targets[args[1]]}"
        written |= _written_by(args)


def test_the_cheap_commands_run_in_order_on_tiny_data(first_run, tmp_path):
    """`run` is the session's tiny run (`first_run`: the tiny archive, fast training);
    predict, report, both compiles and submit --dry-run run as written, in its folder."""
    out, _, _ = first_run
    photos = tmp_path / "photos"
    photos.mkdir()
    for index, image in enumerate(fx.make_images(fx.balanced_labels(1))[:3]):
        from PIL import Image

        Image.fromarray(image).save(photos / f"{index}.png")
    for argv in runnable_commands():
        args = as_cli_args(argv)
        if args[0] in ("run", "local-kfp") or "--wait" in args:
            continue
        args = [str(out) if a == "out" else a.replace("out/", f"{out}/", 1) for a in args]
        args = [str(tmp_path / a) if a.endswith(".yaml") else a for a in args]
        expanded = []
        for a in args:  # the shell's glob
            expanded += sorted(glob.glob(str(tmp_path / a))) if "*" in a else [a]
        done = cli(*expanded)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stderr[-3000:]}"
