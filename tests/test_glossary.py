"""Appendix B: every abbreviation the pages use is in the glossary, and the page lists them all.

The glossary (``snippets/glossary.md``) gives every page its hover texts and is listed,
sorted, on ``docs/glossary.md`` at build time. An upper-case token of two or more letters
in a page's prose (outside code, math, links' targets, HTML and shortcodes) must be one of
its terms, unless it is a name rather than an abbreviation (``NOT_ABBREVIATIONS``).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "overrides" / "hooks"))

from lab_site import LabError  # noqa: E402
from lab_site.generated import glossary, glossary_terms  # noqa: E402

GLOSSARY = REPO / "snippets" / "glossary.md"

#: Upper-case words that are names, not abbreviations a reader could expand.
NOT_ABBREVIATIONS = {
    "AMD": "a company's name (it no longer stands for anything on its products)",
    "NVIDIA": "a company's name, not an abbreviation",
    "README": "a file's name (a repository's front page), not an abbreviation",
    "JAX": "a library's name; its documentation does not expand it",
    "GA100": "a chip's name (the A100's die), defined where the page uses it",
    "GH100": "a chip's name (the H100's die), defined where the page uses it",
    "MI300X": "a product's name (AMD Instinct MI300X)",
    "IF": "a CUDA graph conditional node's kind, named as the CUDA Programming Guide names it",
    "WHILE": "a CUDA graph conditional node's kind, named as the CUDA Programming Guide names it",
}

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
#: Two or more capitals (digits may follow or sit between), an optional plural s or a /s rate.
TOKEN = re.compile(r"(?<![\w/.#-])[A-Z][A-Z0-9]*[A-Z][A-Z0-9]*(?:/s|s)?(?![\w-])")


def prose(markdown: str) -> str:
    """A page's text without fenced code, inline code, math, comments, HTML tags and URLs."""
    kept, fence = [], None
    for line in markdown.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        kept.append(line)
    text = "\n".join(kept)
    for pattern in (r"<!--.*?-->", r"(`+).*?\1", r"\\\(.*?\\\)", r"\\\[.*?\\\]", r"\$\$.*?\$\$", r"\$[^$\n]+\$",
                    r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)", r"<[^>]+>", r"https?://\S+", r"^\*\[[^\]]+\]:.*$"):
        text = re.sub(pattern, " ", text, flags=re.S | re.M)
    return text


def tokens(markdown: str) -> set[str]:
    return set(TOKEN.findall(prose(markdown)))


def test_the_scanner_finds_abbreviations_only_in_prose():
    page = """# GPU and NCCL

Text with `CODE` and $\\mathrm{FLOP}$ and [a LINK](https://example.com/ABC) and TFLOP/s.
<!-- lab:value stack.roofline SMX -->
```python
XYZ = 1
```
"""
    assert tokens(page) == {"GPU", "NCCL", "LINK", "TFLOP/s"}


def test_every_abbreviation_of_every_page_is_in_the_glossary():
    terms = {term for term, _ in glossary_terms(GLOSSARY.read_text(encoding="utf-8"))}
    missing: dict[str, list[str]] = {}
    for page in sorted((REPO / "docs").rglob("*.md")):
        for token in tokens(page.read_text(encoding="utf-8")):
            if token in terms or token in NOT_ABBREVIATIONS or (token.endswith("/s") and token[:-2] in terms):
                continue  # GB/s reads as GB per second
            missing.setdefault(token, []).append(page.relative_to(REPO).as_posix())
    assert not missing, "add these to snippets/glossary.md (or, for a name, to NOT_ABBREVIATIONS): " + "; ".join(
        f"{t} ({', '.join(pages)})" for t, pages in sorted(missing.items()))


def test_names_that_are_not_abbreviations_are_still_used():
    used = set().union(*(tokens(p.read_text(encoding="utf-8")) for p in (REPO / "docs").rglob("*.md")))
    assert not set(NOT_ABBREVIATIONS) - used, "drop names no page uses any more"


def test_the_glossary_page_lists_every_term_sorted():
    text = GLOSSARY.read_text(encoding="utf-8")
    terms = glossary_terms(text)
    table = glossary(text)
    rows = re.findall(r"^\| \*\*(.+?)\*\* \| (.+) \|$", table, re.M)
    assert [t for t, _ in rows] == [t for t, _ in terms]
    assert [t.casefold() for t, _ in rows] == sorted(t.casefold() for t, _ in rows)
    assert len(rows) == len(text.strip().splitlines())
    assert "<!-- lab:generated glossary -->" in (REPO / "docs" / "glossary.md").read_text(encoding="utf-8")


def test_a_line_that_is_not_an_abbreviation_stops_the_glossary():
    with pytest.raises(LabError, match="glossary.md:2 is not an abbreviation"):
        glossary_terms("*[GPU]: Graphics processing unit\nGPU - graphics processing unit\n")


def test_every_concept_says_what_it_is_and_links_to_where_the_book_teaches_it(built_site):
    import re

    page = (built_site / "glossary" / "index.html").read_text(encoding="utf-8")
    concepts = re.search(r'<h2 id="concepts">.*?<dl>(.*?)</dl>', page, re.S)
    assert concepts, "the glossary has a Concepts section with a definition list"
    entries = re.findall(r"<dt>(.*?)</dt>\s*<dd>(.*?)</dd>", concepts.group(1), re.S)
    assert len(entries) >= 20
    names = [re.sub(r"<[^>]+>", "", name) for name, _ in entries]
    assert names == sorted(names, key=str.casefold), "alphabetical, as a reader looks them up"
    for name, body in entries:
        links = re.findall(r'href="([^"]+)"', body)
        assert links, f"{name}: no link to where it is taught"
        for href in links:
            path, _, anchor = href.partition("#")
            target = (built_site / "glossary" / path / "index.html").resolve()
            assert target.is_file(), f"{name}: {href} is not a page"
            if anchor:
                assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), f"{name}: {href} has no such section"
