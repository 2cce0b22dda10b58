"""The reading hook: reading time under every title, and the examples' files in the site."""
from __future__ import annotations

import html
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


def test_a_notebook_page_gets_its_links_and_no_reading_time():
    html = "<h1>T</h1><p><code>examples/capstone/decode.py</code></p><pre><code>x = 1\n</code></pre>"
    out = reading.on_page_content(html, _page("notebooks/capstone.ipynb", "notebooks/capstone/"), None, None)
    assert out == html.replace("<code>examples/capstone/decode.py</code>",
                               '<a class="lab-source" href="../../examples/capstone/decode.py" '
                               'title="the whole file, as the book runs it"><code>examples/capstone/decode.py</code></a>')


@pytest.mark.parametrize("name", PAGES)
def test_every_page_of_the_built_site_shows_its_reading_time(built_site, name):
    page = built_site / ("index.html" if name == "index" else f"{name}/index.html")
    text = page.read_text(encoding="utf-8")
    assert re.search(r'<p class="lab-reading-time">About \d+ (minutes? of prose|min main line · \d+ min in depth)'
                     r'( · [\d,]+ lines of code)?</p>', text)


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


def test_an_in_depth_section_is_folded_under_its_own_heading():
    """An "In depth" h2 holds everything to the next h2 (its h3s too, a deeper "In depth" folded
    inside it); an "In depth" h3 stops at the next h3 or h2; a heading inside a block is not a
    boundary; the footnotes never fall into a section; the summary is the heading, id and permalink."""
    page = ('<h1 id="t">T</h1><p>intro</p>'
            '<h2 id="a">A</h2><p>a</p>'
            '<h2 id="old-anchor">In depth: D<a class="headerlink" href="#old-anchor">¶</a></h2><p>d</p>'
            '<h3 id="d-sub">In depth: sub</h3><p>s</p>'
            '<h3 id="e">E</h3><p>e</p><div class="admonition"><h2 id="boxed">boxed</h2></div>'
            '<h2 id="b">B</h2><p>b</p>'
            '<h3 id="x">In depth: x</h3><p>x</p><h4 id="y">Y</h4><p>y</p>'
            '<h3 id="z">Z</h3><p>z</p>'
            '<h2 id="last">In depth: last</h2><p>l</p>'
            '<div class="footnote"><ol><li id="fn:1">f</li></ol></div>')
    out = reading.fold_depth(page)
    note = r'<span class="lab-depth-note" data-search-exclude>About 1 min · folded: open to read</span>'
    assert re.fullmatch(
        '<h1 id="t">T</h1><p>intro</p><h2 id="a">A</h2><p>a</p>'
        '<details class="lab-depth"><summary><h2 id="old-anchor">In depth: D<a class="headerlink" '
        f'href="#old-anchor">¶</a></h2>{note}</summary><p>d</p>'
        f'<details class="lab-depth"><summary><h3 id="d-sub">In depth: sub</h3>{note}</summary><p>s</p></details>'
        '<h3 id="e">E</h3><p>e</p><div class="admonition"><h2 id="boxed">boxed</h2></div></details>'
        '<h2 id="b">B</h2><p>b</p>'
        f'<details class="lab-depth"><summary><h3 id="x">In depth: x</h3>{note}</summary><p>x</p>'
        '<h4 id="y">Y</h4><p>y</p></details><h3 id="z">Z</h3><p>z</p>'
        f'<details class="lab-depth"><summary><h2 id="last">In depth: last</h2>{note}</summary><p>l</p></details>'
        '<div class="footnote"><ol><li id="fn:1">f</li></ol></div>', out), out
    assert reading.fold_depth("<h1>T</h1><h3>Depth, in</h3><p>x</p>") == "<h1>T</h1><h3>Depth, in</h3><p>x</p>"


