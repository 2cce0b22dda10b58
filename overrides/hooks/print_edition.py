"""The print edition (mkdocs-print-site-plugin's /print_page/, the PDF's source): each page as shown.

The plugin keeps each page's HTML in ``page.html`` from its own ``on_page_content``, which runs
before this site's hooks: the plots that ``records.py`` puts in at that event, and the reading
time and folds of ``reading.py``, would be missing from the print page. This hook runs last at
that event and keeps the page's final HTML instead, less its links to the print page itself (the
landing page's "the book on one page"), which on the print page would lead nowhere.

A section of the navigation whose pages the edition leaves out (the notebooks) would print as a
title on a page of its own and a line of the table of contents; ``on_post_build`` drops both
from the page the plugin wrote (it writes it after the build, not through ``on_post_page``).
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority

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
