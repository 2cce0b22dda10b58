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
    # A count of elements, not a size (declared, never guessed from magnitude): a binary prefix, no "B".
    assert labels.case("elements", 1048576) == f"1{NBSP}Mi"
    assert labels.case("n", 67108864, "measuring.cpu_bound_trap") == f"64{NBSP}Mi"  # that topic's n counts
    # Any other large whole number (a matrix side, a width, a quantity) whole, as the prose writes it.
    assert labels.case("n", 16384, "blas.levels") == "16,384" and labels.case("h", 14336) == "14,336"
    assert labels.case("intensity", 10000) == "10,000" and labels.case("n", 67108864) == "67,108,864"
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
        assert "| device |" not in part[0] and "time (ms)" in part[0]
    # A part none of whose rows has a figure for a column leaves that column out.
    assert any("speed-up over dense TF32 (×)" in part[0] for part in parts)
    assert any("speed-up over dense TF32 (×)" not in part[0] for part in parts)


def cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_a_column_that_carries_nothing_is_left_out():
    lines = markdown.grid_lines(["size n", "op", "rate", "bandwidth"], [":--", ":--", "--:", "--:"],
                                [["", "copy", "—", "1.2"], ["", "add", "—", "3.4"]])
    assert lines == ["| op | bandwidth |", "|:--|--:|", "| copy | 1.2 |", "| add | 3.4 |"]
    # One cell that carries something keeps its column; a table of nothing keeps every column.
    assert markdown.grid_lines(["a", "b"], [":--", "--:"], [["", "—"], ["x", "—"]])[0] == "| a |"
    assert markdown.grid_lines(["a", "b"], [":--", "--:"], [["", "—"]])[0] == "| a | b |"


def test_chapter_1_s_roofline_tables_have_no_empty_column(book):
    """The roofline's parts: elementwise ops have no size n, a part's ops may lack a figure."""
    request = req("<!-- lab:table stack.roofline metrics=rate,bandwidth,of_roof -->")
    for group in book.topic("stack.roofline", "nvidia-h200"):
        text, _ = markdown.table_markdown(request, group)
        parts = grids(text)
        assert parts
        for part in parts:
            head, rows = cells(part[0]), [cells(r) for r in part[2:]]
            assert all(len(r) == len(head) for r in rows) and len(cells(part[1])) == len(head), part
            for i, name in enumerate(head):
                assert any(r[i] not in markdown.EMPTY_CELLS for r in rows), (group.label, name, part)


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


# -- the built book ------------------------------------------------------------------------------

def built_pages(site):
    """Every page of the built book but the redirects: (its path, its HTML)."""
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if 'class="md-content"' in text:
            yield page.relative_to(site), text


