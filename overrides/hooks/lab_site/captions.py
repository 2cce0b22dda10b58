"""A plot's frame on the page: its number, its caption with a link to itself, its data as CSV.

Every ``lab:plot`` and ``lab:timeline`` of a page is numbered in page order (Figure 1,
Figure 2, ...); each of its tabs (one per GPU) is one ``<figure>`` whose id a reader can
link to (``#figure-2``; a further tab adds its machine, ``#figure-2-nvidia-h100-80gb-hbm3``).
The caption holds the plot's title as text (it wraps with the column instead of
shrinking with the SVG), says which machine, and links the points drawn as a CSV file
that the build writes beside the page (:func:`csv_path`): same origin, no script.
A plot named with ``anchor=NAME`` has every tab's ``<figure>`` say so (``data-lab-anchor``):
a calculator's ``plot=NAME`` marks its result there.
"""
from __future__ import annotations

import html
import posixpath
import re


def figure_id(number: int, tab: str | None = None) -> str:
    """``figure-2`` for a plot's first tab, ``figure-2-<tab>`` for another (a machine's slug)."""
    suffix = "" if tab is None else "-" + re.sub(r"[^a-z0-9]+", "-", tab.lower()).strip("-")
    return f"figure-{number}{suffix}"


def csv_path(page_src: str, page_url: str, fid: str) -> tuple[str, str]:
    """Where a figure's CSV goes in the site, and its link from the page.

    The file sits in the page's folder (``collectives/`` for ``collectives/index.html``),
    named after the page's source and the figure, so no two pages' files meet even
    without directory URLs.
    """
    folder = page_url if page_url.endswith("/") else posixpath.dirname(page_url)
    stem = posixpath.splitext(posixpath.basename(page_src))[0]
    name = f"{stem}-{fid}.csv"
    return posixpath.join(folder.strip("/"), name) if folder.strip("/") else name, name


def figure_html(svg: str, *, fid: str, number: int, caption: str, machine: str | None, csv_href: str,
                points: int, anchor: str | None = None) -> str:
    """The ``<figure>`` of one plot: the SVG, then "Figure N. caption (machine) · data: CSV, N points"."""
    where = f" ({html.escape(machine, quote=False)})" if machine else ""
    # The SVG's words (ticks, hover titles: ~900 in a timeline) stay out of the search index
    # (Material's data-search-exclude); the caption is what a search should find.
    named = f' data-lab-anchor="{html.escape(anchor, quote=True)}"' if anchor else ""
    return (f'<figure class="lab-plot" id="{fid}"{named}><div class="lab-plot__scroll" data-search-exclude>{svg}</div>'
            f'<figcaption class="lab-plot__caption"><a class="lab-plot__number" href="#{fid}">Figure {number}</a>. '
            f"{html.escape(caption, quote=False)}{where} · "
            f'<a class="lab-plot__csv" href="{html.escape(csv_href)}" download>data (CSV, '
            f"{points} {'row' if points == 1 else 'rows'})</a></figcaption></figure>")
