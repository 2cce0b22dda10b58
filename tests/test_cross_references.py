"""A page's "Chapter N" names the chapter the navigation calls N.

The chapters are numbered in mkdocs.yml's nav ("5. CUDA Graphs ...: cuda-graphs.md"); a link
whose text says "Chapter N" must lead to that page, and a bare "Chapter N" must name a chapter
that exists. (A review found "CUDA Graphs, Chapter 6" on a page, where Graphs are Chapter 5.)
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

#: "- 5. CUDA Graphs ...: cuda-graphs.md", or quoted where the title has a colon.
NAV_ENTRY = re.compile(r'^\s*-\s*(?:"(\d+)\.[^"]*"|(\d+)\.[^:]*):\s*([\w-]+\.md)\s*$', re.M)
LINK = re.compile(r"\[([^\]]*?\bChapter (\d+)\b[^\]]*)\]\(([\w-]+\.md)(?:#[^)]*)?\)")
MENTION = re.compile(r"\bChapter (\d+)\b")


def chapter_pages() -> dict[str, int]:
    """page -> its chapter number, from the nav."""
    nav = (REPO / "mkdocs.yml").read_text("utf-8").split("\nnav:", 1)[1]
    return {page: int(quoted or plain) for quoted, plain, page in NAV_ENTRY.findall(nav)}


def wrong_references(text: str, pages: dict[str, int]) -> list[str]:
    """Each link or mention of a chapter that the nav contradicts.

    >>> pages = {"cuda-graphs.md": 5, "collectives.md": 6, "stack.md": 1}
    >>> wrong_references("see [Chapter 6](cuda-graphs.md#x) and Chapter 1", pages)
    ['[Chapter 6](cuda-graphs.md) leads to Chapter 5']
    >>> wrong_references("Chapter 12 says", pages)
    ['Chapter 12: no such chapter']
    """
    problems = [f"[{label}]({page}) leads to Chapter {pages[page]}"
                for label, number, page in LINK.findall(text)
                if page in pages and pages[page] != int(number)]
    known = set(pages.values())
    problems += [f"Chapter {n}: no such chapter" for n in dict.fromkeys(MENTION.findall(text)) if int(n) not in known]
    return problems


def test_the_nav_numbers_nine_chapters():
    assert sorted(chapter_pages().values()) == list(range(1, 10))


def test_every_chapter_reference_names_the_right_chapter():
    pages = chapter_pages()
    problems = [f"{path.name}: {p}" for path in sorted(DOCS.glob("*.md"))
                for p in wrong_references(path.read_text("utf-8"), pages)]
    assert not problems, "\n".join(problems)


def test_a_wrong_reference_is_caught():
    assert wrong_references("[Chapter 6](cuda-graphs.md)", chapter_pages())