def test_a_folded_section_s_teaser_says_what_it_holds_in_its_summary(built_site):
    out = reading.fold_depth('<h1 id="t">T</h1><h2 id="a" data-teaser="Why X, and what it costs.">In depth: a</h2>'
                             '<p>body</p>')
    assert '<summary><h2 id="a">In depth: a</h2><span class="lab-depth-teaser">Why X, and what it costs.</span>' in out
    assert "data-teaser" not in out
    # Chapters 6 and 9 give every fold a teaser (their cold readers asked what each holds).
    for chapter in ("collectives", "capstone"):
        page = (built_site / chapter / "index.html").read_text(encoding="utf-8")
        folds = re.findall(r'<details class="lab-depth"><summary>(.*?)</summary>', page, flags=re.S)
        assert folds and all('class="lab-depth-teaser"' in f for f in folds), chapter
        assert "data-teaser" not in page


def test_a_folded_section_s_prose_counts_in_depth_and_its_heading_on_the_main_line():
    words = " ".join(["word"] * reading.WORDS_PER_MINUTE)
    page = reading.fold_depth(f'<h1>Title</h1><p>{words}</p><h2 id="d">In depth: two words</h2>'
                              f"<p>{words} {words}</p><pre><code>a\nb\n</code></pre>")
    counter = reading.count(page)
    assert counter.words == reading.WORDS_PER_MINUTE + 1 + 4  # the title, and the heading: the main line passes it
    assert counter.depth_words == 2 * reading.WORDS_PER_MINUTE and counter.code_lines == 2
    assert reading.reading_line(page) == "About 2 min main line · 2 min in depth · 2 lines of code"
    opened = page.replace('<details class="lab-depth">', '<details class="lab-depth" open="open">')
    assert reading.count(opened).depth_words == 0, "an open section is on the main line"
    out = reading.on_page_content(f'<h1 id="t">Title</h1><h2 id="d">In depth: x</h2><p>{words}</p>',
                                  _page("stack.md", "stack/"), None, None)
    assert '<p class="lab-reading-time">About 1 min main line · 1 min in depth</p>' in out


#: A page with each kind of markup the counters skip the inside of, and each kind that keeps it:
#: a highlighted listing, a table, a drawing, a table holding a listing, tabs of tables, a folded
#: section holding a table and a drawing inside another, headings inside and outside them all.
_MARKUP = ('<h1 id="t">Title &amp; more</h1><p>Some <em>prose</em> words.</p>'
           '<div class="language-py highlight"><pre><span></span><code><span class="k">for</span> x &lt; 3:\n'
           '<span class="w">  </span>pass\n</code></pre></div>'
           '<table><thead><tr><th>words <abbr title="x">here</abbr></th></tr></thead>'
           '<tbody><tr><td><span class="lab-runs">1 ms</span></td></tr></tbody></table>'
           '<figure class="lab-plot"><svg viewBox="0 0 9 9"><g><text>1 ms</text><svg><text>in</text></svg></g></svg></figure>'
           '<table><tr><td><pre><code>a\nb\n</code></pre></td></tr></table>'
           '<div class="tabbed-set"><div class="tabbed-content"><div class="tabbed-block"><table><tr><td>x</td></tr></table>'
           '<p>first tab words</p></div><div class="tabbed-block"><p>second tab words</p>'
           '<pre><code>c\n</code></pre></div></div></div>'
           '<h2 id="d">In depth: a fold</h2><p>folded prose here</p><table><tr><td><h3>not a heading</h3></td></tr></table>'
           '<h3 id="e">Inside</h3><p>more folded prose</p><pre class="mermaid">flowchart TD; a --> b</pre>'
           '<h2 id="f">After</h2><p>main line again</p>')


def test_the_counters_skip_only_markup_whose_inside_they_never_count(monkeypatch):
    """The counters parse each page less the inside of its listings' markup, tables and drawings
    (``_lighter``: a fifth of the tags): the folds, reading time and counts are those of the whole."""
    assert reading._lighter(_MARKUP).count("<") < _MARKUP.count("<") * 3 / 4, "nothing skipped: vacuous"
    assert len(reading._lighter(_MARKUP, blank=True)) == len(_MARKUP), "offsets must stay"
    folded = reading.fold_depth(_MARKUP)
    light = (folded, reading.reading_line(folded), vars(reading.count(folded)).copy())
    monkeypatch.setattr(reading, "_lighter", lambda text, blank=False: text)
    folded = reading.fold_depth(_MARKUP)
    whole = (folded, reading.reading_line(folded), vars(reading.count(folded)).copy())
    assert [light[0], light[1]] == [whole[0], whole[1]]
    keys = ("words", "depth_words", "code_lines")
    assert {k: light[2][k] for k in keys} == {k: whole[2][k] for k in keys}
    assert light[2]["code_lines"] == 4 and "lab-depth" in light[0]  # the second tab's line is unseen


