"""The chapters' tables as a reader reads them: words for headers, constant columns said once,
sizes in binary units, long tables folded (``lab_site.markdown.table_markdown``), on the
book's own records (the browser test checks that they fit the text column)."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.hook_support import RAW_BYTES, REPO, is_raw_count, req, root

from examples.lab import metrics  # noqa: E402
from lab_site import labels, markdown, store  # noqa: E402
from lab_site.fmt import NBSP  # noqa: E402


@pytest.fixture(scope="module")
def book() -> store.Store:
    return store.load([root(REPO / "docs" / "records")], REPO)


def first_tab(text: str) -> str:
    return re.split(r'^===!? "', text, flags=re.M)[1]


def grids(text: str) -> list[list[str]]:
    """Each Markdown table of ``text``: its lines (header, rule, rows), unindented."""
    found: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        row = line.strip().startswith("|")
        if row and not previous:
            found.append([])
        if row:
            found[-1].append(line.strip())
        previous = row
    return found


def test_case_values_print_sizes_in_binary_units_large_counts_with_a_prefix_and_identifiers_in_words():
    assert labels.case("bytes", 262144) == f"256{NBSP}KiB"
    assert labels.case("bytes", 4 * 2**30) == f"4{NBSP}GiB"
    assert labels.case("MiB", 2048.0) == f"2{NBSP}GiB"  # recorded in MiB, a declared size key
    # A count, not a size (never guessed from magnitude): a binary prefix, no "B".
    assert labels.case("n", 67108864) == f"64{NBSP}Mi" and labels.case("elements", 1048576) == f"1{NBSP}Mi"
    assert labels.case("h", 14336) == f"14{NBSP}Ki" and labels.case("n", 16384) == f"16{NBSP}Ki"
    assert labels.case("intensity", 10000) == "10,000"  # a quantity in its header's unit (FLOP/B)
    assert labels.case("n", 4096) == "4096" and labels.case("mode", True) == "true"
    # A value that is an identifier of the code reads in words; a word reads as it is.
    assert labels.case("collective", "all_gather") == "all-gather"
    assert labels.case("impl", "dist.all_reduce") == "NCCL all-reduce"
    assert labels.case("impl", "hand ring") == "hand ring" and labels.case("recipe", "all_gather") == "all_gather"


def test_a_long_table_is_folded_by_its_main_key_with_every_row_kept(book):
    request = req("<!-- lab:table ecosystem.sparse_dense metrics=time,speedup,speedup_vs_tf32,speedup_vs_bf16 -->")
    group = book.topic("ecosystem.sparse_dense", "nvidia-h200")[0]
    text, _ = markdown.table_markdown(request, group)
    parts = grids(text)
    assert len(parts) > 2 and all(len(p) - 2 <= markdown.FOLD_ROWS for p in parts)
    rows = [r for r in markdown.select(group, {}) if any(m in r.metrics for m in request.metrics)]
    assert sum(len(p) - 2 for p in parts) == len(rows) > markdown.FOLD_ROWS  # folded, none lost
    folds = re.findall(r'^\s*(\?\?\?\+?) lab-rows "(.+)"$', text, flags=re.M)
    assert folds[0][0] == "???+" and "???" in {f for f, _ in folds}, folds  # the first part open, others closed
    assert any(title.startswith("device cuda") for _, title in folds)  # the main key's value heads its part
    for part in parts:
        assert "| device |" not in part[0] and "speed-up over dense TF32 (×)" in part[0]


def test_constant_columns_go_to_the_caption_and_sizes_read_in_binary_units(book):
    text = markdown.table(req("<!-- lab:table collectives.ring_allreduce part=sweep "
                              "metrics=time,algbw,busbw,model_ratio,speedup -->"),
                          book.topic("collectives.ring_allreduce", "nvidia-h200"), lambda e: e.site_uri)
    tab = first_tab(text)
    assert "Every row: part sweep, GPUs 2." in tab
    assert f'lab-rows "message size 4{NBSP}KiB' in tab and f"message size 256{NBSP}MiB" in tab
    assert "262144" not in tab and "| part |" not in tab
    for grid in grids(tab):
        assert "_" not in grid[0] and "algorithm bandwidth (GB/s)" in grid[0] and "| time (µs) |" in grid[0]


def test_a_short_table_stays_whole_with_headers_in_words(book):
    text = markdown.table(req("<!-- lab:table capstone.decode precision=bf16 metrics=ms_per_token,"
                              "speed_of_light_fraction,speedup_over_eager -->"),
                          book.topic("capstone.decode", "nvidia-h200"), lambda e: e.site_uri)
    tab = first_tab(text)
    (grid,) = grids(tab)
    assert grid[0] == "| rung | time per token (ms) | fraction of the speed of light | speed-up over eager (×) |"
    assert "lab-rows" not in tab and "Every row: precision bf16" in tab


# -- the built book --------------------------------------------------------------------------

class _Tables(HTMLParser):
    """Each ``<table>`` of a page: its headers and its rows, as text, less what is set as code."""

    def __init__(self):
        super().__init__()
        self.tables: list[dict] = []
        self._cell: list[str] | None = None
        self._code = 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"heads": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td") and self.tables:
            self._cell = []
        elif tag == "code":
            self._code += 1

    def handle_endtag(self, tag):
        if tag == "code":
            self._code -= 1
        elif tag in ("th", "td") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            table = self.tables[-1]
            (table["heads"] if tag == "th" else table["rows"][-1]).append(text)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None and not self._code:
            self._cell.append(data)


def test_no_table_of_the_book_prints_a_raw_count_or_a_raw_byte_count(built_site: Path):
    """A case column (its header is a case key's words) prints a count of 10,000 or more with a
    prefix (``1 Mi``, not ``1,048,576``), a size in binary units (``1 GiB``, not ``1073741824 B``);
    a note's text the same for a size the book's code wrote in bytes. A key whose values are a
    quantity in the unit its words name (``intensity (FLOP/B)``) prints them as numbers."""
    topics = [""] + list(metrics.TOPIC_CASE_KEYS)
    every = {metrics.key_label(t, k) for t in topics
             for k in (*metrics.CASE_KEYS, *metrics.WORD_KEYS, *metrics.TOPIC_CASE_KEYS.get(t, {}))}
    quantities = {metrics.key_label(t, k) for t in topics for k in metrics.QUANTITY_KEYS}
    case_heads = every - quantities
    found: list[str] = []
    checked = 0
    for page in sorted(built_site.rglob("index.html")):
        parser = _Tables()
        parser.feed(page.read_text(encoding="utf-8"))
        where = page.parent.relative_to(built_site).as_posix() or "home"
        for table in parser.tables:
            heads = table["heads"]
            for row in table["rows"]:
                for head, text in zip(heads, row):
                    if head in case_heads:
                        checked += 1
                        if is_raw_count(text):
                            found.append(f"{where}: [{head}] {text}")
                    if RAW_BYTES.search(text):
                        found.append(f"{where}: [{head}] {text}")
    assert checked > 1000, f"only {checked} case cells in the built book: the check is vacuous"
    assert not found, (f"{len(found)} raw counts in tables (a count: lab_site.labels.case; a size key: "
                       f"SIZE_KEYS of examples/lab/metrics.py):\n" + "\n".join(dict.fromkeys(found)))
