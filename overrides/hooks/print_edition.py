"""The print edition (mkdocs-print-site-plugin's /print_page/, the PDF's source): each page as shown.

The plugin keeps each page's HTML in ``page.html`` from its own ``on_page_content``, which runs
before this site's hooks: the plots that ``records.py`` puts in at that event, and the reading
time and folds of ``reading.py``, would be missing from the print page. This hook runs last at
that event and keeps the page's final HTML instead, less its links to the print page itself (the
landing page's "the book on one page"), which on the print page would lead nowhere.
"""
from __future__ import annotations

import re

from mkdocs.plugins import event_priority

_TO_PRINT_PAGE = re.compile(r'<a href="(?:\.\./)*print_page/">(.*?)</a>', re.S)


@event_priority(-100)  # after every plugin's and hook's on_page_content
def on_page_content(html: str, page, config, files) -> str:
    if getattr(page, "html", None) is not None:  # set by the print-site plugin, for its page
        page.html = _TO_PRINT_PAGE.sub(r"\1", html)
    return html
