"""The documentation stays readable: the README at most 2,400 words, docs/performance.md
2,500, the hand-written docs/ at most 10,500. A page that grows past its budget needs a cut
elsewhere. What `make bench` writes into docs/performance.md (benchmarks/bench_docs.py, one
section per CPU kind) is measured output, not prose, so it is not counted as hand-written;
a section entered by hand is."""

import re
from pathlib import Path

import pytest

from benchmarks import bench_docs

REPO_ROOT = Path(__file__).resolve().parents[1]
GENERATED = "Written by `make bench`; do not edit by hand."


def _words(*paths: Path) -> int:
    return sum(len(path.read_text().split()) for path in paths)


def generated_sections(text: str) -> list[str]:
    """The sections `make bench` wrote: their header line is the writer's."""
    return [s for s in bench_docs.sections(text).values() if s.splitlines()[3] == GENERATED]


def hand_written_words(pages: list[Path]) -> int:
    generated = generated_sections((REPO_ROOT / "docs" / "performance.md").read_text())
    return _words(*pages) - sum(len(section.split()) for section in generated)


@pytest.mark.parametrize(
    "pages, budget",
    [(["README.md"], 2400), (["docs/performance.md"], 2500)],
    ids=["README", "performance"],
)
def test_the_pages_stay_within_their_word_budget(pages, budget):
    words = _words(*(REPO_ROOT / page for page in pages))
    assert words <= budget, f"{', '.join(pages)}: {words} words, budget {budget}"


def test_the_hand_written_docs_stay_within_their_word_budget():
    pages = sorted((REPO_ROOT / "docs").glob("*.md"))
    assert len(pages) >= 10
    words = hand_written_words(pages)
    # 10,500 hand-written: with make bench's sections for the three measured CPU kinds
    # (about 400 words each) the pages stay under 11,500 words in all.
    assert words <= 10500, f"docs/: {words} hand-written words, budget 10500"


def test_only_sections_make_bench_wrote_are_left_out():
    """Each section left out names its generator, commit and machine, as
    bench_docs.render_section writes them, and only that module writes the header."""
    sections = generated_sections((REPO_ROOT / "docs" / "performance.md").read_text())
    assert len(sections) >= 3
    for section in sections:
        assert re.search(r"^\| `[\w-]+` \| .* \| `make bench`, \d{4}-\d\d-\d\d \|$", section, re.M)
        assert re.search(r"^- commit [0-9a-f]{7,40}, \d{4}-\d\d-\d\d$", section, re.M)
        assert re.search(r"^- CPU: .+, \d+ cores; flags: ", section, re.M)
    writers = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("pipeline", "components", "benchmarks")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if GENERATED in path.read_text()
    ]
    assert writers == ["benchmarks/bench_docs.py"]


def test_a_hand_entered_section_counts_as_hand_written():
    def section(kind: str, header: str) -> str:
        body = f"### `{kind}`: CPU\n\n{header}\n\n| a | b |\n"
        return f"<!-- bench:{kind}:start -->\n{body}<!-- bench:{kind}:end -->\n"

    page = section("avx2-float32", GENERATED) + section("avx512-float32", "Entered by hand.")
    assert generated_sections(page) == [section("avx2-float32", GENERATED)]
