"""End to end: a reader's own records show up beside the book's in the built site.

A reader runs ``python -m examples.lab run ... --out DIR`` and builds the site with
``make serve RECORDS=DIR`` (which sets ``LAB_EXTRA_RECORDS=DIR``). Here the run is a
real example on this CPU, and the build is the book's own, strict. A second folder is
shaped like a one-GPU reader's ``lab run --all``: every topic of the book on an H100,
no collective (one GPU cannot run them), and a legacy record that skipped one.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from examples.lab.compare import compare
from examples.lab.records import load_records, record_files
from examples.lab.registry import import_topic
from tests.test_build import REPO, build, checkable, contradict, page_claims

TOPIC = "graphs.launch_cost"
PAGE = "cuda-graphs/index.html"  # shows a table and a plot of TOPIC
BOOK_GPU = "NVIDIA H200"
READER_GPU, READER_SLUG = "NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"
SKIPPED = "one GPU: a collective needs at least two"


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


def _one_record(records: Path) -> Path:
    (record,) = [p for p in record_files(records) if p.parent.name == TOPIC]  # <slug>/<topic>/<run>.json
    return record


def test_each_figure_of_the_topic_gains_a_tab_for_the_readers_machine(reader_site):
    records, site = reader_site
    record = _one_record(records)
    host = json.loads(record.read_text())["machine"]["host_cpu"]
    page = (site / PAGE).read_text(encoding="utf-8")
    mine = f"CPU: {host} · {records.name}"  # the reader's tabs are labelled with the folder's name
    both = [labels for labels in _labels(page) if mine in labels]
    assert len(both) >= 2, _labels(page)  # the plot and the table of launch costs
    assert all(labels[0] == BOOK_GPU for labels in both), both  # the book's GPU stays first
    # The reader's record is served with the site and linked from its tab.
    served = f"lab-records/1-{records.name}/{record.relative_to(records).as_posix()}"
    assert (site / served).read_text() == record.read_text()
    assert f'href="../{served}"' in page


def test_appendix_a_lists_the_readers_records_with_their_provenance(reader_site):
    records, site = reader_site
    run = json.loads(_one_record(records).read_text())["run"]
    page = (site / "appendix-records/index.html").read_text(encoding="utf-8")
    heading = f'<h3 id="{TOPIC.replace(".", "")}">'
    assert heading in page
    section = html.unescape(re.sub(r"<[^>]+>", "", page.split(heading, 1)[1].split("<h3 ", 1)[0]))
    assert f"· {records.name}" in section and BOOK_GPU in section
    assert run["command"] in section and "quick sizes" in section and run["id"] in section


def test_the_default_build_has_no_reader_tab(reader_site, built_site):
    records, _ = reader_site
    page = (built_site / PAGE).read_text(encoding="utf-8")
    assert records.name not in page and BOOK_GPU in page


# -- a one-GPU reader's `lab run --all` ------------------------------------------------------

@pytest.fixture(scope="module")
def one_gpu_reader(tmp_path_factory) -> tuple[Path, Path]:
    """Every topic of the book measured on one H100 (no collective; the book's H200 runs, relabelled), and a
    legacy record that skipped one."""
    records = tmp_path_factory.mktemp("one-gpu") / "my-h100"
    book = [r for r in load_records(REPO / "docs" / "records") if r.machine.slug == "nvidia-h200"]
    reader_runs = {old: f"20261201T09000{i}Z-0a1b2c3d-424{i}"
                   for i, old in enumerate(sorted({r.run.id for r in book if r.machine.gpu_count == 1}))}
    for record in book:
        if record.machine.gpu_count > 1:
            continue  # the runner skips a topic that needs two GPUs and writes nothing
        run_id = reader_runs[record.run.id]
        data = json.loads(record.model_dump_json())
        data["machine"].update(slug=READER_SLUG, gpu_name=READER_GPU, gpu_count=1)
        data["run"].update(id=run_id, boot_id="0a1b2c3d-0000-4000-8000-000000000000", wall_s=30.0,
                           date=f"2026-12-01T09:00:0{run_id[14]}+00:00")
        path = records / READER_SLUG / record.topic / f"{run_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
    # Before runs had ids, a one-GPU run of a collective wrote an empty record that said why.
    book = json.loads(next(r for r in load_records(REPO / "docs" / "records")
                           if r.topic == "collectives.ring_allreduce").model_dump_json())
    # Version 1 had no run ids, no power limit and no load readings.
    run = {k: v for k, v in book["run"].items() if k not in ("id", "boot_id", "wall_s")}
    machine = {k: v for k, v in book["machine"].items() if k != "power_limit_w"}
    legacy = {k: v for k, v in book.items() if k != "load"}
    legacy.update(schema_version=1, run=run, results=[], notes={"skipped": SKIPPED},
                  machine={**machine, "slug": READER_SLUG, "gpu_name": READER_GPU, "gpu_count": 1})
    (records / READER_SLUG / "collectives.ring_allreduce.json").write_text(json.dumps(legacy, indent=1))
    site = records.parent / "site"
    proc = build(REPO, site, LAB_EXTRA_RECORDS=str(records))
    assert proc.returncode == 0, f"strict build with a one-GPU reader's records failed\n{proc.stdout}{proc.stderr}"
    return records, site


def test_a_one_gpu_readers_run_builds_with_a_tab_per_topic_and_the_skipped_one_listed(one_gpu_reader):
    records, site = one_gpu_reader
    mine = f"{READER_GPU} · {records.name}"
    page = (site / PAGE).read_text(encoding="utf-8")
    # The book's GPUs first (its primary one leading), then the reader's run.
    assert any(labels[0] == BOOK_GPU and labels[-1] == mine for labels in _labels(page)), _labels(page)
    collectives = (site / "collectives" / "index.html").read_text(encoding="utf-8")
    assert mine not in collectives and "2 × NVIDIA H200" in collectives  # the book's two GPUs, no reader tab
    raw = (site / "appendix-records" / "index.html").read_text(encoding="utf-8")
    appendix = html.unescape(re.sub(r"<[^>]+>", "", raw))
    section = html.unescape(re.sub(r"<[^>]+>", "", raw.split('<h3 id="collectivesring_allreduce">', 1)[1]
                                   .split("<h3 ", 1)[0]))
    assert f"skipped: {SKIPPED}" in section and "2 × NVIDIA H200" in section
    assert f"{READER_GPU} · {records.name} ({READER_SLUG}):" in appendix  # the summary counts its figures
    report = json.loads((site / "claims.json").read_text())
    machines = {v["machine"] for c in report["claims"] for v in c["verdicts"]}
    # A claim whose stale records lack its figure is "unverified" until re-measured, never violated.
    assert READER_SLUG in machines and all((c["holds"] and c["runs_min"] >= 1) or c["status"] == "unverified"
                                           for c in report["claims"])


def test_compare_pairs_a_one_gpu_readers_run_with_the_book(one_gpu_reader):
    records, _ = one_gpu_reader
    result = compare(records)
    (machine,) = result.machines
    assert machine.machine == READER_SLUG and machine.figures
    assert all(f.ratio == 1 for f in machine.figures if f.ratio is not None)  # the same numbers, copied
    needs_two = {t for t in machine.only_book if int(getattr(import_topic(t), "MIN_GPUS", 1)) > 1}
    assert machine.only_book and needs_two == set(machine.only_book) and not machine.only_reader


def test_a_readers_gpu_that_breaks_a_claim_is_shown_not_fatal(tmp_path):
    """The book's claims bind the book's records; a reader's slower GPU is a finding on the badge."""
    claims = page_claims()
    assert claims, "the book's pages state claims"
    page, claim = next((p, c) for p, c in claims if checkable(REPO / "docs" / "records", c))
    book = next(r for r in load_records(REPO / "docs" / "records")
                if r.topic == claim.topic and r.machine.device == "cuda")
    data = json.loads(book.model_dump_json())
    data["machine"] = {**data["machine"], "slug": "reader-gpu", "gpu_name": "Reader GPU"}
    data["run"]["id"] = "their-run-1"
    root = tmp_path / "their-run"
    (root / "reader-gpu" / claim.topic).mkdir(parents=True)
    (root / "reader-gpu" / claim.topic / "their-run-1.json").write_text(json.dumps(data))
    contradict(root, claim)
    proc = build(REPO, tmp_path / "site", LAB_EXTRA_RECORDS=str(root))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert f"claim '{claim.describe()}' is VIOLATED on reader-gpu" in output
    report = json.loads((tmp_path / "site" / "claims.json").read_text())
    verdicts = next(c["verdicts"] for c in report["claims"]
                    if c["claim"] == claim.describe() and c["page"] == page.relative_to(REPO / "docs").as_posix())
    book_machines = {r.machine.slug for r in load_records(REPO / "docs" / "records") if r.topic == claim.topic}
    assert {v["machine"]: v["holds"] for v in verdicts} == {**{m: True for m in book_machines}, "reader-gpu": False}
    shown = (tmp_path / "site" / page.relative_to(REPO / "docs").with_suffix("").as_posix() / "index.html")
    text = re.sub(r"<[^>]+>", "", shown.read_text(encoding="utf-8"))  # abbreviations wrap "GPU"
    assert "Reader GPU · their-run ✗ VIOLATED" in text
