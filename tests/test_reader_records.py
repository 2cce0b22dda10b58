"""End to end: a reader's own records show up beside the book's in the built site.

A reader runs ``python -m examples.lab run ... --out DIR`` and builds the site with
``make serve RECORDS=DIR`` (which sets ``LAB_EXTRA_RECORDS=DIR``). Here the run is a
real example on this CPU, and the build is the book's own, strict. A second folder is
shaped like a one-GPU reader's ``lab run --all``: every topic of the book on an H100,
no collective (one GPU cannot run them), and a legacy record that skipped one. A third
holds a slower GPU's run that breaks one of the book's claims. A fourth holds odd records the
book cannot use in places (``tests/reader_folders.py``: zeros on a log axis, another unit under a
calculator's plot, renamed figures, cases as text) and files it cannot load at all.

The four folders go into one strict build (``LAB_EXTRA_RECORDS`` lists folders as ``PATH``
does): a build of the book is most of a minute, so one, not five; and one without the plugins
that read no record (``UNREAD``). Each test reads its own
folder in it: the tabs and Appendix A name the folder, and a claim's verdict names the
group it came from (``lab-records/<n>-<folder>/...``).

The same build is the book's check that one of its own runs contradicting one of its claims
fails ``--strict`` (the medians of its runs may still keep the claim): it builds a copy of the
book in which one run breaks a claim of a topic no reader's folder touches. A strict build
writes the whole site before it fails, and fails on the first warning: the readers' folders
pass as they would alone when the only warnings are that contradiction's.
"""
from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from examples.lab.compare import compare
from examples.lab.provenance import source_sha256
from examples.lab.records import counted_runs, load_records, record_files
from examples.lab.registry import import_topic
from tests.reader_folders import broken_reasons, odd_folder
from tests.test_build import (REPO, as_runs, build, checkable, contradict, page_claims, scratch_copy, shortcodes,
                              without_plugins)

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


class Contradicted(NamedTuple):
    """One of the book's own GPU runs, rewritten to break one of its claims."""

    page: str  # the page that states the claim, under docs/
    claim: shortcodes.ClaimRequest
    record: Path  # the rewritten run (in the copy of the book that was built)
    runs: int  # the runs of its GPU group
    group: str  # the claim's verdicts name this group
    returncode: int  # the strict build's


class Readers(NamedTuple):
    """The readers' folders, in the order of ``LAB_EXTRA_RECORDS`` (so ``lab-records/1-my-run``, ...),
    the site built with all four (and the book's run that breaks a claim), and its output."""

    cpu: Path  # a real quick run of TOPIC on this CPU
    breaking: Path  # a slower GPU's run of one claim's topic, that breaks the claim
    one_gpu: Path  # a run of every topic of the book on one H100 (the book's newest H200 runs, relabelled)
    odd: Path  # odd and broken records of TOPIC (tests/reader_folders.py)
    site: Path
    output: str
    odd_files: dict[str, list[Path]]  # the odd folder's files, per oddity (and "broken")
    book: Contradicted  # the book's own run that breaks a claim, and the build's exit status

    def prefix(self, folder: Path) -> str:
        """Where ``folder``'s runs are in the site, and what its claims' verdicts name as their group."""
        return f"lab-records/{list(self[:4]).index(folder) + 1}-{folder.name}/"


#: Plugins of the book that read no record, left out of this build: the search index and the print
#: page (every page again, on one; the book's own build checks both). A third of the build's time.
UNREAD = ("search", "print-site")

#: The odd records the build meets (each its own GPU tab): a few kinds, each failing a different check.
ODD = ["zeros", "other-units", "renamed-metrics", "text-cases"]


#: A WARNING line of mkdocs (the level padded as its formatter pads it); strict fails on any.
WARNING = re.compile(r"^WARNING\s+-\s+(.*)$", re.M)


