"""`make bench` writes its figures into the docs: its own CPU kind's section of
docs/performance.md and nothing else there, atomically, and the README's timing table is
always the page's summary rows (a hand edit of one without the other fails here)."""

import os
from pathlib import Path

import pytest

from benchmarks import bench_docs

REPO_ROOT = Path(__file__).resolve().parents[1]
FACTS = {"commit": "abc1234", "date": "2026-12-02", "os": "Debian 12", "stack": "Python 3.10"}


def _machine(kind: str, model: str = "Test CPU") -> bench_docs.Machine:
    return bench_docs.Machine(kind, "GenuineTest", model, "family 6 model 1", ("avx2",), 2, "")


def _results(wall: float = 300.0, accuracy: float = 0.8411) -> dict:
    summary = {
        "stage_seconds": {"Cifar10ExampleGen": 11.0, "Trainer": 250.0, "Evaluator": 25.0},
        "history": [{"seconds": 50.0}, {"seconds": 48.0}, {"seconds": 47.0}],
        "fit_seconds": 240.0,
        "load_seconds": 2.0,
        "export_seconds": 1.5,
        "trainer_seconds": 250.0,
        "training_flops": 2.68e13,
        "total_seconds": wall - 9,
        "eval_accuracy": accuracy,
        "blessed": True,
        "precision": "float32",
        "precision_reason": "CPU Test CPU: no native bf16 (bf16 would be emulated)",
    }
    return {
        "pipeline": {"summary": summary, "wall_seconds": wall, "time_to_80_seconds": 200.0},
        "peak": {"conv3x3_gflops": 118.0, "matmul_gflops": 149.0, "python_seconds": 2.0},
        "classic": {"seconds_per_50k_epoch": 90.0},
        "probe": {
            "settings": {
                "default": {"images_per_second": 800.0},
                "fp32": {"images_per_second": 780.0},
            }
        },
        "serving": "model: x\none image   p50 7.70 ms   p99 14.7 ms\nbatch of 64: 331 images/s",
    }


def _page(*kinds: str) -> str:
    parts = ["# Performance\n\nProse before the sections.\n\n"]
    for number, kind in enumerate(kinds):
        section = bench_docs.render_section(
            _results(wall=400.0 + number), _machine(kind, f"CPU {number}"), FACTS
        )
        parts.append(section + "\nNotes between sections.\n\n")
    parts.append("## What was tried\n\n| try | effect |\n|---|---|\n| a | b |\n")
    return "".join(parts)


def _readme(page: str) -> str:
    return "# Project\n\nIntro.\n\n" + bench_docs.readme_table(page) + "\nAfter the table.\n"


@pytest.fixture
def docs(tmp_path):
    page = _page("avx2-float32", "avx512-bf16-amx", "avx512-float32")
    performance, readme = tmp_path / "performance.md", tmp_path / "README.md"
    performance.write_text(page)
    readme.write_text(_readme(page))
    return performance, readme


def test_writer_replaces_only_its_own_kinds_section(docs):
    performance, readme = docs
    before = performance.read_text()
    old = bench_docs.sections(before)
    kind = bench_docs.write_docs(
        _results(wall=333.0), performance, readme, _machine("avx512-bf16-amx", "New CPU"), FACTS
    )
    after = performance.read_text()
    new = bench_docs.sections(after)
    assert kind == "avx512-bf16-amx" and list(new) == list(old)
    assert new["avx2-float32"] == old["avx2-float32"]
    assert new["avx512-float32"] == old["avx512-float32"]
    assert (
        new["avx512-bf16-amx"] != old["avx512-bf16-amx"] and "| 333 s |" in new["avx512-bf16-amx"]
    )
    # Everything outside that one section is byte-identical.
    start = before.index(old["avx512-bf16-amx"])
    assert after[:start] == before[:start]
    assert (
        after[start + len(new["avx512-bf16-amx"]) :]
        == before[start + len(old["avx512-bf16-amx"]) :]
    )
    # The README: only its table changed, and it carries the new row.
    text = readme.read_text()
    assert text.startswith("# Project\n\nIntro.\n\n") and text.endswith("\nAfter the table.\n")
    assert "| `avx512-bf16-amx` | New CPU, 2 cores | float32 | 333 s | 84.11% |" in text
    assert bench_docs.check(performance, readme) == ""


