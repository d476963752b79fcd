"""`make bench`'s figures in the docs, so that every timing there is a command's output.

A bench writes its table into docs/performance.md, in the section of this machine's CPU
kind, and rebuilds the README's timing table from the summary rows of all sections:

    docs/performance.md   <!-- bench:KIND:start --> ... <!-- bench:KIND:end -->
    README.md             <!-- bench-table:start --> ... <!-- bench-table:end -->

A section's summary row is its first table row that starts with "| `KIND` |"; the README
table is SUMMARY_HEADER and those rows, verbatim, in the page's order. Other kinds'
sections are left byte for byte as they were, and each file is replaced atomically (a
temporary file in the same folder, then os.replace), so a failed write leaves the old one.

The figures' rows come from benchmarks/bench_table.py; nothing here imports TensorFlow.
`python -m benchmarks.bench_docs --check` fails when the README's table and the page
disagree; `python -m benchmarks.bench_docs BENCH_JSON` writes the docs from a saved bench.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from benchmarks.bench_table import percent, section_rows
from components.runtime import stack
from components.trainer.hardware import REPORTED_CPU_FLAGS, read_cpu_facts

REPO_ROOT = Path(__file__).resolve().parents[1]
PERFORMANCE_PAGE = REPO_ROOT / "docs" / "performance.md"
# The commit a tree without git was copied from (stack/debian13-check.sh --bench sets it).
SOURCE_COMMIT_VARIABLE = "CIFAR10_SOURCE_COMMIT"
# The current stack's figures are a section of their own: the same CPU on TF 2.21 must not
# overwrite its TF 2.16 ones.
CURRENT_STACK_SUFFIX = "-current-stack"
README = REPO_ROOT / "README.md"
KIND = re.compile(r"[a-z0-9][a-z0-9-]*")
SECTION = re.compile(
    r"<!-- bench:(?P<kind>[a-z0-9-]+):start -->\n.*?<!-- bench:(?P=kind):end -->\n?", re.S
)
TABLE = re.compile(r"<!-- bench-table:start -->\n.*?<!-- bench-table:end -->\n?", re.S)
SUMMARY_HEADER = (
    "| CPU kind | CPU | precision | whole pipeline (`run --no-cache`) | eval accuracy "
    "| commit | measured by |\n|---|---|---|---|---|---|---|\n"
)


class DocsError(ValueError):
    """A page lacks the markers or summary rows this module keeps up to date."""


@dataclass(frozen=True)
class Machine:
    kind: str
    vendor: str  # vendor_id of /proc/cpuinfo, e.g. GenuineIntel, AuthenticAMD
    model: str  # model name
    family_model: str  # "family 6 model 143", where reported
    flags: tuple[str, ...]  # the REPORTED_CPU_FLAGS this CPU has
    cores: int
    onednn_max_isa: str


def cpu_kind(flags, onednn_max_isa: str = "", arch: str = "x86_64") -> str:
    """A stable key for the kind of CPU, from the flags that decide oneDNN's kernels and
    the precision `--precision auto` picks; a ONEDNN_MAX_CPU_ISA cap is part of it."""
    flags = set(flags)
    if "amx_bf16" in flags:
        kind = "avx512-bf16-amx"
    elif "avx512_bf16" in flags:
        kind = "avx512-bf16"
    elif "avx512f" in flags:
        kind = "avx512-float32"
    elif "avx2" in flags:
        kind = "avx2-float32"
    else:
        kind = f"{arch.lower() or 'cpu'}-float32"
    if onednn_max_isa:
        kind += "-onednn-" + onednn_max_isa.lower().replace("_", "-")
    return kind


def _cpuinfo_fields(path: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def detect_machine(cpuinfo_path: str = "/proc/cpuinfo", environ=None) -> Machine:
    environ = os.environ if environ is None else environ
    model, flags = read_cpu_facts(cpuinfo_path)
    fields = _cpuinfo_fields(cpuinfo_path)
    family = fields.get("cpu family", "")
    isa = environ.get("ONEDNN_MAX_CPU_ISA", "")
    suffix = CURRENT_STACK_SUFFIX if stack.running_stack() is stack.CURRENT else ""
    return Machine(
        kind=cpu_kind(flags, isa, platform.machine()) + suffix,
        vendor=fields.get("vendor_id", ""),
        model=model,
        family_model=f"family {family} model {fields.get('model', '?')}" if family else "",
        flags=flags,
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0,
        onednn_max_isa=isa,
    )


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    except OSError:  # no git on this host: a copied tree (an image, the Debian 13 check)
        return ""


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _os_release(path: str = "/etc/os-release") -> str:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # no git on this host: a copied tree (an image, the Debian 13 check)
        return ""
    names = dict(line.partition("=")[::2] for line in lines if "=" in line)
    return names.get("PRETTY_NAME", "").strip().strip('"')


def measured_on() -> str:
    """The first line a measurement prints: the commit (marked when the tree has uncommitted
    changes) and this machine's CPU and kind."""
    machine = detect_machine()
    return (
        f"commit {run_facts()['commit']}, {machine.model} ({machine.kind}, {machine.cores} cores)"
    )


