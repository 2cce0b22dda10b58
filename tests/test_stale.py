"""``python -m examples.lab run --stale``: exactly the topics whose committed records no longer match the code.

A temporary book folder holds records made with ``tests/fixtures/make_records.py``
for real example topics; whether each is stale is decided by the same hash the
harness writes (``examples.lab.provenance.source_sha256``: the example, the example
modules it imports, the harness).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import examples.lab.__main__ as runner
from examples.lab import registry
from examples.lab.provenance import source_sha256
from examples.lab.records import RUNS_PER_KIND, write_record
from tests.fixtures import make_records as mk

REPO = Path(__file__).resolve().parents[1]
H200 = mk.machine("nvidia-h200", "cuda", "NVIDIA H200", 132)
H100 = mk.machine("nvidia-h100-80gb-hbm3", "cuda", "NVIDIA H100 80GB HBM3", 132)
OLD = "f" * 64  # the hash of some earlier version of the code


def source(topic: str) -> str:
    chapter, name = topic.split(".")
    return f"examples/{chapter}/{name}.py"


def write(book: Path, topic: str, sha: str, run_id: str, date: str, m=H200, **kw) -> None:
    write_record(book, mk.record(m, mk.rows({8: 100.0}, None, "cuda_event"), sha, run_id, date,
                                 boot="0" * 8, topic=topic, source=source(topic), **kw))


def current(topic: str) -> str:
    return source_sha256(REPO / source(topic))


@pytest.fixture
def no_cache_leak(monkeypatch, tmp_path):
    """The runner points the compiler caches at fresh folders through the environment: keep that here."""
    for name in runner.CACHE_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / name))


#: The runner's topics in the tests that run it: a few real ones (importing every example
#: would take most of the test's time, and the choice of topics is the unit tested above).
TOPICS = ["graphs.launch_cost", "graphs.decode_loop", "stack.roofline"]


@pytest.fixture
def few_topics(monkeypatch):
    monkeypatch.setattr(registry, "measured_topics", lambda: list(TOPICS))


def test_a_topic_is_stale_when_its_newest_record_on_some_machine_no_longer_matches(tmp_path):
    book = tmp_path / "book"
    topics = ["graphs.launch_cost", "graphs.decode_loop", "stack.roofline", "dispatch.op_cost", "blas.levels"]
    # Current on both GPUs: not stale.
    write(book, "graphs.launch_cost", current("graphs.launch_cost"), "r1", "2026-11-20T10:00:00+00:00")
    write(book, "graphs.launch_cost", current("graphs.launch_cost"), "r2", "2026-11-20T11:00:00+00:00", m=H100)
    # Changed since on one GPU (the H100): stale, though the H200's run is current.
    write(book, "graphs.decode_loop", current("graphs.decode_loop"), "r1", "2026-11-20T10:00:00+00:00")
    write(book, "graphs.decode_loop", OLD, "r2", "2026-11-20T11:00:00+00:00", m=H100)
    # An old run of changed code, then a newer current one: the newest decides, not stale.
    write(book, "stack.roofline", OLD, "r0", "2026-11-19T10:00:00+00:00")
    write(book, "stack.roofline", current("stack.roofline"), "r1", "2026-11-20T10:00:00+00:00")
    # The other way round: the newest run is of older code (measured from an old checkout), stale.
    write(book, "dispatch.op_cost", current("dispatch.op_cost"), "r0", "2026-11-19T10:00:00+00:00")
    write(book, "dispatch.op_cost", OLD, "r1", "2026-11-20T10:00:00+00:00")
    # blas.levels has no record at all: stale. A record of a topic not asked about changes nothing.
    write(book, "blas.epilogue", OLD, "r1", "2026-11-20T10:00:00+00:00")
    assert runner.stale_topics(topics, book) == ["graphs.decode_loop", "dispatch.op_cost", "blas.levels"]


def test_a_change_to_an_imported_example_module_or_the_harness_stales_the_record(tmp_path, monkeypatch):
    """The hash covers what the measurement ran: edit the harness, and a record made before is stale."""
    from examples.lab import provenance

    book = tmp_path / "book"
    write(book, "graphs.launch_cost", current("graphs.launch_cost"), "r1", "2026-11-20T10:00:00+00:00")
    assert runner.stale_topics(["graphs.launch_cost"], book) == []
    harness = REPO / "examples" / "lab" / "harness.py"
    edited = harness.read_bytes() + b"\n# an edit\n"
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: edited if self == harness else real(self))
    assert harness in provenance.source_files(REPO / "examples/graphs/launch_cost.py")
    assert runner.stale_topics(["graphs.launch_cost"], book) == ["graphs.launch_cost"]


def test_a_record_that_only_skipped_its_topic_neither_keeps_it_current_nor_stales_it(tmp_path):
    book = tmp_path / "book"
    write(book, "graphs.launch_cost", current("graphs.launch_cost"), "r1", "2026-11-20T10:00:00+00:00")
    skipped = mk.record(H100, [], OLD, "r2", "2026-11-21T10:00:00+00:00", boot="0" * 8,
                        notes={"skipped": mk.SKIPPED}, topic="graphs.launch_cost",
                        source=source("graphs.launch_cost"))
    write_record(book, skipped)
    assert runner.stale_topics(["graphs.launch_cost"], book) == []
    only = tmp_path / "only"
    write_record(only, skipped)
    assert runner.stale_topics(["graphs.launch_cost"], only) == ["graphs.launch_cost"]


def test_the_runner_with_nothing_stale_says_so_and_exits_0(tmp_path, capsys, no_cache_leak, few_topics):
    book = tmp_path / "book"
    for topic in TOPICS:
        write(book, topic, current(topic), "r1", "2026-11-20T10:00:00+00:00")
    status = runner.main(["run", "--stale", "--book", str(book), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == 0 and out == "no topic to run: every committed record matches the code\n", out + err
    assert not (tmp_path / "out").exists(), "nothing ran, nothing was written"


@pytest.mark.parametrize("argv, says", [
    (["--all", "--stale"], "name topics or give --all or --stale (one of the three)"),
    (["--stale", "graphs.launch_cost"], "name topics or give --all or --stale (one of the three)"),
    (["--all", "--book", "{tmp}"], "--book DIR goes with --stale"),
    (["--stale", "--book", "{tmp}/none"], "no such folder"),
], ids=["all-and-stale", "stale-and-topic", "book-without-stale", "no-book"])
def test_stale_usage_errors_are_one_line_exit_2(argv, says, tmp_path, capsys, no_cache_leak, few_topics):
    with pytest.raises(SystemExit) as exit_:
        runner.main(["run", *(a.format(tmp=tmp_path) for a in argv), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("python -m examples.lab run: error: ") and says in err, err


def test_repeated_stale_runs_each_run_the_topics_found_stale_before_the_first(tmp_path, monkeypatch, capsys,
                                                                               few_topics):
    """With --out docs/records, the first run makes its topics current: the others must not find nothing."""
    book = tmp_path / "book"
    for topic in TOPICS:
        write(book, topic, OLD if topic == "graphs.launch_cost" else current(topic), "r1",
              "2026-11-20T10:00:00+00:00")
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda argv, env: calls.append(argv) or 0)
    argv = ["run", "--stale", "--book", str(book), "--repeat", "2", "--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", ["python -m examples.lab", *argv])
    assert runner.main(argv) == 0
    assert [c[3:] for c in calls] == [["run", "--out", str(tmp_path / "out"), "graphs.launch_cost"]] * 2
    # Nothing stale: said once, and no run starts.
    write(book, "graphs.launch_cost", current("graphs.launch_cost"), "r2", "2026-11-21T10:00:00+00:00")
    calls.clear()
    capsys.readouterr()
    assert runner.main(argv) == 0 and calls == []
    assert capsys.readouterr().out == "no topic to run: every committed record matches the code\n"


def test_on_a_gpu_only_that_machines_runs_count_and_three_are_needed(tmp_path):
    """A topic stale on the H200 is re-run there, not on an H100; one fresh run is not enough."""
    book, topic = tmp_path / "book", "graphs.launch_cost"
    write(book, topic, current(topic), "r1", "2026-11-20T10:00:00+00:00")  # one current run on the H200
    for i in range(RUNS_PER_KIND):
        write(book, topic, current(topic), f"r{i + 2}", f"2026-11-20T1{i + 1}:00:00+00:00", m=H100)
    assert runner.stale_topics([topic], book, slug="nvidia-h200") == [topic]
    assert runner.stale_topics([topic], book, slug="nvidia-h100-80gb-hbm3") == []
    assert runner.stale_topics([topic], book, slug="nvidia-a100") == [topic], "no run on this machine"


def test_the_pages_doctests_count_a_kinds_current_runs_only_where_it_has_any(tmp_path):
    """As the pages do: an H200 run of today's code hides the H200's older runs; the H100,
    whose runs are all stale, keeps those of the newest version it measured (shown stale),
    rather than showing nothing or mixing two versions' figures."""
    from examples.lab.records import book_figures

    topic = "graphs.launch_cost"
    write(tmp_path, topic, OLD, "20260101T000000Z-00000000-1", "2026-01-01T00:00:00+00:00")
    write(tmp_path, topic, current(topic), "20260102T000000Z-00000000-2", "2026-01-02T00:00:00+00:00")
    write(tmp_path, topic, OLD, "20260101T000000Z-00000000-3", "2026-01-01T00:00:00+00:00", m=H100)
    write(tmp_path, topic, "e" * 64, "20251201T000000Z-00000000-4", "2025-12-01T00:00:00+00:00", m=H100)
    kept = {(f.machine, f.run) for f in book_figures(topic, "time", root=tmp_path)}
    assert kept == {("nvidia-h200", "20260102T000000Z-00000000-2"),
                    ("nvidia-h100-80gb-hbm3", "20260101T000000Z-00000000-3")}