def test_the_time_outside_the_fit_is_also_given_in_the_hosts_python_speed():
    # 300 s wall - 240 s fit = 60 s outside the fit, 30 times the host's 2.0 s
    section = bench_docs.render_section(_results(), _machine("avx2-float32"), FACTS)
    assert "| everything but the fit | 60 s: " in section
    assert (
        "| single-threaded Python: sum(range(10**8)) | 2.00 s "
        "(everything but the fit = 30 times that) |" in section
    )
    older = _results()
    del older["peak"]["python_seconds"]  # a bench.json from before the yardstick
    section = bench_docs.render_section(older, _machine("avx2-float32"), FACTS)
    assert "| single-threaded Python: sum(range(10**8)) | not measured |" in section


def test_the_model_aware_checks_cost_is_a_row_when_measured():
    results = _results()
    assert "model-aware checks" not in bench_docs.render_section(
        results, _machine("avx2-float32"), FACTS
    )  # a bench whose pipeline pushed nothing measures none
    results["model_checks"] = {
        "images": 50000, "scored": 4500, "labels_not_judged": "", "label_seconds": 2.5,
        "copy_seconds": 0.5, "reference_seconds": 3.0, "total_seconds": 6.0,
    }  # fmt: skip
    section = bench_docs.render_section(results, _machine("avx2-float32"), FACTS)
    assert (
        "| model-aware checks, a next night (s) | 6.0 = labels 2.5 (4,500 scored) + copies 0.5 "
        "(50,000 images, exact and near) + reference classes 3.0 |" in section
    )  # a bench.json from before the memory figure
    results["model_checks"]["peak_growth_mb"] = 612.4
    section = bench_docs.render_section(results, _machine("avx2-float32"), FACTS)
    assert "reference classes 3.0; peak memory +612 MB |" in section