def run_facts() -> dict[str, str]:
    """Commit, date, OS and stack of the bench that is being written down."""
    commit = (
        _git("rev-parse", "--short", "HEAD") or os.environ.get(SOURCE_COMMIT_VARIABLE) or "unknown"
    )
    # The docs a previous bench rewrote do not change what is measured.
    if _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!README.md"):
        commit += " with uncommitted changes"
    return {
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "os": _os_release() or platform.platform(),
        "stack": f"Python {platform.python_version()}, TFX {_version('tfx')}, "
        f"TensorFlow {_version('tensorflow')}",
    }


def _cpu(machine: Machine) -> str:
    cores = f", {machine.cores} cores" if machine.cores else ""
    return f"{machine.model}{cores}"


def render_section(results: dict, machine: Machine, facts: dict[str, str]) -> str:
    """The section of `machine`'s kind, markers included, from a bench's results."""
    s = results["pipeline"]["summary"]
    summary = (
        f"| `{machine.kind}` | {_cpu(machine)} | {s['precision']} | "
        f"{results['pipeline']['wall_seconds']:.0f} s | {percent(s.get('eval_accuracy'))} | "
        f"{facts['commit']} | `make bench`, {facts['date']} |\n"
    )
    flags = " ".join(f for f in REPORTED_CPU_FLAGS if f in machine.flags) or "none reported"
    cap = f"; ONEDNN_MAX_CPU_ISA={machine.onednn_max_isa}" if machine.onednn_max_isa else ""
    lines = [
        f"<!-- bench:{machine.kind}:start -->",
        f"### `{machine.kind}`: {machine.model}",
        "",
        "Written by `make bench`; do not edit by hand.",
        "",
        SUMMARY_HEADER + summary.rstrip("\n"),
        "",
        f"- commit {facts['commit']}, {facts['date']}",
        f"- CPU: {machine.vendor} {machine.model} ({machine.family_model}), "
        f"{machine.cores} cores; flags: {flags}{cap}",
        f"- OS and stack: {facts['os']}; {facts['stack']}",
        "",
        "| what | figure |",
        "|---|---|",
        *(f"| {what} | {figure.replace('|', '/')} |" for what, figure in section_rows(results)),
        "",
        f"<!-- bench:{machine.kind}:end -->",
    ]
    return "\n".join(lines) + "\n"


def sections(text: str) -> dict[str, str]:
    """Kind -> section text (markers included), in the page's order."""
    return {m["kind"]: m.group(0) for m in SECTION.finditer(text)}


