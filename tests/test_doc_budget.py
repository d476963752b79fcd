"""The documentation stays readable: the README and docs/performance.md at most 2,500 words
each, all of docs/ at most 12,000. A page that grows past its budget needs a cut elsewhere."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _words(*paths: Path) -> int:
    return sum(len(path.read_text().split()) for path in paths)


@pytest.mark.parametrize(
    "pages, budget",
    [
        (["README.md"], 2500),
        (["docs/performance.md"], 2500),
        ([str(p.relative_to(REPO_ROOT)) for p in sorted((REPO_ROOT / "docs").glob("*.md"))], 12000),
    ],
    ids=["README", "performance", "docs"],
)
def test_the_docs_stay_within_their_word_budget(pages, budget):
    assert len(pages) >= 1
    words = _words(*(REPO_ROOT / page for page in pages))
    assert words <= budget, f"{', '.join(pages)}: {words} words, budget {budget}"