def plain(fragment: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_every_provenance_is_one_closed_line_naming_the_machine_and_its_runs(built_site):
    """Above each table and plot: a ``details`` that starts closed, its summary the machine, the
    run count, the days and a link to each run's record; the software, commits and timers inside."""
    from lab_site.provenance import MONTHS

    count = 0
    for page, text in built_pages(built_site):
        assert '<p class="lab-provenance"' not in text, page  # the old always-open paragraph
        for m in re.finditer(r'<details class="lab-provenance"( open)?[^>]*>\s*<summary>(.*?)</summary>(.*?)</details>',
                             text, flags=re.S):
            count += 1
            opened, summary, body = m.groups()
            assert opened is None, page  # closed by default: a reader opens it
            words = plain(summary)
            runs = re.search(r"(?:^|· )(?:\d+ × )?((?:NVIDIA |CPU: )[^·]+?) · (\d+) runs? · ([^·]+) · JSON: ([\d ]+)$",
                             words)
            assert runs, (page, words)
            machine, n, days, links = runs.groups()
            assert any(month in days for month in MONTHS) and re.search(r"\b20\d\d$", days), (page, days)
            assert links.split() == [str(i) for i in range(1, int(n) + 1)], (page, words)
            assert summary.count('<a href="') == int(n) and ".json" in summary, page  # each run's record
            inside = plain(body)
            assert f"{n} run" in inside and "torch " in inside and "commit" in inside, (page, inside)
            if machine.startswith("NVIDIA"):
                assert " SMs" in inside and "driver " in inside and "CUDA " in inside, (page, inside)
    assert count > 250, count  # every table and plot of the book has one


def captioned_tables(text: str):
    """Each ``<table>`` of a page with the caption it stands under: the last ``p.lab-caption`` before
    it with no provenance line between them (the caption of its tab), or ``None``."""
    marks = [(m.start(), "caption", m.group(0)) for m in re.finditer(r'<p class="lab-caption">.*?</p>', text, re.S)]
    marks += [(m.start(), "provenance", "") for m in re.finditer(r'<details class="lab-provenance"', text)]
    marks += [(m.start(), "table", m.group(0)) for m in re.finditer(r"<table>.*?</table>", text, re.S)]
    caption = None
    for _, kind, html_text in sorted(marks):
        if kind == "table":
            yield caption, html_text
        else:
            caption = html_text if kind == "caption" else None


def test_every_table_that_shows_a_noisy_flag_says_what_it_means_in_its_caption(built_site):
    """⚠ (runs differ by more than 15 %) is said in words above each table that shows one, in every
    tab, and only there: a table with no ⚠ has no legend."""
    flagged = legends = 0
    for page, text in built_pages(built_site):
        tables = list(captioned_tables(text))
        for caption, table in tables:
            if 'class="lab-noisy"' in table:
                flagged += 1
                assert caption and 'class="lab-noisy-legend"' in caption, (page, caption)
                assert "runs differ by more than 15 %; the range beneath its median shows by how much" \
                    in plain(caption), page
        for m in re.finditer(r'<p class="lab-caption">.*?</p>', text, re.S):
            if "lab-noisy-legend" in m.group(0):
                legends += 1
                under = [t for c, t in tables if c == m.group(0)]
                assert any('class="lab-noisy"' in t for t in under), (page, plain(m.group(0)))
    assert flagged > 50 and legends > 20, (flagged, legends)


def test_no_built_table_has_a_column_that_carries_nothing(built_site):
    """No column of any table of the book is empty or "—" on every row (Chapter 1's roofline had 11)."""
    for page, text in built_pages(built_site):
        for table in re.findall(r"<table>.*?</table>", text, flags=re.S):
            head = [plain(h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", table, flags=re.S)]
            rows = [[plain(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)]
                    for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)]
            rows = [r for r in rows if r]
            for i, name in enumerate(head):
                assert not rows or any(i < len(r) and r[i] not in markdown.EMPTY_CELLS for r in rows), \
                    (page, name, head)


def test_no_built_notes_table_sets_one_value_notes_beside_spread_mappings(built_site):
    """A notes table is either ``note | value`` or ``note | key ...``: a note of one value never shares a
    table with mappings spread over their keys (Appendix A's collectives: five collectives' columns
    and "value", every row '—' in all but one, ran past the text column at 1400 px)."""
    notes_tables = 0
    for page, text in built_pages(built_site):
        for table in re.findall(r"<table>.*?</table>", text, flags=re.S):
            head = [plain(h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", table, flags=re.S)]
            if head[:1] != ["note"]:
                continue
            notes_tables += 1
            assert head == ["note", "value"] or "value" not in head, (page, head)
    assert notes_tables > 20, notes_tables


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
    """A column of a count of elements (a key of COUNT_KEYS, or of TOPIC_COUNT_KEYS in its topic)
    prints 10,000 or more with a prefix (``1 Mi``, not ``1,048,576``), a size in binary units (``1 GiB``,
    not ``1073741824 B``); a note's text the same for a size the book's code wrote in bytes. (A matrix
    side prints whole, ``16,384``, as the prose writes it.)"""
    topics = [""] + list(metrics.TOPIC_COUNT_KEYS)
    case_heads = {metrics.key_label(t, k) for t in topics
                  for k in (*metrics.COUNT_KEYS, *metrics.TOPIC_COUNT_KEYS.get(t, ()))}
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
    assert checked > 20, f"only {checked} cells of counts in the built book: the check is vacuous"
    assert not found, (f"{len(found)} raw counts in tables (a count: lab_site.labels.case; a size key: "
                       f"SIZE_KEYS of examples/lab/metrics.py):\n" + "\n".join(dict.fromkeys(found)))