def replace_section(text: str, kind: str, section: str) -> str:
    """`text` with `kind`'s section replaced by `section`, or `section` added after the
    last section (at the end when there is none); nothing else changes."""
    if not KIND.fullmatch(kind):
        raise DocsError(f"not a CPU kind: {kind!r}")
    section = section if section.endswith("\n") else section + "\n"
    found = {m["kind"]: m for m in SECTION.finditer(text)}
    if kind in found:
        match = found[kind]
        return text[: match.start()] + section + text[match.end() :]
    if found:
        end = list(found.values())[-1].end()
        return text[:end] + "\n" + section + text[end:]
    return text + ("\n" if text and not text.endswith("\n") else "") + section


def summary_row(kind: str, section: str) -> str:
    for line in section.splitlines():
        if line.startswith(f"| `{kind}` |"):
            return line
    raise DocsError(f"the {kind} section has no summary row starting with | `{kind}` |")


def readme_table(performance_text: str) -> str:
    """The README's timing table: the summary row of every section of the page."""
    found = sections(performance_text)
    if not found:
        raise DocsError("docs/performance.md has no <!-- bench:KIND:start --> sections")
    rows = "".join(summary_row(kind, section) + "\n" for kind, section in found.items())
    return "<!-- bench-table:start -->\n" + SUMMARY_HEADER + rows + "<!-- bench-table:end -->\n"


def replace_readme_table(readme_text: str, table: str) -> str:
    if len(TABLE.findall(readme_text)) != 1:
        raise DocsError("README.md needs exactly one <!-- bench-table:start/end --> pair")
    return TABLE.sub(lambda _: table, readme_text)


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` in one rename; on any failure the old file stays."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def measured_facts(machine: Machine | None = None, facts: dict | None = None) -> dict:
    """What a bench keeps in bench.json of where it ran, so that its docs can be written
    elsewhere (`python -m benchmarks.bench_docs BENCH_JSON`) as the measuring host's."""
    return {"machine": asdict(machine or detect_machine()), "facts": facts or run_facts()}


def write_docs(
    results: dict,
    performance: Path = PERFORMANCE_PAGE,
    readme: Path = README,
    machine: Machine | None = None,
    facts: dict[str, str] | None = None,
) -> str:
    """Writes this bench's section into `performance` and the README table from it.
    Both new texts are built before either file is replaced. Returns the kind written."""
    measured = results.get("measured", {})
    if machine is None and "machine" in measured:
        machine = Machine(**{**measured["machine"], "flags": tuple(measured["machine"]["flags"])})
    machine = machine or detect_machine()
    facts = facts or measured.get("facts")
    page = replace_section(
        Path(performance).read_text(encoding="utf-8"),
        machine.kind,
        render_section(results, machine, facts or run_facts()),
    )
    readme_text = replace_readme_table(Path(readme).read_text(encoding="utf-8"), readme_table(page))
    atomic_write(Path(performance), page)
    atomic_write(Path(readme), readme_text)
    return machine.kind


def check(performance: Path = PERFORMANCE_PAGE, readme: Path = README) -> str:
    """ "" when the README's table is the page's summary rows, else what differs."""
    expected = readme_table(Path(performance).read_text(encoding="utf-8"))
    found = TABLE.findall(Path(readme).read_text(encoding="utf-8"))
    if found != [expected]:
        return (
            "README.md's timing table is not the summary rows of docs/performance.md; "
            "edit the page and run `python -m benchmarks.bench_docs --table`"
        )
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_json", nargs="?", help="write the docs from this bench.json")
    parser.add_argument("--check", action="store_true", help="README table against the page")
    parser.add_argument("--table", action="store_true", help="rewrite the README table only")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        print(problem or "README.md's timing table matches docs/performance.md")
        return 1 if problem else 0
    if args.table:
        page = PERFORMANCE_PAGE.read_text(encoding="utf-8")
        atomic_write(
            README, replace_readme_table(README.read_text(encoding="utf-8"), readme_table(page))
        )
        return 0
    if not args.bench_json:
        parser.error("give BENCH_JSON, --check or --table")
    kind = write_docs(json.loads(Path(args.bench_json).read_text()))
    print(f"wrote the {kind} section of {PERFORMANCE_PAGE} and the table of {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