@pytest.fixture(scope="module")
def readers(tmp_path_factory, cli) -> Readers:
    base = tmp_path_factory.mktemp("readers")
    cpu = base / "my-run"
    run = cli.run("-m", "examples.lab", "run", "--quick", "--device", "cpu", TOPIC, "--out", cpu, timeout=300)
    assert run.returncode == 0, cli.explain(run)
    breaking = base / "their-run"
    _breaking_run(breaking)
    one_gpu = base / "my-h100"
    _one_gpu_run(one_gpu)
    odd = base / "odd-run"
    odd_files = odd_folder(odd, topics=[TOPIC], oddities=ODD)
    tree = scratch_copy(base)  # the book, one of whose runs is rewritten below
    without_plugins(tree, UNREAD)
    records = tree / "docs" / "records"
    untouched = {TOPIC, _breaking_claim()[1].topic}  # the readers' folders read these topics' claims
    page, claim = next((p, c) for p, c in page_claims() if c.topic not in untouched and checkable(records, c))
    if not any(p.parent.name == claim.topic for p in record_files(records)):
        as_runs(records, claim.topic, 3)  # legacy single runs: make several
    runs = [p for p in record_files(records) if p.parent.name == claim.topic]
    assert len(runs) >= 3, runs
    record = contradict(records, claim)
    data = json.loads(record.read_text(encoding="utf-8"))
    site = base / "site"
    proc = build(tree, site, LAB_EXTRA_RECORDS=os.pathsep.join(map(str, (cpu, breaking, one_gpu, odd))))
    output = proc.stdout + proc.stderr
    assert (site / "index.html").is_file(), f"the strict build wrote no site\n{output}"
    where = page.relative_to(REPO / "docs").as_posix()
    # The runs the build counts, by the book's one rule (older code versions' runs are kept beside).
    current = source_sha256(REPO.joinpath("examples", *claim.topic.split(".")).with_suffix(".py"))
    versions = {p: json.loads(p.read_text(encoding="utf-8"))["source_sha256"]
                for p in runs if p.parent == record.parent}  # file order: oldest first
    counted = counted_runs(list(versions), version=versions.get, is_current=lambda p: versions[p] == current)
    book = Contradicted(where, claim, record, len(counted),
                        f"records/{data['machine']['slug']}/{claim.topic}", proc.returncode)
    others = [w for w in WARNING.findall(output) if f"(record {book.group}/{record.name})" not in w]
    assert not others, ("the readers' records (or the book itself) made the strict build warn, beside the "
                        f"book's contradicted run:\n" + "\n".join(others) + f"\n{output}")
    return Readers(cpu, breaking, one_gpu, odd, site, output, odd_files, book)


def test_a_contradicted_claim_fails_the_strict_build(readers):
    """One run of three breaks a claim: the medians still keep it, the build must fail all the same."""
    book, output = readers.book, readers.output
    assert book.returncode != 0, f"the build passed although {book.record} contradicts {book.claim.describe()}\n{output}"
    slug = book.group.split("/")[1]
    assert f"{book.page}: claim '{book.claim.describe()}' is VIOLATED on {slug}" in output, output
    assert f"in 1 of {book.runs} runs" in output, output
    assert "Aborted with" in output and "in strict mode" in output, output


def _one_record(records: Path) -> Path:
    (record,) = [p for p in record_files(records) if p.parent.name == TOPIC]  # <slug>/<topic>/<run>.json
    return record


def test_each_figure_of_the_topic_gains_a_tab_for_the_readers_machine(readers):
    records, site = readers.cpu, readers.site
    record = _one_record(records)
    host = json.loads(record.read_text())["machine"]["host_cpu"]
    page = (site / PAGE).read_text(encoding="utf-8")
    mine = f"CPU: {host} · {records.name}"  # the reader's tabs are labelled with the folder's name
    both = [labels for labels in _labels(page) if mine in labels]
    assert len(both) >= 2, _labels(page)  # the plot and the table of launch costs
    assert all(labels[0] == BOOK_GPU for labels in both), both  # the book's GPU stays first
    # The reader's record is served with the site and linked from its tab.
    served = f"{readers.prefix(records)}{record.relative_to(records).as_posix()}"
    assert served.startswith("lab-records/1-my-run/")  # the first folder of LAB_EXTRA_RECORDS
    assert (site / served).read_text() == record.read_text()
    assert f'href="../{served}"' in page


