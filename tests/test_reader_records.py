"""End to end: a reader's own records show up beside the book's in the built site.

A reader runs ``python -m examples.lab run ... --out DIR`` and builds the site with
``make serve RECORDS=DIR`` (which sets ``LAB_EXTRA_RECORDS=DIR``). Here the run is a
real example on this CPU, and the build is the book's own, strict.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_build import REPO, build, contradict, page_claims

TOPIC = "graphs.launch_cost"
PAGE = "cuda-graphs/index.html"  # shows a table and a plot of TOPIC
BOOK_GPU = "NVIDIA H200"


def _labels(page: str) -> list[list[str]]:
    """The tab labels of every tabbed set of a built page, as text."""
    sets = re.findall(r'<div class="tabbed-labels">(.*?)</div>', page, re.S)
    return [[html.unescape(re.sub(r"<[^>]+>", "", label)) for label in re.findall(r"<label[^>]*>(.*?)</label>", s, re.S)]
            for s in sets]


@pytest.fixture(scope="module")
def reader_site(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("reader")
    records = base / "my-run"
    run = subprocess.run(
        [sys.executable, "-m", "examples.lab", "run", "--quick", "--device", "cpu", TOPIC, "--out", str(records)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    proc = build(REPO, base / "site", LAB_EXTRA_RECORDS=str(records))
    assert proc.returncode == 0, f"strict build with a reader's records failed\n{proc.stdout}{proc.stderr}"
    return records, base / "site"


def test_each_figure_of_the_topic_gains_a_tab_for_the_readers_machine(reader_site):
    records, site = reader_site
    (record,) = records.glob(f"*/{TOPIC}.json")
    host = json.loads(record.read_text())["machine"]["host_cpu"]
    page = (site / PAGE).read_text(encoding="utf-8")
    mine = f"CPU: {host} · {records.name}"  # the reader's tabs are labelled with the folder's name
    both = [labels for labels in _labels(page) if mine in labels]
    assert len(both) >= 2, _labels(page)  # the plot and the table of launch costs
    assert all(labels[0] == BOOK_GPU for labels in both), both  # the book's GPU stays first
    # The reader's record is served with the site and linked from its tab.
    served = f"lab-records/1-{records.name}/{record.parent.name}/{TOPIC}.json"
    assert (site / served).read_text() == record.read_text()
    assert f'href="../{served}"' in page


def test_appendix_a_lists_the_readers_records_with_their_provenance(reader_site):
    records, site = reader_site
    (record,) = records.glob(f"*/{TOPIC}.json")
    run = json.loads(record.read_text())["run"]
    page = (site / "appendix-records/index.html").read_text(encoding="utf-8")
    heading = f'<h3 id="{TOPIC.replace(".", "")}">'
    assert heading in page
    section = html.unescape(re.sub(r"<[^>]+>", "", page.split(heading, 1)[1].split("<h3 ", 1)[0]))
    assert f"· {records.name}" in section and BOOK_GPU in section
    assert run["command"] in section and "quick sizes" in section


def test_the_default_build_has_no_reader_tab(reader_site):
    records, site = reader_site
    proc = build(REPO, site.parent / "plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (site.parent / "plain" / PAGE).read_text(encoding="utf-8")
    assert records.name not in page and BOOK_GPU in page


def test_a_readers_gpu_that_breaks_a_claim_is_shown_not_fatal(tmp_path):
    """The book's claims bind the book's records; a reader's slower GPU is a finding on the badge."""
    claims = page_claims()
    assert claims, "the book's pages state claims"
    page, claim = claims[0]
    book = REPO / "docs" / "records" / "nvidia-h200" / f"{claim.topic}.json"
    data = json.loads(book.read_text())
    data["machine"] = {**data["machine"], "slug": "reader-gpu", "gpu_name": "Reader GPU"}
    root = tmp_path / "their-run"
    (root / "reader-gpu").mkdir(parents=True)
    shutil.copy(book, root / "reader-gpu" / book.name)
    (root / "reader-gpu" / book.name).write_text(json.dumps(data))
    contradict(root, claim)
    proc = build(REPO, tmp_path / "site", LAB_EXTRA_RECORDS=str(root))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert f"claim '{claim.describe()}' is VIOLATED on reader-gpu" in output
    report = json.loads((tmp_path / "site" / "claims.json").read_text())
    verdicts = next(c["verdicts"] for c in report["claims"]
                    if c["claim"] == claim.describe() and c["page"] == page.relative_to(REPO / "docs").as_posix())
    assert {v["machine"]: v["holds"] for v in verdicts} == {"nvidia-h200": True, "reader-gpu": False}
    shown = (tmp_path / "site" / page.relative_to(REPO / "docs").with_suffix("").as_posix() / "index.html")
    text = re.sub(r"<[^>]+>", "", shown.read_text(encoding="utf-8"))  # abbreviations wrap "GPU"
    assert "Reader GPU · their-run ✗ VIOLATED" in text
