"""Every documentation reference in the code's strings (error messages, help texts) leads
somewhere: `docs/NAME.md` exists, and `README "Section"` / `README, Section` names a heading
of the README. A user told to read a section that is not there is stuck."""

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pipeline", "components", "benchmarks")
DOC_FILE = re.compile(r"\bdocs/([\w-]+\.md)")
README_SECTION = re.compile(r'README(?:, |\s+")([A-Z][\w ]*?)(?:"|\)|:|$)')


def _strings(path: Path) -> list[str]:
    """The module's string constants, f-strings' literal parts included (not comments)."""
    tree = ast.parse(path.read_text())
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _references() -> list[tuple[str, str, str]]:
    found = []
    for folder in SOURCES:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            where = str(path.relative_to(REPO_ROOT))
            for text in _strings(path):
                found += [(where, "doc", name) for name in DOC_FILE.findall(text)]
                found += [(where, "readme", title) for title in README_SECTION.findall(text)]
    return found


def _readme_headings() -> set[str]:
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    return {line.lstrip("#").strip() for line in lines if line.startswith("#")}


def test_the_scan_finds_references():
    """The scan itself works: the code does point users at docs (else the next test is
    empty), and both forms of a README reference are recognised."""
    assert {kind for _, kind, _ in _references()} >= {"doc"}
    assert README_SECTION.findall('pass an image with one (README "Two stacks"), or') == [
        "Two stacks"
    ]
    assert README_SECTION.findall("(see README, Kubeflow Pipelines)") == ["Kubeflow Pipelines"]
    assert README_SECTION.findall("(see README, Kubeflow: several workers)") == ["Kubeflow"]


@pytest.mark.parametrize("where, kind, target", _references())
def test_every_reference_exists(where, kind, target):
    if kind == "doc":
        assert (REPO_ROOT / "docs" / target).is_file(), f"{where}: docs/{target} does not exist"
    else:
        assert target.strip() in _readme_headings(), (
            f'{where}: README has no section "{target}" (sections: {sorted(_readme_headings())})'
        )


def _named_tests() -> list[tuple[str, str]]:
    """(page, name) for every test file or test function the guarantee tables name."""
    found = []
    for page in ("README.md", "docs/reliability.md"):
        text = (REPO_ROOT / page).read_text()
        found += [(page, name) for name in re.findall(r"\btests/\w+\.py\b", text)]
        found += [(page, name) for name in re.findall(r"\btest_\w+\b(?!\.py)", text)]
    return sorted(set(found))


def test_the_guarantee_tables_name_tests():
    assert len(_named_tests()) > 10


@pytest.mark.parametrize("page, name", _named_tests())
def test_every_test_a_guarantee_names_exists(page, name):
    """A guarantee is only as good as its test: each one the tables name must exist."""
    if name.startswith("tests/"):
        assert (REPO_ROOT / name).is_file(), f"{page} names {name}, which does not exist"
        return
    sources = "\n".join(p.read_text() for p in (REPO_ROOT / "tests").glob("test_*.py"))
    assert f"def {name}(" in sources, f"{page} names {name}, which no test file defines"
