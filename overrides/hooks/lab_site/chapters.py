"""Which page is the chapter of each example package (``examples/<package>/``).

A chapter page includes its examples' code (``--8<-- "examples/<package>/x.py"``); the page
that includes the most examples of a package is that package's chapter. The notebooks hook
(``overrides/hooks/notebooks.py``) links each package's notebook from that page, and
Appendix A (``generated.py``) lists each topic's records on the appendix page of the
chapter of its example's package: one mapping, read from the pages, for both.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

#: An include of an example's code, and the package it is in.
INCLUDE = re.compile(r'--8<--\s+"examples/(\w+)/')


def package_pages(pages: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``{package: page}`` from ``(page source path, Markdown)`` pairs, in the order given:
    each package's page is the one that includes the most of its examples (the first, in
    a tie)."""
    counts: dict[str, dict[str, int]] = {}
    for src, text in pages:
        for package in INCLUDE.findall(text):
            counts.setdefault(package, {}).setdefault(src, 0)
            counts[package][src] += 1
    return {package: max(by_page, key=by_page.get) for package, by_page in counts.items()}


def package_of(source: str) -> str | None:
    """The package of an example's path as a record names it: ``examples/graphs/launch_cost.py``
    is in ``graphs``; a path outside ``examples/<package>/`` is in none."""
    parts = source.replace("\\", "/").split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "examples" else None
