"""Records that cannot be true are refused; a record is written whole or not at all; Ctrl-C stops a run cleanly.

The validator (``examples.lab.records``: ``lab validate`` and the site's loader read through it)
refuses statistics out of order, a sign the unit forbids and a share above its whole, in one line
that names the file and the statistic. The mutations here start from the book's own records, so
each test also shows that a real record passes for the right reason: changed in one figure, it fails.
"""
from __future__ import annotations

import io
import json
import os
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from examples.lab import records as records_mod
from examples.lab.metrics import METRICS, SHARES, SIGNED_METRICS, TOPIC_METRICS, TOPIC_RATIOS
from examples.lab.records import (BOOK_RECORDS, RecordError, check_figure, dump_record, load_record, load_records,
                                  parse_record, record_files, unit_kind, write_record)

REPO = Path(__file__).resolve().parents[1]
LAUNCH = next(p for p in record_files(BOOK_RECORDS) if p.parts[-2] == "graphs.launch_cost")


def _data(path: Path = LAUNCH) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _first(data: dict, unit: str | None = None, name: str | None = None) -> tuple[int, str, dict]:
    """The first metric (of ``unit``, or named ``name``) of a record's JSON: (row index, name, metric)."""
    for i, row in enumerate(data["results"]):
        for n, m in row["metrics"].items():
            if (unit is None or m["unit"] == unit) and (name is None or n == name):
                return i, n, m
    raise LookupError(unit or name)


def _find(unit: str | None = None, name: str | None = None) -> tuple[Path, dict]:
    """A committed record with a metric of ``unit`` (or named ``name``) and its JSON."""
    for path in record_files(BOOK_RECORDS):
        data = _data(path)
        try:
            _first(data, unit, name)
        except LookupError:
            continue
        return path, data
    raise LookupError(unit or name)


def _refused(path: Path, data: dict) -> str:
    with pytest.raises(RecordError) as caught:
        parse_record(json.dumps(data), str(path))
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{path}: "), line
    return line


# -- statistics out of order ----------------------------------------------------------

@pytest.mark.parametrize("swap, field", [
    (("q1", "median"), "median"), (("median", "q3"), "q3"), (("min", "q1"), "q1"), (("q3", "max"), "max"),
])
def test_statistics_out_of_order_are_refused_naming_file_and_statistic(swap, field):
    data = _data()
    i, name, m = _first(data, "us")
    low, high = swap
    m[low] = m[high] + 1  # above the statistic after it: the error names that one
    line = _refused(LAUNCH, data)
    assert f"results.{i}.metrics.{name}.{field}:" in line and "min ≤ q1 ≤ median ≤ q3 ≤ max" in line


def test_the_loads_clocks_out_of_order_are_refused():
    path, data = next((p, d) for p in record_files(BOOK_RECORDS) for d in [_data(p)] if d.get("load"))
    data["load"]["sm_mhz_max"] = data["load"]["sm_mhz_min"] - 1
    assert "load.sm_mhz_" in _refused(path, data)


# -- a sign the unit forbids --------------------------------------------------------------

@pytest.mark.parametrize("unit, kind", [
    ("us", "a duration"), ("ms", "a duration"), ("s", "a duration"), ("MiB", "a size"), ("GB", "a size"),
    ("GB/s", "a rate"), ("TFLOP/s", "a rate"), ("tokens/s", "a rate"), ("", "a count or unitless figure"),
    ("x", "a ratio"),
])
def test_a_negative_figure_of_a_unit_that_forbids_it_is_refused(unit, kind):
    path, data = _find(unit)
    i, name, m = _first(data, unit)
    if name in SIGNED_METRICS:
        pytest.skip(f"{name} is declared signed")
    m["median"] = -abs(m["median"]) - 1
    for stat in ("min", "q1"):  # keep the order, so that the sign is what is refused
        if m.get(stat) is not None:
            m[stat] = m["median"] - 1
    line = _refused(path, data)
    assert f"results.{i}.metrics.{name}." in line and "is negative" in line and kind in line


def test_a_declared_difference_may_be_negative():
    """``peer_later`` (another rank started first) is negative in the book's own records: true readings."""
    path, data = _find(name="peer_later")
    negative = [m for row in data["results"] for n, m in row["metrics"].items() if n == "peer_later"
                and m["median"] < 0]
    assert negative, "the committed records have a negative peer_later"
    assert parse_record(json.dumps(data), str(path)).topic == data["topic"]