def test_appendix_a_lists_the_readers_records_with_their_provenance(readers):
    records, site = readers.cpu, readers.site
    run = json.loads(_one_record(records).read_text())["run"]
    # On the page of the topic's chapter (graphs: Chapter 5) in Appendix A.
    page = (site / "appendix-records/cuda-graphs/index.html").read_text(encoding="utf-8")
    heading = f'<h3 class="lab-record" id="{TOPIC.replace(".", "")}">'
    assert heading in page
    section = html.unescape(re.sub(r"<[^>]+>", "", page.split(heading, 1)[1].split("<h3 ", 1)[0]))
    assert f"· {records.name}" in section and BOOK_GPU in section
    assert run["command"] in section and "quick sizes" in section and run["id"] in section


def test_the_default_build_has_no_reader_tab(readers, built_site):
    page = (built_site / PAGE).read_text(encoding="utf-8")
    assert BOOK_GPU in page
    assert not any(folder.name in page for folder in readers[:4])


# -- a one-GPU reader's `lab run --all` ------------------------------------------------------

def _one_gpu_run(records: Path, every_run: bool = False) -> None:
    """A reader's ``lab run --all`` on one H100: one run of every topic of the book (no collective; the
    book's newest H200 run of the current code, relabelled), and a legacy record that skipped one.
    ``every_run``: each of the book's H200 runs instead, relabelled (the same numbers as the book's)."""
    book = [r for r in load_records(REPO / "docs" / "records")
            if r.machine.slug == "nvidia-h200" and r.machine.gpu_count == 1]  # the runner skips collectives
    if not every_run:
        newest: dict[str, object] = {}
        for record in sorted(book, key=lambda r: (r.source_sha256 == source_sha256(REPO / r.source), r.run.date)):
            newest[record.topic] = record  # current runs sort last, the newest of them last of all
        book = list(newest.values())
    # One reader run per book run, a minute apart: (run id, date).
    reader_runs = {old: (f"20261201T{9 + i // 60:02d}{i % 60:02d}00Z-0a1b2c3d-{4240 + i}",
                         f"2026-12-01T{9 + i // 60:02d}:{i % 60:02d}:00+00:00")
                   for i, old in enumerate(sorted({r.run.id for r in book}))}
    for record in book:
        run_id, date = reader_runs[record.run.id]
        data = json.loads(record.model_dump_json())
        data["machine"].update(slug=READER_SLUG, gpu_name=READER_GPU, gpu_count=1)
        data["run"].update(id=run_id, boot_id="0a1b2c3d-0000-4000-8000-000000000000", wall_s=30.0, date=date)
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


def _kept(claim: dict, leave_out: str | tuple[str, ...]) -> bool:
    """The claim holds (on at least one run per GPU), or stale records leave it unverified, never violated:
    as claims.json's ``holds``, ``runs_min`` and ``status`` say, over the verdicts whose group is not under
    ``leave_out`` (the folder whose run breaks a claim on purpose)."""
    verdicts = [v for v in claim["verdicts"] if not v["group"].startswith(leave_out)]
    holds = bool(verdicts) and all(v["holds"] for v in verdicts)
    runs_min = min((v["runs"] for v in verdicts), default=0)
    statuses = {v["status"] for v in verdicts}
    unverified = "violated" not in statuses and "unverified" in statuses
    return (holds and runs_min >= 1) or unverified


