"""A page's "Chapter N" names the chapter the navigation calls N.

The chapters are numbered in mkdocs.yml's nav ("5. CUDA Graphs ...: cuda-graphs.md"); a link
whose text says "Chapter N" must lead to that page, a bare "Chapter N" must name a chapter
that exists, and a bare "Chapter N" set beside a chapter's subject ("CUDA Graphs, Chapter 6",
"Chapter 8 (NCCL)") must be that subject's chapter. (A review found "CUDA Graphs, Chapter 6" on
a page, where Graphs are Chapter 5.) Every page under docs/ is read, and every example's
source (docstrings and comments name chapters too).
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
#: What each chapter is about, in words a sentence sets beside its number.
SUBJECTS = {
    1: ("tensor core", "the stack"), 2: ("dispatcher", "dispatch key"), 3: ("BLAS", "cuBLAS"),
    4: ("torch.compile", "Inductor", "Dynamo"), 5: ("CUDA Graph", "graph replay"),
    6: ("NCCL", "collective", "all-reduce"), 7: ("ecosystem", "cuDNN", "cuFFT", "cuSPARSE"),
    8: ("Measuring", "profiler", "Nsight"), 9: ("capstone", "speed of light"),
}
#: "SUBJECT, Chapter N", "SUBJECT (Chapter N)", "Chapter N (SUBJECT", "Chapter N: SUBJECT", "Chapter N, SUBJECT".
BESIDE = re.compile(r"([\w.-]+(?: [\w.-]+){0,2})(?:, | \()Chapter (\d+)\b(?!['’]s)|\bChapter (\d+)(?: \(|: |, )([\w.-]+(?: [\w.-]+){0,2})")


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
    >>> wrong_references("as CUDA Graphs, Chapter 6, showed; NCCL (Chapter 6) and Chapter 5 (CUDA Graphs)", pages)
    ['"as CUDA Graphs, Chapter 6": CUDA Graph is the subject of Chapter 5']
    >>> wrong_references("after a CUDA graph (Chapter 1's best rung)", pages)  # what Chapter 1 did with one
    []
    """
    problems = [f"[{label}]({page}) leads to Chapter {pages[page]}"
                for label, number, page in LINK.findall(text)
                if page in pages and pages[page] != int(number)]
    known = set(pages.values())
    problems += [f"Chapter {n}: no such chapter" for n in dict.fromkeys(MENTION.findall(text)) if int(n) not in known]
    for match in BESIDE.finditer(text):
        before, n_before, n_after, after = match.groups()
        number, words = (int(n_before), before) if n_before else (int(n_after), after)
        said = [c for c, subjects in SUBJECTS.items() for subject in subjects
                if re.search(rf"\b{re.escape(subject)}", words, re.I)]
        if said and number not in said:
            subject = next(x for x in SUBJECTS[said[0]] if re.search(rf"\b{re.escape(x)}", words, re.I))
            problems.append(f'"{match.group(0)}": {subject} is the subject of Chapter {said[0]}')
    return problems


def sources() -> list[Path]:
    """Every page under docs/ and every example's source."""
    return sorted([*DOCS.rglob("*.md"), *(REPO / "examples").rglob("*.py")])


def test_the_nav_numbers_nine_chapters():
    assert sorted(chapter_pages().values()) == list(range(1, 10))


def test_every_chapter_reference_names_the_right_chapter():
    pages = chapter_pages()
    problems = [f"{path.relative_to(REPO)}: {p}" for path in sources()
                for p in wrong_references(path.read_text("utf-8"), pages)]
    assert not problems, "\n".join(problems)


def test_a_wrong_reference_is_caught():
    pages = chapter_pages()
    assert wrong_references("[Chapter 6](cuda-graphs.md)", pages)
    assert wrong_references("replayed as a CUDA graph (Chapter 6)", pages)
    assert wrong_references("Chapter 8 (NCCL) measures", pages)
    assert not wrong_references("replayed as a CUDA graph (Chapter 5)", pages)
    assert not wrong_references("after a CUDA graph (Chapter 9's best rung)", pages)  # what Chapter 9 did


def test_the_sources_read_include_the_appendix_and_the_examples():
    read = {p.relative_to(REPO).parts[:2] for p in sources()}
    assert ("docs", "appendix-records") in read and ("examples", "collectives") in read
