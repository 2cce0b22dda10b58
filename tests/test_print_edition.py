"""The print edition: the site's ``print_page/`` (mkdocs-print-site-plugin) and the PDF that
``make pdf`` prints from it (``overrides/print_pdf.py``, Debian's Chromium through Playwright).

Both read the site the suite already builds (``built_site``: under ``make test``, its own strict
build), so the print edition costs the suite one Chromium print of two of its chapters, not a second
build. What is checked against the site's own pages (mkdocs.yml's nav, less
the pages the edition leaves out): every chapter's title and every plot's caption is on the print
page and in the PDF's text, and the print page prints without a broken image, a failed or foreign
request, an error, or a formula left unrendered.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "overrides") not in sys.path:
    sys.path.insert(0, str(REPO / "overrides"))

import print_pdf  # noqa: E402

sys.path.insert(0, str(REPO / "overrides" / "hooks"))
import print_edition  # noqa: E402

MKDOCS_YML = REPO / "mkdocs.yml"


def test_print_page_holds_every_chapter_and_plot(built_site):
    chapters = print_pdf.chapters(built_site, MKDOCS_YML)
    # Vacuity: the nav's chapters 1-9 and the landing page at least, and the book's plots.
    assert len(chapters) >= 10, f"only {len(chapters)} pages of the nav in the print edition: {chapters}"
    assert sum(len(plots) for _, _, plots in chapters) > 10, "the chapters hold almost no plots: the check is vacuous"
    assert all(title for _, title, _ in chapters), f"a page without a title: {chapters}"
    problems = print_pdf.check_print_page(built_site, MKDOCS_YML)
    assert not problems, "\n".join(problems)


def test_a_chapter_missing_from_the_print_page_is_caught(built_site):
    """The check above reads the chapters from the site's pages, not from the print page itself."""
    page = (built_site / print_pdf.PRINT_PAGE / "index.html").read_text(encoding="utf-8")
    cut = re.sub(r'<section class="print-page" id="cuda-graphs".*?(?=<section class="print-page" id=)', "",
                 page, count=1, flags=re.S)
    assert cut != page, "no section for cuda-graphs.md on the print page"
    problems = print_pdf.check_print_page(built_site, MKDOCS_YML, page=cut)
    assert any(p.startswith("cuda-graphs.md: the print page has no chapter") for p in problems), problems
    assert any(p.startswith("cuda-graphs.md: the print page lacks the plot") for p in problems), problems


def test_the_print_page_has_no_empty_section(built_site):
    """The notebooks' section of the navigation, whose pages the edition leaves out, would print
    as a title alone on the last page (overrides/hooks/print_edition.py drops it)."""
    page = (built_site / print_pdf.PRINT_PAGE / "index.html").read_text(encoding="utf-8")
    assert page.count('<section class="print-page"') >= 10, "the print page holds no pages: the check is vacuous"
    assert print_edition.drop_empty_sections(page) == page, "the print page holds an empty section"
    made = ("<li class=\"md-nav__item\">\n<a href=\"#section-9\" class=\"md-nav__link\">Gone</a></li>"
            "<section class='print-page md-section' id='section-9' heading-number='9'>\n"
            "<h1>Gone<a class='headerlink' href='#section-9' title='Permanent link'></a>\n</h1>\n</section>")
    assert print_edition.drop_empty_sections(made) == "", "an empty section made to be dropped was kept"


#: The chapters the suite prints: plots, diagrams, formulas (Chapter 3 has 69), folded answers and
#: "In depth" sections, in the book's order. The whole book is 850 pages and two to three minutes
#: of a 2-core machine; ``make pdf`` and ``make publish`` print all of it, and the print page's
#: chapters and plots are all checked above.
PRINTED = ("blas", "cuda-graphs")


