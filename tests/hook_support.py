"""What the site-hook tests share: the hooks on the import path, the fixture records and their names.

Fixture records (``tests/fixtures/records/``, made by ``tests/fixtures/make_records.py``)
hold invented numbers for the made-up topic ``fixture.launch``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOOKS = REPO / "overrides" / "hooks"
for path in (REPO, HOOKS, REPO / "overrides"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from lab_site import shortcodes, store  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
TOPIC = "fixture.launch"
H200, H100 = "nvidia-h200", "nvidia-h100-80gb-hbm3"
A100 = "nvidia-a100-sxm4-80gb"
CPU = "cpu-amd-epyc-9654-96-core-processor"


def req(text: str):
    return shortcodes.request(shortcodes.parse_text(text))


def root(path: Path, index: int = 0, prefix: str = "records") -> store.Root:
    return store.Root(index, path, prefix, None if index == 0 else path.name, False)


@pytest.fixture(scope="module")
def fixture_store() -> store.Store:
    return store.load([root(FIXTURES / "records")], REPO)


def entry(record, *, stale: bool = False, index: int = 0) -> store.Entry:
    """A record made in memory (``tests/fixtures/make_records.py``) as the store would load it."""
    uri = f"records/{record.machine.slug}/{record.topic}/{record.run.id}.json"
    reason = store.changed_reason(record.source) if stale else None
    return store.Entry(record, FIXTURES / uri, root(FIXTURES / "records", index), uri, stale, reason)


def grouped(*entries: store.Entry) -> list[store.Group]:
    """Groups of runs of in-memory records, as a build groups loaded ones (by root, machine, topic)."""
    return store.group_runs(entries, REPO)


def served(site: Path):
    """Context manager: ``http://127.0.0.1:PORT`` serving ``site`` until the block ends."""
    from site_server import served as serving

    return serving(site)


#: A word with an underscore: an identifier of the code (``all_gather``, ``ms_per_token``).
SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]")


def is_identifier(text: str, not_words: set[str]) -> bool:
    """The rule the browser test applies to a table's header (``tests/test_browser.py``, ``TABLES_JS``),
    for any text a reader sees outside code: a word with an underscore, or, less its unit in brackets
    (``time per token (ms)``), an identifier of ``examples/lab/metrics.py`` that is not a word
    (:func:`examples.lab.metrics.not_words`: ``algbw``, ``gpus``)."""
    bare = re.sub(r"\s*\([^()]*\)$", "", text.strip())
    return bool(SNAKE.search(text)) or bare in not_words


#: A whole number of 10,000 or more written out (``1,048,576``, ``67108864``): a raw count.
RAW_COUNT = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d{5,})")
#: A count of bytes written out (``logged as 1073741824 B``), where the book writes ``1 GiB``.
RAW_BYTES = re.compile(r"(?<![\w.,])\d{4,} B\b")


def is_raw_count(text: str) -> bool:
    """Whether a cell's whole text is a bare whole number of 10,000 or more, without a unit."""
    text = text.strip()
    return bool(RAW_COUNT.fullmatch(text)) and int(text.replace(",", "")) >= 10_000