def test_a_new_kind_is_added_after_the_last_section(docs):
    performance, readme = docs
    before = performance.read_text()
    bench_docs.write_docs(_results(), performance, readme, _machine("aarch64-float32"), FACTS)
    after = performance.read_text()
    assert list(bench_docs.sections(after)) == [
        "avx2-float32",
        "avx512-bf16-amx",
        "avx512-float32",
        "aarch64-float32",
    ]
    last_end = before.index("<!-- bench:avx512-float32:end -->\n") + len(
        "<!-- bench:avx512-float32:end -->\n"
    )
    assert after.startswith(before[:last_end]) and after.endswith(before[last_end:])
    assert bench_docs.check(performance, readme) == ""


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "performance.md"
    target.write_text("old\n")

    def broken_replace(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        bench_docs.atomic_write(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["performance.md"]  # no temporary left


def test_a_readme_without_markers_changes_neither_file(docs):
    performance, readme = docs
    readme.write_text("# Project\n\nNo table here.\n")
    page = performance.read_text()
    with pytest.raises(bench_docs.DocsError):
        bench_docs.write_docs(_results(), performance, readme, _machine("avx2-float32"), FACTS)
    assert performance.read_text() == page
    assert readme.read_text() == "# Project\n\nNo table here.\n"


def test_the_repositorys_readme_table_is_the_performance_pages_summary_rows():
    performance, readme = REPO_ROOT / "docs" / "performance.md", REPO_ROOT / "README.md"
    assert bench_docs.check(performance, readme) == ""
    kinds = bench_docs.sections(performance.read_text())
    assert {"avx2-float32", "avx512-bf16-amx", "avx512-bf16"} <= set(kinds)
    # every figure on the page is `make bench`'s: no section entered by hand
    for kind, section in kinds.items():
        assert "Written by `make bench`; do not edit by hand." in section, kind
        assert "| `make run`, " not in section, kind


def test_a_hand_edit_of_one_side_is_caught(docs, tmp_path):
    performance, readme = docs
    page = performance.read_text()
    performance.write_text(page.replace("| 400 s |", "| 390 s |", 1))
    assert bench_docs.check(performance, readme) != ""
    performance.write_text(page)
    readme.write_text(readme.read_text().replace("| 401 s |", "| 300 s |", 1))
    assert bench_docs.check(performance, readme) != ""


@pytest.mark.parametrize(
    ("flags", "isa", "kind"),
    [
        (("avx2", "fma"), "", "avx2-float32"),
        (("avx2", "avx512f"), "", "avx512-float32"),
        (("avx2", "avx512f", "avx512_bf16"), "", "avx512-bf16"),
        (("avx2", "avx512f", "avx512_bf16", "amx_bf16"), "", "avx512-bf16-amx"),
        (("avx2", "avx512f", "avx512_bf16", "amx_bf16"), "AVX2", "avx512-bf16-amx-onednn-avx2"),
        ((), "", "aarch64-float32"),
    ],
)
def test_cpu_kind(flags, isa, kind):
    assert bench_docs.cpu_kind(flags, isa, "aarch64") == kind


def test_detect_machine_reads_cpuinfo(tmp_path, monkeypatch):
    """Reads the CPU from cpuinfo; the stack suffix has its own test below, so the stack is
    pinned here (CI runs this file on both stacks)."""
    from components.runtime import stack

    monkeypatch.setattr(stack, "running_stack", lambda: stack.LEGACY)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: 1\n"
    )
    machine = bench_docs.detect_machine(str(cpuinfo), {})
    assert machine.kind == "avx2-float32"
    assert (machine.vendor, machine.model, machine.family_model) == (
        "AuthenticAMD",
        "AMD EPYC 7B13",
        "family 25 model 1",
    )
    assert machine.flags == ("avx2", "fma")


def test_a_host_without_git_names_the_commit_unknown(monkeypatch, tmp_path):
    """An image or root filesystem copied without git (the Debian 13 check, a container) still
    prints its measurement line: the commit is unknown, not a crash."""
    monkeypatch.setenv("PATH", str(tmp_path))
    facts = bench_docs.run_facts()
    assert facts["commit"] == "unknown"
    assert bench_docs.measured_on().startswith("commit unknown, ")


def test_a_copied_tree_names_the_commit_it_was_copied_from(monkeypatch, tmp_path):
    """The Debian 13 bench runs a copy without git; the script that copies it says which commit
    (CIFAR10_SOURCE_COMMIT), and a figure carries it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(bench_docs.SOURCE_COMMIT_VARIABLE, "ffbe507 with uncommitted changes")
    assert bench_docs.run_facts()["commit"] == "ffbe507 with uncommitted changes"


def test_the_current_stack_has_its_own_section_beside_the_legacy_ones(tmp_path, monkeypatch):
    """The same CPU measured on TF 2.21 must not overwrite its TF 2.16 figures."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: avx2 fma\n")
    from components.runtime import stack

    monkeypatch.setattr(stack, "running_stack", lambda: stack.LEGACY)
    assert bench_docs.detect_machine(str(cpuinfo), {}).kind == "avx2-float32"
    monkeypatch.setattr(stack, "running_stack", lambda: stack.CURRENT)
    assert bench_docs.detect_machine(str(cpuinfo), {}).kind == "avx2-float32-current-stack"


def test_a_saved_bench_is_written_as_the_machine_and_stack_that_measured_it(docs):
    """`python -m benchmarks.bench_docs BENCH_JSON` on another host (the Debian 13 bench's
    results written from the host) keeps the measuring machine, stack and commit."""
    performance, readme = docs
    measured = bench_docs.measured_facts(_machine("avx2-float32-current-stack", "D13 CPU"), FACTS)
    results = {**_results(wall=222.0), "measured": measured}
    kind = bench_docs.write_docs(results, performance, readme)
    assert kind == "avx2-float32-current-stack"
    section = bench_docs.sections(performance.read_text())[kind]
    assert "| 222 s |" in section and "D13 CPU" in section and "abc1234" in section
    assert "| `avx2-float32-current-stack` | D13 CPU, 2 cores |" in readme.read_text()