def test_the_script_that_opens_a_folded_section_for_a_link_is_loaded_on_every_page(built_site):
    from mkdocs.config import load_config

    assert "javascripts/depth.js" in [str(s) for s in load_config(str(REPO / "mkdocs.yml"))["extra_javascript"]]
    script = (REPO / "docs" / "javascripts" / "depth.js").read_text(encoding="utf-8")
    assert "hashchange" in script and "document$" in script and ".open = true" in script
    assert (built_site / "javascripts" / "depth.js").is_file()
    assert 'src="../javascripts/depth.js"' in (built_site / "collectives" / "index.html").read_text(encoding="utf-8")


#: Chapters whose main line stays above :data:`MAIN_LINE_MINUTES`, with the reason (none fold further
#: without folding what the chapter's opening promises and its "What to remember" relies on).
LONG_MAIN_LINES = {
    "collectives": (34, "the opening promises NVLink told from PCIe and the network: the section that scales "
                        "the ring from 2 GPUs to 8 and to several hosts, with its calculator, stays on the main "
                        "line, as do the four-GPU section's summary and the protocols' one-line definition"),
    "capstone": (34, "every remaining section is one the opening promises (speed of light, the ladder, the "
                     "time split, int8, the book's kernels with PDL, tensor parallelism)"),
}
MAIN_LINE_MINUTES = 30


@pytest.mark.parametrize("name", [p for p in PAGES if p not in {"index", "glossary", "numbers"}])
def test_every_chapter_s_main_line_reads_in_half_an_hour_with_its_depth_folded(built_site, name):
    text = (built_site / name / "index.html").read_text(encoding="utf-8")
    line = re.search(r'<p class="lab-reading-time">About (\d+) (?:minutes? of prose|min main line'
                     r' · (\d+) min in depth)', text)
    assert line, f"{name}: no reading time"
    limit = LONG_MAIN_LINES.get(name, (MAIN_LINE_MINUTES,))[0]
    assert int(line.group(1)) <= limit, f"{name}: the main line takes {line.group(1)} minutes"
    # Every "In depth" heading is the summary of a closed details.lab-depth, and every such
    # details is summarised by one.
    article = text[text.index("<h1"):text.index("</article>")]
    headings = re.findall(r"<(h[2-4]) id=\"([^\"]+)\"[^>]*>In depth: ", article)
    folded = re.findall(r'<details class="lab-depth"><summary><(h[2-4]) id="([^"]+)"[^>]*>In depth: ', article)
    assert headings == folded, f"{name}: an In depth heading outside a closed details.lab-depth"
    assert bool(folded) == bool(line.group(2)), f"{name}: folded sections and the reading time disagree"
    assert not re.search(r'<details class="lab-depth" open', article)
    # Every in-page link still lands on an element of the page.
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    missing = sorted({h for h in re.findall(r'href="#([^"]+)"', article)} - ids)
    assert not missing, f"{name}: links to #{missing}, which the page no longer has"


