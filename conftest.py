"""Sybil: the book's pages and the examples' docstrings are tests.

* Pages (``docs/*.md``, ``docs/*/*.md``): plain ```` ```python ```` fences run as
  Python, fences that start with ``>>>`` run as doctests, and
  ``<!-- skip: next if(not cuda, reason="needs a CUDA GPU") -->`` skips the next
  block on a machine without a GPU (``cuda`` is in every page's namespace).
  Include fences are labelled ``py`` (```` ```py title="examples/..." ````) and are
  *not* run: Sybil reads the raw Markdown, where they hold only the
  ``--8<--`` line. ``tests/test_coupling.py`` checks that every Python-like
  fence is one of those two kinds.
* Examples (``examples/*.py``, ``examples/*/*.py``): ``>>>`` lines in docstrings
  (``.. skip: next`` skips one).

Patterns are listed per depth: ``Path.match("docs/**/*.md")`` misses top-level
pages before Python 3.13.
"""
from __future__ import annotations

import os
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE

import pytest
from sybil import Sybil
from sybil.parsers.markdown import ClearNamespaceParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.rest import DocTestParser
from sybil.parsers.rest import SkipParser as RestSkipParser

DOCTEST_FLAGS = ELLIPSIS | NORMALIZE_WHITESPACE


def _page_namespace(namespace: dict) -> None:
    """What every page's code sees: ``cuda`` tells whether a GPU is usable here."""
    import torch

    namespace["cuda"] = torch.cuda.is_available()


pages = Sybil(
    name="pages",
    parsers=[
        # Runs plain ``python`` fences; a fence whose first line is ``>>>`` runs
        # as a doctest. A separate markdown DocTestParser would claim the same
        # ``>>>`` lines inside those fences and Sybil would refuse the overlap.
        PythonCodeBlockParser(doctest_optionflags=DOCTEST_FLAGS),
        SkipParser(),
        ClearNamespaceParser(),
    ],
    patterns=["docs/*.md", "docs/*/*.md"],
    setup=_page_namespace,
)

docstrings = Sybil(
    name="docstrings",
    parsers=[DocTestParser(optionflags=DOCTEST_FLAGS), RestSkipParser()],
    patterns=["examples/*.py", "examples/*/*.py"],
)

pytest_collect_file = (pages + docstrings).pytest()


@pytest.fixture(autouse=True)
def _triton_interpret_stays_put():
    """Importing ``examples.compile.triton_kernels`` without a GPU turns on
    Triton's interpreter by setting ``TRITON_INTERPRET`` in this process; put the
    variable back after each test, so that the processes later tests start (which
    copy ``os.environ``) compile Triton kernels as a reader's would."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before
