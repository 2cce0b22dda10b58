"""The print edition (mkdocs-print-site-plugin's /print_page/, the PDF's source): each page as shown.

The plugin keeps each page's HTML in ``page.html`` from its own ``on_page_content``, which runs
before this site's hooks: the plots that ``records.py`` puts in at that event, and the reading
time and folds of ``reading.py``, would be missing from the print page. This hook runs last at
that event and keeps the page's final HTML instead, less its links to the print page itself (the
landing page's "the book on one page"), which on the print page would lead nowhere.

A section of the navigation whose pages the edition leaves out (the notebooks) would print as a
title on a page of its own and a line of the table of contents; ``on_post_build`` drops both
from the page the plugin wrote (it writes it after the build, not through ``on_post_page``).

The plugin renames each page's heading (and list item and footnote) ids to make them unique on
the print page, one ``str.replace`` over the whole page per id: with this book's pages (up to
2 MB, thousands of ids) that was about 20 s of a build. :func:`update_anchor_ids` does the same
renaming in one pass, and stands in for the plugin's where the result is provably the same;
:func:`anchor_matches` finds the plugin's matches in the lines that can hold one.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority

try:
    from mkdocs_print_site_plugin import urls as _print_site_urls
except ImportError:  # the plugin is not installed: the build says so where mkdocs.yml names it
    _print_site_urls = None

_TO_PRINT_PAGE = re.compile(r'<a href="(?:\.\./)*print_page/">(.*?)</a>', re.S)
#: A section of the print page that holds its title and nothing else.
_EMPTY_SECTION = re.compile(r"<section class='print-page md-section' id='(section-\d+)'[^>]*>\s*"
                            r"<h1>[^<]*<a class='headerlink'[^>]*></a>\s*</h1>\s*</section>")


@event_priority(-100)  # after every plugin's and hook's on_page_content
def on_page_content(html: str, page, config, files) -> str:
    if getattr(page, "html", None) is not None:  # set by the print-site plugin, for its page
        page.html = _TO_PRINT_PAGE.sub(r"\1", html)
    return html


def drop_empty_sections(html: str) -> str:
    """The print page less its empty sections and their lines in its table of contents."""
    for section in _EMPTY_SECTION.findall(html):
        html = re.sub(rf'<li class="md-nav__item">\s*<a href="#{section}" class="md-nav__link">.*?</li>', "",
                      html, flags=re.S)
    return _EMPTY_SECTION.sub("", html)


@event_priority(-100)  # after the print-site plugin has written its page
def on_post_build(config) -> None:
    page = Path(config["site_dir"]) / "print_page" / "index.html"
    if page.is_file():
        page.write_text(drop_empty_sections(page.read_text(encoding="utf-8")), encoding="utf-8")


#: The plugin's own pattern and tags (mkdocs_print_site_plugin/urls.py, update_anchor_ids).
_ANCHOR = re.compile(r"<([^\s]+).*?id=\"([^\"]*?)\".*?>", flags=re.IGNORECASE)
_RENAMED_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "sup", "li"})


_ID = re.compile(r'id="', flags=re.IGNORECASE)
_ID_ACROSS_LINES = re.compile(r'id="[^"]*\n', flags=re.IGNORECASE)


def anchor_matches(page_html: str):
    """``_ANCHOR.finditer(page_html)``'s matches, found faster. Outside an id's value the pattern
    crosses no line end (``.`` and ``[^\\s]`` stop there), so each match lies in one line that holds
    ``id="``: search only those lines. From every ``<`` of every other line the whole-page search
    tried the rest of the line (10 MB of print page: half a minute). An id whose value spans
    lines makes the whole-page search the only sure one."""
    if _ID_ACROSS_LINES.search(page_html):
        yield from _ANCHOR.finditer(page_html)
        return
    searched_to = -1
    for found in _ID.finditer(page_html):
        if found.start() < searched_to:
            continue  # its line was searched
        start = page_html.rfind("\n", 0, found.start()) + 1
        end = page_html.find("\n", found.start())
        searched_to = len(page_html) if end < 0 else end
        yield from _ANCHOR.finditer(page_html, start, _last_match_end(page_html, found.start(), searched_to))


def _last_match_end(page_html: str, first_id: int, line_end: int) -> int:
    """Where the line's last possible match ends: at the first ``>`` after its last ``id="..."``.
    Every match holds an ``id="..."`` and ends at the first ``>`` after it, so none ends later;
    past there the search only failed, from each ``<``, over the rest of the line (an inline
    plot's line: thousands of tags after its one id, seconds of a build)."""
    *_, last = _ID.finditer(page_html, first_id, line_end)
    quote = page_html.find('"', last.end(), line_end)
    close = page_html.find(">", quote + 1, line_end) if quote >= 0 else -1
    return line_end if close < 0 else close + 1


def update_anchor_ids(page_html: str, page_key: str) -> str:
    """The plugin's ``update_anchor_ids`` in one pass. The plugin replaces each matched tag's
    text, in turn, everywhere in the page; one pass gives the same page unless one replacement
    could touch another's text: a matched tag holding a second ``<`` (it could hold another
    matched tag) or a new tag's text equal to one still to be replaced. Then the plugin's own
    function runs instead."""
    renamed: dict[str, str] = {}
    for m in anchor_matches(page_html):
        if m.group(1) in _RENAMED_TAGS and m.group() not in renamed:
            renamed[m.group()] = m.group().replace(m.group(2), f"{page_key}-{m.group(2)}")
    if not renamed:
        return page_html
    if any(text.count("<") != 1 for text in renamed) or not renamed.keys().isdisjoint(renamed.values()):
        return _ORIGINAL_UPDATE_ANCHOR_IDS(page_html, page_key)
    alternatives = re.compile("|".join(map(re.escape, sorted(renamed, key=len, reverse=True))))
    return alternatives.sub(lambda m: renamed[m.group()], page_html)


# The plugin's own, kept on its module: a rebuild of `mkdocs serve` imports this hook again.
_ORIGINAL_UPDATE_ANCHOR_IDS = None
if _print_site_urls is not None and hasattr(_print_site_urls, "update_anchor_ids"):
    _ORIGINAL_UPDATE_ANCHOR_IDS = getattr(_print_site_urls, "_plugins_update_anchor_ids",
                                          _print_site_urls.update_anchor_ids)
    _print_site_urls._plugins_update_anchor_ids = _ORIGINAL_UPDATE_ANCHOR_IDS
    _print_site_urls.update_anchor_ids = update_anchor_ids  # fix_internal_links looks it up at each call