def test_a_one_gpu_readers_run_builds_with_a_tab_per_topic_and_the_skipped_one_listed(readers):
    records, site = readers.one_gpu, readers.site
    mine = f"{READER_GPU} · {records.name}"
    page = (site / PAGE).read_text(encoding="utf-8")
    # The book's GPUs first (its primary one leading), then the reader's run.
    assert any(labels[0] == BOOK_GPU and labels[-1] == mine for labels in _labels(page)), _labels(page)
    collectives = (site / "collectives" / "index.html").read_text(encoding="utf-8")
    assert mine not in collectives and "2 × NVIDIA H200" in collectives  # the book's two GPUs, no reader tab
    raw = (site / "appendix-records" / "collectives" / "index.html").read_text(encoding="utf-8")
    appendix = html.unescape(re.sub(r"<[^>]+>", "", (site / "appendix-records" / "index.html")
                                    .read_text(encoding="utf-8")))  # the overview's summary
    section = html.unescape(re.sub(r"<[^>]+>", "", raw.split('<h3 class="lab-record" id="collectivesring_allreduce">',
                                                              1)[1].split("<h3 ", 1)[0]))
    assert f"skipped: {SKIPPED}" in section and "2 × NVIDIA H200" in section
    assert f"{READER_GPU} · {records.name} ({READER_SLUG}):" in appendix  # the summary counts its figures
    report = json.loads((site / "claims.json").read_text())
    machines = {v["machine"] for c in report["claims"] for v in c["verdicts"]}
    # A claim whose stale records lack its figure is "unverified" until re-measured, never violated.
    mine_verdicts = {v["machine"] for c in report["claims"] for v in c["verdicts"]
                     if v["group"].startswith(readers.prefix(records))}
    assert READER_SLUG in machines and mine_verdicts == {READER_SLUG}
    leave_out = (readers.prefix(readers.breaking), readers.prefix(readers.odd),  # the folders odd on purpose
                 readers.book.group)  # and the book's run broken on purpose
    # A claim bound to one GPU kind (machine=...) states that kind's figures; this reader's "H100"
    # is the book's H200 runs relabelled, so it may break an H100-only bound without being wrong.
    assert all(_kept(c, leave_out=leave_out + ((readers.prefix(records),) if c["machine"] else ()))
               for c in report["claims"])


def test_compare_pairs_a_one_gpu_readers_run_with_the_book(tmp_path):
    records = tmp_path / "my-h100"
    _one_gpu_run(records, every_run=True)
    result = compare(records)
    (machine,) = result.machines
    assert machine.machine == READER_SLUG and machine.figures
    assert all(f.ratio == 1 for f in machine.figures if f.ratio is not None)  # the same numbers, copied
    needs_two = {t for t in machine.only_book if int(getattr(import_topic(t), "MIN_GPUS", 1)) > 1}
    assert machine.only_book and needs_two == set(machine.only_book) and not machine.only_reader


def _breaking_claim():
    """The first claim of the book's pages that its records can check: (page, claim)."""
    claims = page_claims()
    assert claims, "the book's pages state claims"
    return next((p, c) for p, c in claims if checkable(REPO / "docs" / "records", c))


def _breaking_run(root: Path) -> None:
    """A reader's GPU ("reader-gpu"), one run of the claim's topic, its figure on the wrong side of the claim."""
    page, claim = _breaking_claim()
    book = next(r for r in load_records(REPO / "docs" / "records")
                if r.topic == claim.topic and r.machine.device == "cuda")
    data = json.loads(book.model_dump_json())
    data["machine"] = {**data["machine"], "slug": "reader-gpu", "gpu_name": "Reader GPU"}
    data["run"]["id"] = "their-run-1"
    (root / "reader-gpu" / claim.topic).mkdir(parents=True)
    (root / "reader-gpu" / claim.topic / "their-run-1.json").write_text(json.dumps(data))
    contradict(root, claim)


