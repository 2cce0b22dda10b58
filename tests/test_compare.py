"""``python -m examples.lab compare DIR``: a reader's records beside the book's.

The reader's records are made the way a reader makes them: by running a real example
on this CPU with ``python -m examples.lab run --quick --device cpu``.
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from examples.lab.__main__ import main
from examples.lab.compare import BOOK_MACHINE, BOOK_ROOT, compare
from examples.lab.records import load_records, record_files

REPO = Path(__file__).resolve().parents[1]
TOPIC = "graphs.launch_cost"


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reader") / "my-run"
    proc = subprocess.run(
        [sys.executable, "-m", "examples.lab", "run", "--quick", "--device", "cpu", TOPIC, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _record(root: Path) -> Path:
    """The reader's one record of TOPIC: ``<machine>/<topic>/<run id>.json``."""
    (path,) = [p for p in record_files(root) if p.parent.name == TOPIC]
    return path


def _medians(path: Path) -> dict[tuple[str, str], float]:
    data = json.loads(path.read_text())
    return {(json.dumps(r["case"], sort_keys=True), name): m["median"]
            for r in data["results"] for name, m in r["metrics"].items()}


def _book_runs() -> dict[tuple[str, str], list[float]]:
    """Each figure of the book's machine for TOPIC: the median of every run that measured it."""
    out: dict[tuple[str, str], list[float]] = {}
    for record in load_records(BOOK_ROOT):
        if record.machine.slug == BOOK_MACHINE and record.topic == TOPIC:
            for row in record.results:
                for name, m in row.metrics.items():
                    out.setdefault((json.dumps(row.case, sort_keys=True), name), []).append(m.median)
    return out