def test_the_renamed_in_depth_headings_keep_their_old_anchors(built_site):
    """A heading renamed "In depth: ..." keeps the anchor other pages and old links use."""
    text = (built_site / "collectives" / "index.html").read_text(encoding="utf-8")
    for anchor in ("beyond-one-node", "why-the-profiled-step-is-longer-and-a-bucket-takes-a-millisecond",
                   "inside-nccl-the-ll-ll128-and-simple-protocols"):
        assert re.search(rf'<details class="lab-depth"><summary><h[23] id="{anchor}"', text), anchor
    capstone = (built_site / "capstone" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<details class="lab-depth"><summary><h3 id="is-copy-the-roof"', capstone)


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


# -- the main line: what the reading time counts ------------------------------------------------

def _words(html: str) -> int:
    counter = reading._Counter()
    counter.feed(html)
    counter.close()
    return counter.words


def test_the_reading_time_counts_the_main_line_and_leaves_the_evidence_out():
    assert _words("<p>one two three</p>") == 3
    apparatus = (
        '<p class="lab-provenance">NVIDIA H200 · 132 SMs · driver 580 · 5 runs</p>'
        '<p class="lab-caption">Every row: part sweep, GPUs 2.</p>'
        '<span class="lab-claims"><span class="lab-claim lab-claim--holds" title="t">2 × H200 ✓ 327 GB/s</span></span>'
        '<details class="lab-rows" open="open"><summary>message size 1 KiB · 3 rows</summary>'
        "<table><tr><td>dist.all_reduce 12 µs</td></tr></table></details>"
        '<div class="admonition warning lab-stale"><p class="admonition-title">Measured on an earlier version</p>'
        "<p>Rerun it to refresh them.</p></div>"
    )
    assert _words(f"<p>one two three</p>{apparatus}") == 3
    # A record's stale-code note is known by its title (the records hook writes it as a plain warning).
    stale = ('<div class="admonition warning">\n<p class="admonition-title">'
             f'{reading.STALE_TITLE}</p>\n<p>The code it measured with has changed.</p>\n</div>')
    assert reading.reading_line("<h1>T</h1>" + stale) == "About 1 minute of prose"
    assert _words(reading._STALE_NOTE.sub(r'<div class="admonition warning lab-stale">\1', stale)) == 0
    assert reading.reading_line("<h1>T</h1>" + stale.replace(reading.STALE_TITLE, "Careful")) == \
        "About 1 minute of prose" and _words(stale.replace(reading.STALE_TITLE, "Careful")) == 8, \
        "any other warning is read"


def test_a_folded_block_counts_its_summary_and_its_code_but_not_its_prose():
    closed = ('<details class="question"><summary>Answer (four words)</summary>'
              "<p>a long folded answer nobody reads on the way through</p>"
              "<pre><code>x = 1\ny = 2\n</code></pre></details>")
    opened = '<details class="note" open="open"><summary>Open</summary><p>read this too</p></details>'
    counter = reading._Counter()
    counter.feed(f"<p>before</p>{closed}{opened}<p>after</p>")
    assert counter.words == 1 + 3 + 1 + 3 + 1 and counter.code_lines == 2
    nested = f"<details><summary>outer</summary>{closed}</details>"
    assert _words(nested) == 1, "a summary inside a folded block is folded too"


def test_only_the_first_tab_of_a_tabbed_block_is_on_the_main_line():
    tabs = ('<div class="tabbed-set tabbed-alternate"><input checked="checked" id="__tabbed_1_1" type="radio"/>'
            '<input id="__tabbed_1_2" type="radio"/><div class="tabbed-labels"><label for="__tabbed_1_1">NVIDIA H200'
            '</label><label for="__tabbed_1_2">NVIDIA H100</label></div><div class="tabbed-content">'
            '<div class="tabbed-block"><p>one two</p><pre><code>a\n</code></pre></div>'
            '<div class="tabbed-block"><p>three four five</p><pre><code>b\nc\n</code></pre></div>'
            "</div></div>")
    counter = reading._Counter()
    counter.feed(tabs + "<p>six</p>")
    assert counter.words == 3 and counter.code_lines == 1


def _chapters(built_site):
    for page in sorted(built_site.glob("*/index.html")):
        if page.parent.name == "print_page":  # the print edition: every chapter again, on one page
            continue
        text = page.read_text(encoding="utf-8")
        if 'class="lab-provenance"' in text:  # a chapter with records
            yield page, text


def test_each_chapter_s_reading_time_leaves_out_its_evidence(built_site, monkeypatch):
    """The shown time is the main line's; counted the old way (every word outside listings, tables,
    diagrams and formulas) each chapter with records reads longer."""
    shown_pattern = re.compile(r'<p class="lab-reading-time">About (\d+) min')
    chapters = 0
    for page, text in _chapters(built_site):
        article = text[text.index("<h1"):text.index("</article>")]  # the page's content: from its title
        article = re.sub(r'<p class="lab-reading-time">.*?</p>', "", article)
        shown = int(shown_pattern.search(text).group(1))
        assert shown == int(re.search(r"About (\d+)", reading.reading_line(article)).group(1)), page
        with monkeypatch.context() as m:
            m.setattr(reading, "_NOT_PROSE_CLASSES", {"arithmatex", "mermaid", "lab-plot", "lab-timeline", "lab-diagram"})
            m.setattr(reading, "_STALE_NOTE", re.compile("(?!)()"))
            old = int(re.search(r"About (\d+)", reading.reading_line(article)).group(1))
        assert shown < old, f"{page.parent.name}: {shown} minutes shown, {old} with the evidence counted"
        chapters += 1
    assert chapters >= 9


# -- the examples' sources: shipped, and linked wherever the prose names one ----------------------

def test_every_source_file_of_the_examples_is_shipped_and_no_cache_is(tmp_path):
    shipped = {p.relative_to(reading.EXAMPLES).as_posix() for p in reading.example_files()}
    assert {"collectives/slurm_collectives.sbatch", "lab/memory_needs.json", "collectives/ring_allreduce.py"} <= shipped
    assert not [p for p in shipped if "__pycache__" in p or p.endswith(".pyc")]
    root = tmp_path / "examples"
    (root / "a" / "__pycache__").mkdir(parents=True)
    (root / "a" / "x.py").write_text("")
    (root / "a" / "run.sbatch").write_text("")
    (root / "a" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (root / "a" / "y.pyc").write_bytes(b"")
    (root / "a" / ".hidden").write_text("")
    assert [p.relative_to(root).as_posix() for p in reading.example_files(root)] == ["a/run.sbatch", "a/x.py"]


def test_the_prose_links_example_paths_bare_file_names_and_the_modules_of_commands():
    html = ("<p><code>ring_allreduce.py</code>, <code>examples/collectives/slurm_collectives.sbatch</code>, "
            "<code>python -m examples.capstone.decode --quick</code> and "
            "<code>python -m examples.lab run blas.levels blas.epilogue --out DIR</code>; "
            "<code>output_code.py</code>, <code>__init__.py</code> and <code>records.py</code> stay as they are "
            '(not an example, or not one file), and so does <a href="x"><code>nccl_latency.py</code></a>.</p>'
            "<pre><code>python -m examples.capstone.decode\nring_allreduce.py\n</code></pre>")
    out = reading.link_sources(html, "collectives/", "collectives.md")
    link = '<a class="lab-source" href="../examples/{}" title="the whole file, as the book runs it">{}</a>'
    assert link.format("collectives/ring_allreduce.py", "<code>ring_allreduce.py</code>") in out
    assert link.format("collectives/slurm_collectives.sbatch",
                       "<code>examples/collectives/slurm_collectives.sbatch</code>") in out
    # A command keeps its text, so it copies as it reads; its modules are links inside it.
    assert f"<code>python -m {link.format('capstone/decode.py', 'examples.capstone.decode')} --quick</code>" in out
    assert (f"<code>python -m {link.format('lab/__main__.py', 'examples.lab')} run "
            f"{link.format('blas/levels.py', 'blas.levels')} {link.format('blas/epilogue.py', 'blas.epilogue')}"
            " --out DIR</code>") in out
    for left in ("<code>output_code.py</code>", "<code>__init__.py</code>", "<code>records.py</code>",
                 '<a href="x"><code>nccl_latency.py</code></a>'):
        assert left in out and link.split(">")[0].format("x", "") not in left
    assert out.endswith("<pre><code>python -m examples.capstone.decode\nring_allreduce.py\n</code></pre>"), \
        "a listing is left as it is"


def test_a_command_that_runs_no_example_stops_the_build_in_one_line():
    with pytest.raises(SystemExit, match=r"x.md: runs examples.capstone.nothing, which is not a module"):
        reading.link_sources("<code>python -m examples.capstone.nothing</code>", "x/", "x.md")
    with pytest.raises(SystemExit, match=r"x.md: runs the topic blas.nothing, which is not a file"):
        reading.link_sources("<code>python -m examples.lab run blas.nothing</code>", "x/", "x.md")


def test_the_built_site_ships_every_source_of_the_examples(built_site):
    shipped = sorted(p.relative_to(built_site / "examples").as_posix()
                     for p in (built_site / "examples").rglob("*") if p.is_file())
    assert shipped == [p.relative_to(reading.EXAMPLES).as_posix() for p in reading.example_files()]
    sbatch = "collectives/slurm_collectives.sbatch"
    assert (built_site / "examples" / sbatch).read_bytes() == (reading.EXAMPLES / sbatch).read_bytes()


def test_every_example_file_or_command_the_prose_names_is_a_link_to_its_file(built_site):
    """A reader never meets, in running text, an example's file name or command they cannot open."""
    names = {p.name for p in reading.example_files()} - {"__init__.py", "__main__.py"}
    checked = 0
    for page in sorted(built_site.rglob("index.html")):
        if "examples" in page.relative_to(built_site).parts:
            continue
        text = _PRE.sub("", page.read_text(encoding="utf-8"))
        for m in re.finditer(r"(<a\b[^>]*>)?<code>(.*?)</code>", text, re.S):
            anchor, inner = m.group(1) or "", m.group(2)
            shown = re.sub(r"<[^>]+>", "", inner)
            where = f"{page.relative_to(built_site)}: <code>{shown}</code>"
            targets = []
            if re.fullmatch(r"examples/[\w/]+\.\w+", shown) or shown in names:
                href = re.search(r'href="([^"]+)"', anchor)
                assert href and f"/{href.group(1)}".endswith(f"/{shown}"), \
                    f"{where} is not a link to its file"
                targets.append(href.group(1))
            for command in re.finditer(r"python -m (examples(?:\.\w+)+)", shown):
                assert re.search(rf'python -m <a class="lab-source" href="[^"]+"[^>]*>{re.escape(command.group(1))}</a>',
                                 inner), f"{where}: the module {command.group(1)} is not a link to its file"
                targets += re.findall(r'<a class="lab-source" href="([^"]+)"', inner)
            for href in targets:
                assert (page.parent / href).resolve().is_file(), f"{where} links to {href}, not in the site"
                checked += 1
    assert checked > 100


_PRE = re.compile(r"<pre\b.*?</pre>", re.S)


#: A chapter's closing sections, which are not a stretch of its main line: no "Remember" box of their own.
CLOSING_SECTIONS = {"What to remember", "Run it yourself", "Problems"}


@pytest.mark.parametrize("name", [p for p in PAGES if p not in {"index", "glossary", "numbers"}])
def test_every_section_of_a_chapter_holds_its_own_remember_box(built_site, name):
    """A "what to remember" box inside each section, not only at the chapter's end (issue 25,
    section 3): every ``<h2>`` of a chapter but its closing ones is followed, before the next
    ``<h2>``, by an admonition titled "Remember" (inside a folded "In depth" section too)."""
    text = (built_site / name / "index.html").read_text(encoding="utf-8")
    article = text[text.index("<h1"):text.index("</article>")]
    heads = [(m.start(), html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).rstrip("¶").strip())
             for m in re.finditer(r"<h2 id=\"[^\"]+\"[^>]*>(.*?)</h2>", article, flags=re.S)]
    boxes = [m.start() for m in re.finditer(r'<p class="admonition-title">Remember</p>', article)]
    assert len(heads) >= 6, f"{name}: only {len(heads)} sections"
    ends = [start for start, _ in heads[1:]] + [len(article)]
    lacking = [title for (start, title), end in zip(heads, ends)
               if title not in CLOSING_SECTIONS and not any(start < b < end for b in boxes)]
    assert not lacking, f"{name}: sections without a 'Remember' box: {lacking}"
    assert {title for _, title in heads} >= CLOSING_SECTIONS, f"{name}: {[t for _, t in heads]}"
