"""The reading hook: reading time under every title, and the examples' files in the site."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.hook_support import REPO  # noqa: F401 (puts overrides/hooks on the import path)

import reading  # noqa: E402  (overrides/hooks/reading.py)

PAGES = sorted(p.stem for p in (REPO / "docs").glob("*.md"))


def test_prose_is_the_text_less_listings_tables_diagrams_and_formulas():
    words = " ".join(["word"] * reading.WORDS_PER_MINUTE)  # one minute of prose
    page = (f"<h1>Title</h1><p>{words}</p>"
            "<pre><code>line one\nline two\nline three</code></pre>"
            "<table><tr><td>many words in a table are looked at, not read</td></tr></table>"
            '<pre class="mermaid">flowchart TD; a --> b</pre>'
            '<span class="arithmatex">a formula of several words</span>'
            "<div><pre><code>one\n</code></pre></div>")
    # "Title" is a word too: one minute and one word round up to two.
    assert reading.reading_line(page) == "About 2 minutes of prose · 4 lines of code"
    assert reading.reading_line("<h1>Short</h1><p>a few words</p>") == "About 1 minute of prose"


def _page(src: str, url: str):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src), url=url)


def test_the_reading_time_goes_under_the_first_title_and_example_files_become_links():
    html = ('<h1 id="t">Title</h1><p>See <code>examples/capstone/decode.py</code>.</p>'
            '<div class="highlight"><span class="filename">examples/blas/naming.py</span><pre><code>x\n</code></pre>'
            "</div><h1>Second</h1>")
    out = reading.on_page_content(html, _page("capstone.md", "capstone/"), None, None)
    assert out.index("lab-reading-time") < out.index("Second") and out.count("lab-reading-time") == 1
    assert '<a class="lab-source" href="../examples/capstone/decode.py"' in out
    assert 'href="../examples/blas/naming.py"' in out
    assert 'href="examples/blas/naming.py"' in reading.on_page_content(html, _page("index.md", ""), None, None)


def test_a_page_naming_an_example_file_that_does_not_exist_stops_the_build_in_one_line():
    with pytest.raises(SystemExit, match=r"capstone.md: names examples/capstone/nothing.py, which is not a file"):
        reading.on_page_content("<h1>T</h1><code>examples/capstone/nothing.py</code>", _page("capstone.md", "x/"),
                                None, None)


def test_a_notebook_page_is_left_as_it_is():
    html = "<h1>T</h1><code>examples/capstone/nothing.py</code>"
    assert reading.on_page_content(html, _page("notebooks/x.ipynb", "x/"), None, None) == html


@pytest.mark.parametrize("name", PAGES)
def test_every_page_of_the_built_site_shows_its_reading_time(built_site, name):
    page = built_site / ("index.html" if name == "index" else f"{name}/index.html")
    text = page.read_text(encoding="utf-8")
    assert re.search(r'<p class="lab-reading-time">About \d+ minutes? of prose( · [\d,]+ lines of code)?</p>', text)


def test_every_example_file_a_page_links_to_is_in_the_built_site(built_site):
    linked = 0
    for page in built_site.rglob("index.html"):
        for href in re.findall(r'<a class="lab-source" href="([^"]+)"', page.read_text(encoding="utf-8")):
            target = (page.parent / href).resolve()
            assert target.is_file(), f"{page.relative_to(built_site)} links to {href}, not in the site"
            assert target.read_bytes() == (REPO / href.lstrip("./")).read_bytes()
            linked += 1
    assert linked > 50, "the listings' titles and the file names in the prose are links"


def test_a_chapter_names_the_previous_and_next_pages_above_its_title(built_site):
    text = (built_site / "dispatcher" / "index.html").read_text(encoding="utf-8")
    pager = re.search(r'<nav class="lab-pager".*?</nav>', text, re.S).group(0)
    assert re.search(r'rel="prev">← 1\. From y = x @ w to tensor cores</a>', pager)
    assert re.search(r'rel="next">3\. BLAS: the vocabulary under every matmul →</a>', pager)
    assert text.index("lab-pager") < text.index("<h1")


def _listing(lines: int, title: str | None = "examples/blas/naming.py") -> str:
    spans = "".join(f'<span id="__span-0-{i}">x = {i}\n</span>' for i in range(1, lines + 1))
    head = f'<span class="filename">{title}</span>' if title else ""
    return f'<div class="language-py highlight">{head}<pre><span></span><code>{spans}</code></pre></div>'


def test_a_long_listing_is_folded_under_its_file_name_and_length_and_a_short_one_is_not():
    page = "<h1>T</h1>" + _listing(reading.FOLD_LINES) + _listing(reading.FOLD_LINES + 1) + _listing(40, None)
    out = reading.on_page_content(page, _page("blas.md", "blas/"), None, None)
    summaries = re.findall(r'<details class="lab-listing"><summary>(.*?)</summary>', out)
    assert summaries == [f"examples/blas/naming.py: {reading.FOLD_LINES + 1} lines (open to read)",
                         "the listing: 40 lines (open to read)"]
    assert out.count("x = 1\n") == 3, "folded, not cut: every line is still there"


def test_an_in_depth_section_is_set_apart():
    out = reading.on_page_content('<h1>T</h1><h3 id="in-depth-x">In depth: x</h3><h3 id="y">Y</h3>',
                                  _page("stack.md", "stack/"), None, None)
    assert '<h3 id="in-depth-x" class="lab-depth">In depth: x</h3>' in out and '<h3 id="y">Y</h3>' in out


def test_the_first_warning_mark_of_a_page_says_what_it_means_in_words():
    mark = '<span class="lab-noisy" title="runs differ">⚠</span>'
    out = reading.on_page_content(f"<h1>T</h1><p>{mark} 1 ms and {mark} 2 ms</p>", _page("stack.md", "stack/"),
                                  None, None)
    assert out.count("lab-noisy-words") == 1 and out.index("lab-noisy-words") < out.index("1 ms")
    assert f"differ by more than {reading.NOISY * 100:g} % of their median" in out


def test_every_page_s_title_is_its_name_in_the_navigation(built_site):
    """A reader who picks "9. Capstone: ..." in the sidebar lands on a page of that title."""
    from mkdocs.config import load_config

    nav = load_config(str(REPO / "mkdocs.yml"))["nav"]
    for entry in nav:
        (label, src), = entry.items()
        if isinstance(src, list) and src and isinstance(src[0], str) and src[0].endswith("/index.md"):
            src = src[0]  # a section whose title is its index page's (Appendix A): that page
        if not isinstance(src, str) or not src.endswith(".md") or src == "index.md":
            continue
        page = built_site / src.removesuffix(".md").removesuffix("index") / "index.html"
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", page.read_text(encoding="utf-8"), re.S).group(1)
        shown = re.sub(r"<[^>]+>|¶", "", h1).replace("&para;", "").strip()
        assert shown == label, f"{src}: the page says {shown!r}, the navigation {label!r}"