def test_a_readers_gpu_that_breaks_a_claim_is_shown_not_fatal(readers):
    """The book's claims bind the book's records; a reader's slower GPU is a finding on the badge."""
    page, claim = _breaking_claim()
    site, output = readers.site, readers.output  # no warning of the readers' (the fixture checks it)
    assert f"claim '{claim.describe()}' is VIOLATED on reader-gpu" in output
    report = json.loads((site / "claims.json").read_text())
    verdicts = next(c["verdicts"] for c in report["claims"]
                    if c["claim"] == claim.describe() and c["page"] == page.relative_to(REPO / "docs").as_posix())
    others = tuple(readers.prefix(folder) for folder in (readers.cpu, readers.one_gpu, readers.odd))
    book_machines = {r.machine.slug for r in load_records(REPO / "docs" / "records") if r.topic == claim.topic}
    assert {v["machine"]: v["holds"] for v in verdicts if not v["group"].startswith(others)} == {
        **{m: True for m in book_machines}, "reader-gpu": False}
    assert all(v["group"].startswith(readers.prefix(readers.breaking)) for v in verdicts if v["machine"] == "reader-gpu")
    shown = (site / page.relative_to(REPO / "docs").with_suffix("").as_posix() / "index.html")
    text = re.sub(r"<[^>]+>", "", shown.read_text(encoding="utf-8"))  # abbreviations wrap "GPU"
    assert "Reader GPU · their-run ✗ VIOLATED" in text


# -- a reader's folder the book cannot wholly use --------------------------------------------

def _left_out(output: str) -> dict[str, list[str]]:
    """The build's reports of readers' files left out: file -> the rest of each line (where, and why)."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = re.search(r"records: left out (\S+) from (.*)$", line)
        if match:
            found.setdefault(match[1], []).append(match[2])
    return found


def test_a_readers_file_that_does_not_load_is_reported_and_left_out(readers):
    reports = _left_out(readers.output)
    for path in readers.odd_files["broken"]:
        (line,) = reports[str(path)]  # once, when the records are loaded
        assert line.startswith("the build: ") and broken_reasons()[path.stem] in line, line
    appendix = html.unescape(re.sub(r"<[^>]+>", "", (readers.site / "appendix-records" / "index.html")
                                    .read_text(encoding="utf-8")))
    assert "Left out of this build" in appendix
    assert all(str(path) in appendix for path in readers.odd_files["broken"])
    assert "reader-broken" not in (readers.site / PAGE).read_text(encoding="utf-8")


def test_a_readers_group_a_figure_cannot_use_is_left_out_of_it_and_shown_where_it_can_be(readers):
    """Each odd group is left out of what it breaks, with its file and reason, and shown elsewhere."""
    reports = _left_out(readers.output)
    (zeros,) = readers.odd_files["zeros"]
    assert any("lab:plot graphs.launch_cost" in r and "0 drawn" in r for r in reports[str(zeros)]), reports[str(zeros)]
    (units,) = readers.odd_files["other-units"]
    assert any("lab:plot" in r and "its y is in furlongs" in r and "anchor=launch-cost" in r
               for r in reports[str(units)]), reports[str(units)]
    (renamed,) = readers.odd_files["renamed-metrics"]
    assert any("lab:claim graphs.launch_cost" in r and "has no metric" in r for r in reports[str(renamed)])
    (text,) = readers.odd_files["text-cases"]
    assert any("logx=true needs numeric x values" in r for r in reports[str(text)]), reports[str(text)]
    page = (readers.site / PAGE).read_text(encoding="utf-8")
    tabs = _labels(page)
    # Where they can be used they are: the table of launch costs shows zeros and the other unit.
    for oddity in ("zeros", "other-units"):
        label = f"Reader GPU ({oddity}) · {readers.odd.name}"
        assert any(label in labels for labels in tabs), (oddity, tabs)
    # The plot a calculator marks has the book's GPUs and none of the odd ones.
    figures = re.findall(r'<figure[^>]*data-lab-anchor="launch-cost".*?</figure>', page, re.S)
    assert figures and not any("Reader GPU (" in f for f in figures)
    # Every report names a file of the folder and says, in one line, what and why.
    assert all(Path(f).is_relative_to(readers.odd) for f in reports if "odd-run" in f)
    claims = json.loads((readers.site / "claims.json").read_text())
    odd_verdicts = [v for c in claims["claims"] for v in c["verdicts"] if v["group"].startswith(readers.prefix(readers.odd))]
    assert not any(v["machine"] in ("reader-renamed-metrics", "reader-text-cases") for v in odd_verdicts)
