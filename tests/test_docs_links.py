"""Every relative link in README.md and docs/ names a file of the checkout and, with #anchor, a
heading of that file: a moved module or renamed section fails here, not for a reader."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def test_every_relative_link_resolves():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert [b for page in pages for b in broken_links(page)] == []


def test_the_check_sees_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading) [gone](missing.md) [bad](other.md#nope)\n")
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nope (no such heading)",
    ]