def test_the_checks_and_the_machine_refuse_negative_sizes_and_counts():
    data = _data()
    data["machine"]["gpu_memory_gib"] = -80.0
    assert "machine.gpu_memory_gib" in _refused(LAUNCH, data)
    data = _data()
    data["checks"] = [{"name": "x", "rel_error": -1e-6, "tolerance": 1e-3, "passed": True}]
    assert "checks.0.rel_error" in _refused(LAUNCH, data)


# -- a fraction or share outside its range ------------------------------------------------

@pytest.mark.parametrize("name, unit, value", [("busy_fraction", "", 1.2), ("busy_fraction", "%", 100.5),
                                               ("achieved_occupancy", "%", 140.0), ("top1_agreement", "", 1.01)])
def test_a_share_above_its_whole_is_refused(name, unit, value):
    path, data = _find(unit, name)
    i, _, m = _first(data, unit, name)
    for stat in ("median", "q1", "q3", "min", "max"):
        if m.get(stat) is not None:
            m[stat] = value
    assert f"results.{i}.metrics.{name}." in _refused(path, data)


def test_a_percentage_that_is_a_change_may_pass_100_and_go_below_zero():
    path, data = _find(name="tracing_cost")
    _, _, m = _first(data, name="tracing_cost")
    for value in (-3.0, 130.0):
        m["median"] = value
        parse_record(json.dumps(data), str(path))


def test_every_declared_metric_is_one_the_book_names():
    """A declaration for a metric that no longer exists would hide nothing, but would mislead."""
    assert set(SIGNED_METRICS) <= set(METRICS) and SHARES <= set(METRICS)
    assert all(set(names) <= set(METRICS) | set(TOPIC_METRICS.get(topic, {}))
               for topic, names in TOPIC_RATIOS.items())


def test_a_topics_declared_ratio_may_pass_its_whole(monkeypatch):
    """A percentage that is two separate measurements' ratio is declared per topic, and only there."""
    path, data = _find("%", "busy_fraction")
    _, _, m = _first(data, "%", "busy_fraction")
    for stat in ("median", "q1", "q3", "min", "max"):
        if m.get(stat) is not None:
            m[stat] = 104.0
    _refused(path, data)
    monkeypatch.setitem(TOPIC_RATIOS, data["topic"], {"busy_fraction": "a profiled step over an unprofiled one"})
    parse_record(json.dumps(data), str(path))
    monkeypatch.setitem(TOPIC_RATIOS, data["topic"], {})
    monkeypatch.setitem(TOPIC_RATIOS, "another.topic", {"busy_fraction": "elsewhere"})
    _refused(path, data)


def test_the_book_records_pass_each_rule_for_the_right_reason():
    """Every committed figure is checked again here against the rules themselves, not through the
    model: the negative ones are declared differences, the percentages within 0 to 100 but for the
    declared changes, so no rule was bent to let the book's records through."""
    for record in load_records(BOOK_RECORDS):
        for row in record.results:
            for name, m in row.metrics.items():
                values = [v for v in (m.min, m.q1, m.median, m.q3, m.max) if v is not None]
                assert values == sorted(values), (record.topic, name)
                if min(values) < 0:
                    assert name in SIGNED_METRICS and unit_kind(m.unit) is not None, (record.topic, name, m)
                if m.unit == "%" and name not in SIGNED_METRICS and name not in TOPIC_RATIOS.get(record.topic, {}):
                    assert 0 <= min(values) and max(values) <= 100, (record.topic, name)
                check_figure(name, m, record.topic)


def test_a_run_date_must_be_a_timestamp_with_its_zone():
    for date, says in (("yesterday", "not an ISO 8601 timestamp"), ("2026-11-20T09:15:02", "no time zone")):
        data = _data()
        data["run"]["date"] = date
        line = _refused(LAUNCH, data)
        assert "run.date" in line and says in line


def test_lab_validate_names_the_file_and_the_statistic_in_one_line(tmp_path):
    data = _data()
    i, name, m = _first(data, "us")
    m["max"] = m["min"] - 1
    path = tmp_path / LAUNCH.relative_to(BOOK_RECORDS)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    status, out, err = _lab("validate", str(tmp_path))
    assert status == 1 and not out, (out, err)
    assert err.count("\n") == 1 and str(path) in err and f"results.{i}.metrics.{name}.max:" in err, err


def _lab(*argv: str) -> tuple[int, str, str]:
    """``python -m examples.lab ARGV`` in this process: (status, stdout, stderr)."""
    from examples.lab.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            status = exc.code
    return status, out.getvalue(), err.getvalue()


# -- a record is written whole or not at all ------------------------------------------------