def _runs(source: Path, root: Path, slug: str, scales: tuple[float, ...]) -> None:
    """Copies of one record as independent runs under ``root``, every median scaled."""
    for i, scale in enumerate(scales, 1):
        data = json.loads(source.read_text())
        data.update(schema_version=2)
        data["machine"]["slug"] = slug
        data["run"] = {**data["run"], "id": f"run-{i}", "date": f"2026-12-0{i}T00:00:00+00:00"}
        for row in data["results"]:
            for m in row["metrics"].values():
                for key in ("median", "q1", "q3", "min", "max"):
                    if m.get(key) is not None:
                        m[key] *= scale
        path = root / slug / TOPIC / f"run-{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = main(["compare", *argv])
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def test_every_shared_figure_pairs_book_and_reader_with_their_ratio(reader, capsys):
    status, out, err = _run(capsys, str(reader), "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["book_machine"] == BOOK_MACHINE
    (machine,) = result["machines"]
    mine = _medians(_record(reader))
    book = _book_runs()
    shared = set(mine) & set(book)
    assert shared, "the quick CPU run and the book share eager cases of launch_cost"
    got = {(json.dumps(f["case"], sort_keys=True), f["metric"]): f for f in machine["figures"]}
    assert set(got) == shared
    for key, figure in got.items():
        median = statistics.median(book[key])
        assert figure["book"] == median and figure["reader"] == mine[key] and figure["reader_runs"] == 1
        assert (figure["book_low"], figure["book_high"], figure["book_runs"]) == \
            (min(book[key]), max(book[key]), len(book[key]))
        assert figure["ratio"] == pytest.approx(mine[key] / median, rel=1e-12)
    # Figures only one side has are counted, per topic.
    assert machine["only_reader"].get(TOPIC, 0) == len(set(mine) - shared)
    assert machine["only_book"][TOPIC] == len(set(book) - shared)


def test_the_table_names_both_machines_and_each_figure(reader, capsys):
    status, out, _ = _run(capsys, str(reader))
    assert status == 0
    assert "NVIDIA H200 (nvidia-h200)" in out and "reader: CPU: " in out
    result = compare(reader)
    (machine,) = result.machines
    for f in machine.figures:
        line = next(line for line in out.splitlines() if line.startswith(TOPIC) and f" {f.metric} " in line
                    and all(f"{k}={v}" in line or f'{k}="{v}"' in line for k, v in f.case.items()))
        assert line.endswith(f"{f.ratio:.3g}x")
    assert f"{len(machine.figures)} figures in both" in out
    assert "only in the book:" in out


def test_figures_are_medians_across_runs_on_both_sides(reader, tmp_path, capsys):
    """Three book runs and two reader runs: medians on both sides, the book's range beside them."""
    book, mine = tmp_path / "book", tmp_path / "mine"
    _runs(_record(reader), book, "book-gpu", (1.0, 1.1, 1.5))
    _runs(_record(reader), mine, "my-gpu", (2.0, 2.4))
    result = compare(mine, book, "book-gpu")
    (machine,) = result.machines
    one = _medians(_record(reader))
    assert len(machine.figures) == len(one) and not machine.only_book and not machine.only_reader
    for f in machine.figures:
        value = one[(json.dumps(f.case, sort_keys=True), f.metric)]
        assert (f.book, f.book_low, f.book_high, f.book_runs) == pytest.approx((1.1 * value, value, 1.5 * value, 3))
        assert (f.reader, f.reader_runs) == pytest.approx((2.2 * value, 2))
        assert f.ratio == pytest.approx(2.2 / 1.1)
    status, out, _ = _run(capsys, str(mine), "--book", str(book), "--machine", "book-gpu")
    assert status == 0 and "book range (runs)" in out and "reader (runs)" in out
    f = machine.figures[0]
    line = next(line for line in out.splitlines() if line.startswith(TOPIC) and f" {f.metric} " in line)
    assert f"{f.book_low:.4g}-{f.book_high:.4g} {f.unit} (3)" in line and line.endswith("2x")


def test_no_overlap_is_said_plainly_and_is_not_an_error(reader, tmp_path, capsys):
    # A book whose only record of the topic has cases the reader never ran.
    data = json.loads(_record(reader).read_text())
    data["machine"]["slug"] = "book-gpu"
    data["results"] = [{**r, "case": {**r["case"], "kernels": 100_000 + i}} for i, r in enumerate(data["results"])]
    path = tmp_path / "book" / "book-gpu" / TOPIC / f"{data['run']['id']}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    status, out, _ = _run(capsys, str(reader), "--book", str(tmp_path / "book"), "--machine", "book-gpu")
    assert status == 0
    assert "no figure in common" in out
    assert f"only in the book: {len(_medians(_record(reader)))} figures" in out


def test_an_empty_folder_is_reported_not_an_error(tmp_path, capsys):
    status, out, _ = _run(capsys, str(tmp_path))
    assert status == 0 and "holds no records" in out


@pytest.mark.parametrize("damage, message", [
    (lambda d: {**d, "schema_version": 3}, "schema_version 3 is not one this code reads"),
    (lambda d: {k: v for k, v in d.items() if k != "machine"}, "machine"),
])
def test_a_record_of_another_schema_or_malformed_is_rejected_naming_its_file(reader, tmp_path, capsys, damage, message):
    copy = tmp_path / "run"
    shutil.copytree(reader, copy)
    path = _record(copy)
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))
    status, out, err = _run(capsys, str(copy))
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and str(path) in err and message in err


def test_a_file_that_is_not_json_is_rejected(reader, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(reader, copy)
    path = _record(copy)
    path.write_text("{ not json")
    status, _, err = _run(capsys, str(copy))
    assert status == 1 and str(path) in err and "not JSON" in err


def test_a_missing_folder_is_a_usage_error_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "examples.lab", "compare", str(tmp_path / "nowhere")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "no such folder" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_book_machine_is_a_usage_error(reader, capsys):
    status, _, err = _run(capsys, str(reader), "--machine", "no-such-gpu")
    assert status == 2 and "no records of machine no-such-gpu" in err
