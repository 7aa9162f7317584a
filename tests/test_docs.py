"""The README and the pages under docs/ link to each other and to the repository's files: every
relative link must name a file that exists and, where it names an anchor of a Markdown file, a
heading of that file (GitHub's slugs), so that moving a section cannot leave a dead link."""
import re
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", page.read_text(), re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)   # code blocks hold no links
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text)
            if not m.group(1).startswith(("http://", "https://", "mailto:"))]


def dead_links(page: Path) -> list[str]:
    dead = []
    for link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            dead.append(f"{link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            dead.append(f"{link} (no such heading)")
    return dead


def test_docs_pages_exist():
    assert (ROOT / "docs" / "benchmarks.md").exists()
    assert len(list((ROOT / "docs" / "domains").glob("*.md"))) >= 9


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert not dead_links(page), f"{page.relative_to(ROOT)}: {dead_links(page)}"


def test_a_dead_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n[ok](#title) [gone](#nowhere) [file](b.md) [code](x.md)\n")
    (tmp_path / "x.md").write_text("# X\n")
    assert dead_links(tmp_path / "a.md") == ["#nowhere (no such heading)", "b.md (no such file)"]
