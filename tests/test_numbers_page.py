"""The one-page summary (docs/numbers.md): every figure from the records, every row linked."""
from __future__ import annotations

import re

from tests.hook_support import REPO

PAGE = REPO / "docs" / "numbers.md"


def rows_of_figure_tables(text: str) -> list[tuple[list[str], str]]:
    """(header cells, row) of every table whose header starts with "Figure"."""
    out, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            if header[0] == "Figure":
                out.append((header, line))
    return out


def test_every_figure_of_the_summary_comes_from_the_records_and_links_to_its_section():
    text = PAGE.read_text(encoding="utf-8")
    rows = rows_of_figure_tables(text)
    assert len(rows) >= 20
    for header, row in rows:
        gpu_columns = len(header) - 2  # Figure | one column per GPU setup | Where
        values = re.findall(r"<!-- lab:value (\S+) .*?spread=range.*? -->", row)
        assert len(values) == gpu_columns, row
        machines = re.findall(r"machine=(\S+)", row)
        assert len(machines) == gpu_columns and len(set(machines)) == gpu_columns, row  # no column unlabelled
        link = re.search(r"\]\(([a-z-]+\.md)(#[\w-]+)?\) \|$", row)
        assert link and (REPO / "docs" / link[1]).is_file(), row
        cell_text = re.sub(r"<!-- .*? -->", "", row)
        assert not re.search(r"\d+(\.\d+)? ?(GB/s|TFLOP/s|µs|ms|MHz)", cell_text), row  # no typed figure


def test_the_summary_is_in_the_navigation():
    assert "numbers.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