def test_a_write_killed_half_way_leaves_the_record_before_it_and_no_temporary_file(tmp_path, monkeypatch):
    record = load_record(LAUNCH)
    path = write_record(tmp_path, record)
    before = path.read_text(encoding="utf-8")
    newer = record.model_copy(update={"notes": {**record.notes, "written": "again"}})

    def interrupted(fd):  # the text is in the file, not yet renamed into place
        raise KeyboardInterrupt

    monkeypatch.setattr(records_mod.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_record(tmp_path, newer)
    assert path.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    monkeypatch.undo()
    assert load_record(write_record(tmp_path, newer)).notes["written"] == "again"
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_record_the_loader_would_refuse_is_never_written(tmp_path):
    record = load_record(LAUNCH)
    row = record.results[0]
    name, metric = next(iter(row.metrics.items()))
    # model_construct skips validation: as a harness bug could hand over such a record.
    bad_metric = metric.model_construct(**{**dict(metric), "median": -1.0, "min": -2.0, "q1": -1.5})
    bad_row = row.model_construct(case=row.case, metrics={**row.metrics, name: bad_metric})
    bad = record.model_construct(**{**dict(record), "results": [bad_row, *record.results[1:]]})
    with pytest.raises(RecordError, match="is negative"):
        write_record(tmp_path, bad)
    assert not list(tmp_path.rglob("*.json*")), "nothing written, no temporary file left"


# -- Ctrl-C during lab run --------------------------------------------------------------------

def test_ctrl_c_during_a_run_says_what_was_written_in_one_line(tmp_path, monkeypatch):
    """The second topic is interrupted: status 130, one line on stderr, the first topic's record whole."""
    from examples.lab import harness, registry
    from examples.lab.__main__ import CACHE_VARIABLES

    for name in CACHE_VARIABLES:  # the runner points unset caches at new folders: keep this process's
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "bytecode"))
    book = {r.topic: r for r in load_records(BOOK_RECORDS) if r.machine.slug == "nvidia-h200"}
    calls = []

    def measure(module, **kwargs):
        calls.append(harness.topic_of(module))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return book[calls[-1]]

    monkeypatch.setattr(harness, "run_measurement", measure)
    # Stand-ins for the examples: the runner only passes them on (importing the real ones costs seconds).
    monkeypatch.setattr(registry, "import_topic", lambda topic: types.ModuleType(f"examples.{topic}"))
    topics = ["graphs.launch_cost", "dispatch.op_cost", "dispatch.dispatch_keys"]
    assert set(topics) <= set(map(registry.topic_name, registry.example_files()))
    monkeypatch.setattr(registry, "measured_topics", lambda: topics)  # (it imports every example)
    status, out, err = _lab("run", "--device", "cpu", *topics, "--out", str(tmp_path / "out"))
    lines = [line for line in err.splitlines() if line.strip() and "topic/s" not in line and "?topic" not in line]
    assert status == 130, (out, err)
    assert lines[-1] == f"interrupted after 1 topics; 1 records written to {tmp_path / 'out'}", err
    assert "Traceback" not in out + err
    (written,) = record_files(tmp_path / "out")
    assert load_record(written) == book["graphs.launch_cost"] and calls == topics[:2]
    assert dump_record(load_record(written)) == written.read_text(encoding="utf-8")


# -- the site's loader ----------------------------------------------------------------------

def test_the_site_loader_leaves_a_readers_bad_file_out_and_keeps_the_books_strict(tmp_path):
    """A reader's file that does not load is left out with its reason; the same file among the
    book's own records is *broken*, which fails the build where a page or the build's end meets it."""
    from tests.hook_support import root
    from lab_site import store

    data = _data()
    _, name, m = _first(data, "us")
    m["min"] = -1.0
    for folder in ("book", "reader"):
        path = tmp_path / folder / LAUNCH.relative_to(BOOK_RECORDS)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(data), encoding="utf-8")
        (path.parent / "cut.json").write_text(json.dumps(data)[:100], encoding="utf-8")
    loaded = store.load([root(tmp_path / "book"), root(tmp_path / "reader", 1)], REPO)
    assert not loaded.entries and not loaded.groups
    assert sorted(p.parts[-4] for p in loaded.broken) == ["book", "book"]
    assert sorted(p.parts[-4] for p in loaded.left_out) == ["reader", "reader"]
    for path, reason in loaded.left_out.items():  # one line, the file's path said once (by the report)
        assert "\n" not in reason and str(path) not in reason
    assert any(f"metrics.{name}.min: -1 us is negative" in r for r in loaded.left_out.values())
    assert any(r.startswith("not JSON") for r in loaded.left_out.values())