@pytest.mark.browser
def test_pdf_holds_its_chapters_plots_and_outline(built_site, tmp_path):
    pdf = tmp_path / "python-to-silicon.pdf"
    try:
        done = print_pdf.render(built_site, pdf, only=PRINTED)
    except print_pdf.PrintError as exc:
        pytest.fail(str(exc), pytrace=False)
    problems, pages = print_pdf.check_pdf(built_site, MKDOCS_YML, pdf, only=PRINTED)
    assert not problems, "\n".join(problems)
    printed = print_pdf.chapters(built_site, MKDOCS_YML, only=PRINTED)
    assert len(printed) == len(PRINTED), f"not every chapter of {PRINTED} is in the nav: {printed}"
    plots = sum(len(p) for _, _, p in printed)
    assert plots >= 2 and done["plots"] == plots, f"{done['plots']} plots drawn on the print page, {plots} on the chapters' pages"
    assert done["opened"] > 0, "no folded answer or section was printed open"
    assert pages > 40, f"the PDF of {PRINTED} has only {pages} pages"
    # The outline: every chapter in the book's order, its sections under it, each at its page.
    marks = print_pdf.outline(pdf)
    titles = [t for t, _, _ in marks]
    book = [t for _, t, _ in printed]
    assert titles == book, titles  # only those chapters, in the book's order
    assert [p for _, p, _ in marks] == sorted(p for _, p, _ in marks) and marks[0][1] > 0, "after the contents"
    for title, page, sections in marks:
        assert sections, f"chapter {title}: no section in the outline"
        assert all(page <= p < pages for _, p in sections), title
        assert [p for _, p in sections] == sorted(p for _, p in sections), title
    assert done["outline"] == len(marks) + sum(len(s) for _, _, s in marks)
    print(f"{pages} pages, {done['bytes'] / 1e6:.1f} MB, printed in {done['seconds']} s")


def test_the_one_pass_anchor_renaming_gives_the_plugins_page(built_site, monkeypatch):
    """overrides/hooks/print_edition.py renames the print page's anchors in one pass where the
    print-site plugin replaced each in turn over the whole page: the same page, on made-up HTML
    that reaches its fallback and on two of the book's own pages (the plugin's way takes seconds)."""
    theirs = print_edition._ORIGINAL_UPDATE_ANCHOR_IDS
    assert theirs is not None and theirs is not print_edition.update_anchor_ids
    made = ('<h2 id="a">A</h2><p id="a">para</p><h2 id="a">A again</h2><li class="li" id="l">x</li>'
            '<sup id="fnref:1">1</sup><div class="x"><h3 id="inner">in</h3></div><H4 ID="up">u</H4>')
    assert print_edition.update_anchor_ids(made, "page") == theirs(made, "page")
    # Where one replacement could touch another's text, the plugin's own function runs.
    spanning = '<li class="k"><b id="q">q</b></li>\n<h2 id="q">h</h2>'  # the match runs over two tags
    clashing = '<h2 id="x">x</h2>\n<h2 id="p-x">px</h2>'  # the plugin renames the second twice
    for made, expected in ((spanning, '<li class="k"><b id="p-q">q</b></li>\n<h2 id="p-q">h</h2>'),
                           (clashing, '<h2 id="p-p-x">x</h2>\n<h2 id="p-p-x">px</h2>')):
        calls = []
        monkeypatch.setattr(print_edition, "_ORIGINAL_UPDATE_ANCHOR_IDS", lambda h, k: calls.append(1) or theirs(h, k))
        ours = print_edition.update_anchor_ids(made, "p")
        assert ours == theirs(made, "p") == expected and calls, made
    for page in ("cuda-graphs", "glossary"):
        html = (built_site / page / "index.html").read_text(encoding="utf-8")
        ours = print_edition.update_anchor_ids(html, page)
        assert ours != html and ours == theirs(html, page), page


def test_the_anchors_are_found_as_the_plugins_pattern_finds_them(built_site):
    """The renaming searches for the plugin's pattern only in the lines that hold ``id="``, up to
    each line's last id: the same matches as over the whole page, on made-up HTML (a tag whose id
    comes on a later line, a match that runs past its tag, an id whose value spans lines, tags after
    a line's last id) and on two of the book's pages."""
    def both(text):
        return ([(m.span(), m.groups()) for m in print_edition.anchor_matches(text)],
                [(m.span(), m.groups()) for m in print_edition._ANCHOR.finditer(text)])

    made = ['<h2 class="a"\n id="x">x</h2>\n<p>no ids <b>here</b></p>\n<li><a ID="y">y</a></li> <h3 id="z">z',
            '<h2 id="a">A</h2>\n\n<sup id="b"\n>1</sup>', '<li id="a\nb">x</li>\n<h2 id="c">c</h2>', "", "<p>none</p>",
            # tags after a line's last id (where the search stops), and a last id with no ">" after it
            '<p><b id="x">x</b><i>i</i><u>u</u></p>', '<h2 id="a">A</h2> <b>b</b> <i ID="c" class="d"']
    for text in made:
        ours, theirs = both(text)
        assert ours == theirs, text
    for page in ("cuda-graphs", "glossary"):  # the whole-page search takes 15 s on the measuring page
        ours, theirs = both((built_site / page / "index.html").read_text(encoding="utf-8"))
        assert ours == theirs and len(ours) > 10, page
