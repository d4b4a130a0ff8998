"""The README and docs/ link to each other by file and heading (the README's claims link to the section of
docs/benchmarks.md that holds today's figure); a renamed heading or moved section must not leave a link that
lands at the top of a page, or nowhere."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, code marks and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page; a repeated heading gets -1, -2, … as on GitHub."""
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6} (.*)", line)
        if heading:
            name = slug(heading.group(1))
            count = seen.get(name, 0)
            seen[name] = count + 1
            found.add(name if count == 0 else f"{name}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """Links outside code: fenced blocks and inline code show link syntax, they do not link."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_every_relative_link_in_the_readme_and_docs_names_a_file_that_exists():
    missing = [
        f"{page.relative_to(ROOT)} → {target}"
        for page in PAGES
        for target in relative_links(page)
        if target.partition("#")[0] and not (page.parent / target.partition("#")[0]).exists()
    ]
    assert missing == []


def test_every_link_to_a_heading_names_a_heading_its_page_has():
    broken = []
    for page in PAGES:
        for target in relative_links(page):
            path, _, fragment = target.partition("#")
            dest = page.parent / path if path else page
            if fragment and dest.suffix == ".md" and dest.exists() and fragment not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert broken == []
