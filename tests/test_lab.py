"""The measuring harness on CPU: timers, statistics, checks, provenance, runner, records."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from examples.lab import provenance, timing
from examples.lab.harness import CheckFailed, Lab, requires_cuda, run_measurement
from examples.lab.records import (SCHEMA_VERSION, RecordError, dump_record, enough_runs, load_records, parse_record,
                                  write_record)
from examples.lab.registry import example_files, import_topic, measured_topics, topic_name
from examples.lab.stats import summarize

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[1]


# -- the profiler's after-effect ------------------------------------------------
def test_the_harness_tears_cupti_down_after_each_profiler_session():
    """Kineto reads TEARDOWN_CUPTI when a session stops; a child that imports only the harness
    must have it set to 1, whatever the parent's environment said, and every profiler session
    must settle (let Kineto's teardown find its CUDA call) as it stops."""
    env = {**os.environ, "TEARDOWN_CUPTI": "0"}
    shown = subprocess.run([sys.executable, "-c", "import os, examples.lab.harness, torch.profiler as p; "
                            "print(os.environ['TEARDOWN_CUPTI'], p.profile.stop.settles)"],
                           cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["1", "True"]


# -- timers -------------------------------------------------------------------
def test_host_sync_samples_are_sane():
    pause_s = 0.002
    samples = timing.measure(lambda: time.sleep(pause_s), device=CPU, timer="host_sync", warmup=1, repetitions=7)
    assert len(samples) == 7
    assert all(pause_s <= s < 1.0 for s in samples), samples


def test_host_sync_divides_by_inner_and_rotates_inputs():
    seen = []
    samples = timing.measure(lambda x: (seen.append(x), time.sleep(0.001)), device=CPU, timer="host_sync",
                             warmup=0, repetitions=2, inner=4, inputs=[(1,), (2,), (3,)])
    assert len(samples) == 2
    assert all(0.001 <= s < 0.5 for s in samples), samples
    assert seen == [1, 2, 3, 1, 2, 3, 1, 2]


@pytest.mark.parametrize("timer", ["cuda_event", "do_bench"])
def test_gpu_timers_refuse_cpu(timer):
    with pytest.raises(ValueError, match=rf"timer '{timer}' needs a CUDA device"):
        timing.measure(lambda: None, device=CPU, timer=timer, warmup=0, repetitions=1)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        Lab(CPU, quick=True).time(lambda: None, case={"n": 1}, timer=timer)


def test_unknown_timer_and_unit():
    with pytest.raises(ValueError, match="unknown timer"):
        timing.measure(lambda: None, device=CPU, timer="stopwatch", warmup=0, repetitions=1)
    with pytest.raises(ValueError, match="not a time unit"):
        Lab(CPU, quick=True).time(lambda: None, case={"n": 1}, unit="furlongs")


# -- statistics -----------------------------------------------------------------
def test_median_and_quartiles():
    m = summarize([7.0, 1.0, 3.0, 5.0, 9.0, 1000.0, 2.0, 4.0], unit="us", method="host_sync")
    assert (m.median, m.min, m.max, m.n) == (4.5, 1.0, 1000.0, 8)
    assert (m.q1, m.q3) == (2.75, 7.5)
    assert m.iqr == pytest.approx(4.75)
    assert m.method == "host_sync" and m.unit == "us"


def test_one_sample_and_none():
    m = summarize([3.0], unit="ms")
    assert (m.median, m.q1, m.q3, m.iqr) == (3.0, 3.0, 3.0, 0.0)
    with pytest.raises(ValueError, match="no samples"):
        summarize([], unit="ms")


# -- Lab: checks, timing, the record -----------------------------------------------
def test_check_passes_a_close_result():
    lab = Lab(CPU, quick=True)
    expected = torch.arange(1.0, 5.0)
    rel = lab.check("close", expected + 1e-7, expected, tolerance=1e-5)
    assert 0 <= rel < 1e-5


def test_check_raises_on_a_wrong_result():
    lab = Lab(CPU, quick=True)
    with pytest.raises(CheckFailed, match="wrong: relative error"):
        lab.check("wrong", torch.ones(4), torch.full((4,), 2.0), tolerance=1e-3)


def test_check_raises_on_nan_and_inf():
    lab = Lab(CPU, quick=True)
    bad = torch.tensor([1.0, float("nan"), 3.0])
    with pytest.raises(CheckFailed, match="nan"):
        lab.check("nan", bad, torch.tensor([1.0, 2.0, 3.0]), tolerance=1.0)
    with pytest.raises(CheckFailed, match="inf"):
        lab.check("inf", torch.tensor([float("inf")]), torch.tensor([1.0]), tolerance=1e9)


def test_check_raises_on_a_wrong_shape():
    with pytest.raises(CheckFailed, match="shape"):
        Lab(CPU, quick=True).check("shape", torch.ones(3), torch.ones(4), tolerance=1.0)


def _record(lab: Lab):
    return lab.record(topic="lab.harness", source=REPO / "examples/lab/harness.py", command="pytest tests/test_lab.py")


def test_lab_record_round_trips(tmp_path):
    lab = Lab(CPU, quick=True)
    x = torch.rand(64, generator=torch.Generator().manual_seed(0))  # positive: a sum far from zero, so a
    lab.check("sum", x.sum(), x.double().sum(), tolerance=1e-5)     # relative error is float32's, not cancellation's
    t = lab.time(lambda: x.sum(), case={"n": 64}, unit="us")
    lab.value(case={"n": 64}, metric="rate", value=64 / t.median, unit="elements/us")
    lab.note("kernel", "sum")
    record = _record(lab)
    assert [set(row.metrics) for row in record.results] == [{"time", "rate"}]
    assert record.method.timer == "host_sync" and record.method.repetitions == lab.repetitions
    assert record.results[0].metrics["time"].n == lab.repetitions
    assert record.machine.device == "cpu" and record.machine.slug.startswith("cpu-")
    assert record.source == "examples/lab/harness.py"
    assert record.source_sha256 == provenance.source_sha256(REPO / "examples/lab/harness.py")
    path = write_record(tmp_path, record)
    assert path == tmp_path / record.machine.slug / "lab.harness" / f"{record.run.id}.json"
    assert record.run.id == provenance.run_id() and record.run.boot_id == provenance.boot_id()
    t_kept = record.results[0].metrics["time"]
    assert (t_kept.warmup, t_kept.inner) == (lab.warmup, 1), "each metric says how it was timed"
    assert record.load is None and record.results[0].metrics["time"].load is None, "no NVML on a CPU run"
    assert load_records(tmp_path) == [record]
    assert parse_record(dump_record(record), "again") == record


def test_a_note_may_nest_json_but_not_hold_other_objects():
    """A profiler timeline is a mapping of lists of events: notes take any JSON, and only JSON."""
    lab = Lab(CPU, quick=True)
    timeline = {"unit": "us", "panels": [{"title": "step", "span": [0.0, 2.0],
                                          "lanes": [{"name": "GPU", "events": [[0.5, 1.5, "gemv"]]}]}]}
    lab.note("timeline", timeline)
    record = _record(lab)
    assert parse_record(dump_record(record), "again").notes["timeline"] == timeline
    lab.note("timeline", {"events": {1.5, 2.5}})  # a set is not JSON
    with pytest.raises(RecordError):
        _record(lab)


def test_keep_samples_summarizes_samples_measured_elsewhere():
    lab = Lab(CPU, quick=True)
    m = lab.keep_samples([3.0, 1.0, 2.0, 9.0], case={"ranks": 2}, metric="step", unit="ms",
                         method="cuda_event, rank 0")
    assert (m.median, m.n, m.method, m.unit) == (2.5, 4, "cuda_event, rank 0", "ms")
    assert lab.rows()[0].metrics["step"] == m
    with pytest.raises(ValueError):
        lab.keep_samples([], case={}, metric="step", unit="ms", method="x")


def test_an_invalid_figure_is_a_record_error_not_a_traceback():
    bad = types.ModuleType("examples.graphs.bad_figure")
    bad.__file__ = str(REPO / "examples/graphs/launch_cost.py")
    bad.measure = lambda lab: lab.value(case={}, metric="x", value=float("nan"), unit="")
    with pytest.raises(RecordError, match="kept an invalid figure: .*finite"):
        run_measurement(bad, device=CPU, quick=True, command="test")


# -- provenance -------------------------------------------------------------------
def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_git_state_reads_the_checkout(tmp_path, monkeypatch):
    """Dirty means the measuring code (examples/) differs from the commit; pages may change freely."""
    repo = tmp_path / "repo"
    (repo / "examples").mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    (repo / "examples" / "a.py").write_text("one = 1\n")
    (repo / "page.md").write_text("# page\n")
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "one", cwd=repo)
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    monkeypatch.setenv("LAB_GIT_COMMIT", "f" * 40)  # ignored: the checkout wins
    head = _git("rev-parse", "HEAD", cwd=repo)
    assert provenance.git_state() == (head, False)
    (repo / "page.md").write_text("# edited page\n")
    (repo / "notes.txt").write_text("untracked, outside examples/\n")
    assert provenance.git_state() == (head, False)
    (repo / "examples" / "b.py").write_text("# a new example, not committed yet\n")
    assert provenance.git_state() == (head, True)
    (repo / "examples" / "b.py").unlink()
    (repo / "examples" / "a.py").write_text("one = 2\n")
    assert provenance.git_state() == (head, True)


def test_git_state_of_a_copy_nested_in_another_repository_comes_from_the_environment(tmp_path, monkeypatch):
    """A GPU machine may receive the tree inside some other checkout: that checkout's commit is not ours."""
    outer = tmp_path / "outer"
    (outer / "snapshot" / "examples").mkdir(parents=True)
    _git("init", "-q", cwd=outer)
    (outer / "other.txt").write_text("another project\n")
    _git("add", "other.txt", cwd=outer)
    _git("commit", "-qm", "other", cwd=outer)
    (outer / "snapshot" / "examples" / "a.py").write_text("one = 1\n")
    monkeypatch.setattr(provenance, "REPO_ROOT", outer / "snapshot")
    monkeypatch.setenv("LAB_GIT_COMMIT", "b" * 40)
    monkeypatch.setenv("LAB_GIT_DIRTY", "0")
    assert provenance.git_state() == ("b" * 40, False)
    monkeypatch.delenv("LAB_GIT_COMMIT")
    assert provenance.git_state() == (None, False)


def test_git_state_falls_back_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)  # a copy of the tree with no .git
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setenv("LAB_GIT_COMMIT", "a" * 40)
    monkeypatch.setenv("LAB_GIT_DIRTY", "1")
    assert provenance.git_state() == ("a" * 40, True)
    monkeypatch.setenv("LAB_GIT_DIRTY", "0")
    assert provenance.git_state() == ("a" * 40, False)
    monkeypatch.setenv("LAB_GIT_DIRTY", "maybe")
    assert provenance.git_state() == ("a" * 40, None)
    monkeypatch.delenv("LAB_GIT_COMMIT")
    monkeypatch.delenv("LAB_GIT_DIRTY")
    assert provenance.git_state() == (None, None)


def test_this_checkout_is_recorded():
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if git.returncode != 0:
        why = (git.stderr.strip().splitlines() or ["git rev-parse failed"])[0]
        pytest.skip(f"this tree is no usable git checkout ({why}): records made here take their commit "
                    "from LAB_GIT_COMMIT")
    commit, dirty = provenance.git_state()
    assert commit == git.stdout.strip() and isinstance(dirty, bool)


def test_slugify():
    assert provenance.slugify("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert provenance.slugify("  ") == "unknown"


# -- the runner: python -m examples.lab ----------------------------------------------
def _cpu_topic() -> str:
    topics = [t for t in measured_topics() if not requires_cuda(import_topic(t))]
    assert topics, "no measured example runs on CPU: nothing exercises the runner end to end"
    return topics[0]


def test_measured_topics_are_read_from_the_sources_without_importing_them(cli):
    """What importing each example finds (``measure`` defined), read from the sources instead: a
    ``lab run TOPIC`` then imports only the topics it runs."""
    imported = [t for t in map(topic_name, example_files()) if hasattr(import_topic(t), "measure")]
    assert measured_topics() == imported
    code = ("import sys; from examples.lab.registry import measured_topics; measured_topics(); "
            "print(sorted(m for m in sys.modules if m.startswith('examples.') and not m.startswith('examples.lab')))")
    proc = cli.run("-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", cli.explain(proc)


@pytest.mark.parametrize("source, binds", [
    ("def measure(lab): pass", True), ("from examples.lab.timing import measure", True), ("measure = run", True),
    ("x = 1\ndef f():\n    measure = 1", False), ("class C:\n    measure = 1", False),
    ("from somewhere import *", None), ("if FAST:\n    def measure(lab): pass", None), ("del measure", None),
    ("globals()['measure'] = run", None), ("def __getattr__(name): pass", None),
])
def test_a_source_that_cannot_say_whether_it_defines_measure_is_imported(source, binds, tmp_path):
    from examples.lab.registry import _binds_at_top_level

    path = tmp_path / "topic.py"
    path.write_text(source, encoding="utf-8")
    assert _binds_at_top_level(path, "measure") is binds


@pytest.mark.parametrize("argv, says", [
    (["run", "--out", "{tmp}"], "name topics or give --all"),
    (["run", "--all", "graphs.launch_cost", "--out", "{tmp}"], "name topics or give --all"),
    (["run", "no_such.topic", "--out", "{tmp}"], "unknown topic 'no_such.topic'"),
    (["run", "--all", "--device", "cuda", "--out", "{tmp}"], "--device cuda: no CUDA GPU"),
    (["run", "--all"], "--out"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
], ids=["no-topic", "topic-and-all", "unknown-topic", "cuda-without-gpu", "no-out", "bad-command", "no-command"])
def test_runner_usage_errors(argv, says, tmp_path, cli):
    proc = cli.run("-m", "examples.lab", *(a.format(tmp=tmp_path / "out") for a in argv))
    line = cli.one_line_error(proc, status=2)
    assert says in line, cli.explain(proc)
    assert not (tmp_path / "out").exists(), "a refused run wrote records"


@pytest.fixture(scope="module")
def runner_records(tmp_path_factory, cli):
    """One real run of the runner on CPU, shared by the tests below."""
    topic = _cpu_topic()
    out = tmp_path_factory.mktemp("records")
    proc = cli.run("-m", "examples.lab", "run", "--quick", "--device", "cpu", topic, "--out", out, timeout=300)
    assert proc.returncode == 0, cli.explain(proc)
    return topic, out, proc


def test_runner_writes_a_valid_record(runner_records, cli):
    topic, out, proc = runner_records
    written = sorted(out.glob("*/*/*.json"))
    assert [p.parent.name for p in written] == [topic], cli.explain(proc)
    path = written[0]
    record = parse_record(path.read_text(encoding="utf-8"), str(path))
    assert path.name == f"{record.run.id}.json" and path.parents[1].name == record.machine.slug
    assert record.run.wall_s is not None and record.run.wall_s > 0
    assert record.topic == topic and record.run.quick and record.machine.device == "cpu"
    assert record.run.command.startswith("python -m examples.lab run")
    assert f"wrote {path}" in proc.stdout
    check = cli.run("-m", "examples.lab", "validate", out)
    assert check.returncode == 0, cli.explain(check)
    assert "1 records valid" in check.stdout


def _broken(kind: str, good: Path, root: Path) -> Path:
    """A copy of a good record, broken in one way; returns the broken file."""
    data = json.loads(good.read_text(encoding="utf-8"))
    target = root / good.parents[1].name / good.parent.name / good.name
    if kind == "bad-json":
        text = good.read_text(encoding="utf-8")[:-20]
    elif kind == "missing-provenance":
        del data["run"]["commit"]
        text = json.dumps(data)
    elif kind == "missing-machine":
        del data["machine"]["torch"]
        text = json.dumps(data)
    elif kind == "schema-version":
        data["schema_version"] = SCHEMA_VERSION + 1
        text = json.dumps(data)
    elif kind == "failed-check":
        data["checks"] = [{"name": "x", "rel_error": 1.0, "tolerance": 0.1, "passed": False}]
        text = json.dumps(data)
    elif kind == "wrong-folder":
        target = root / "some-other-machine" / good.parent.name / good.name
        text = good.read_text(encoding="utf-8")
    else:
        raise AssertionError(kind)
    target.parent.mkdir(parents=True)
    target.write_text(text, encoding="utf-8")
    return target


def _as_version_1(record_json: dict) -> dict:
    """A version-2 record as the version-1 code wrote it: no run id, boot, wall time or load."""
    data = json.loads(json.dumps(record_json))
    data["schema_version"] = 1
    for key in ("id", "boot_id", "wall_s"):
        data["run"].pop(key)
    data.pop("load")
    data["machine"].pop("power_limit_w")
    for row in data["results"]:
        for m in row["metrics"].values():
            for key in ("warmup", "inner", "load"):
                m.pop(key)
    return data


def test_version_1_records_still_load_as_one_run(runner_records, tmp_path):
    """Records of the one-file-per-machine layout load as a run with the id 'v1'."""
    _, out, _ = runner_records
    good = next(out.glob("*/*/*.json"))
    old = _as_version_1(json.loads(good.read_text(encoding="utf-8")))
    slug, topic = good.parents[1].name, good.parent.name
    (tmp_path / slug).mkdir()
    (tmp_path / slug / f"{topic}.json").write_text(json.dumps(old), encoding="utf-8")
    [record] = load_records(tmp_path)
    assert record.run.id == "v1" and record.schema_version == SCHEMA_VERSION and record.load is None
    # ...and next to runs of the new layout, each file where it belongs.
    (tmp_path / slug / topic).mkdir()
    (tmp_path / slug / topic / good.name).write_text(good.read_text(encoding="utf-8"), encoding="utf-8")
    assert sorted(r.run.id for r in load_records(tmp_path)) == sorted(["v1", good.stem])
    (tmp_path / slug / f"{topic}.json").rename(tmp_path / slug / topic / "v1.json")
    with pytest.raises(RecordError, match="belongs at"):
        load_records(tmp_path)


@pytest.mark.parametrize("kind, says", [
    ("bad-json", "not JSON"),
    ("missing-provenance", "run.commit"),
    ("missing-machine", "machine.torch"),
    ("schema-version", "schema_version"),
    ("failed-check", "failed correctness checks"),
    ("wrong-folder", "belongs at"),
])
def test_validate_rejects(kind, says, runner_records, tmp_path, cli):
    _, out, _ = runner_records
    broken = _broken(kind, next(out.glob("*/*/*.json")), tmp_path)
    proc = cli.run("-m", "examples.lab", "validate", tmp_path)
    line = cli.one_line_error(proc, status=1)
    assert str(broken) in line and says in line, cli.explain(proc)
    with pytest.raises(RecordError, match=says):
        load_records(tmp_path)


def test_repeat_makes_independent_runs(tmp_path, cli):
    """--repeat N: N processes, N run ids, each with its own compiler caches."""
    topic = "dispatch.dispatch_keys"  # the quickest topic: notes only
    proc = cli.run("-m", "examples.lab", "run", "--quick", "--device", "cpu", topic, "--repeat", "2",
                   "--out", tmp_path, timeout=300)
    assert proc.returncode == 0, cli.explain(proc)
    records = load_records(tmp_path)
    assert len(records) == 2 and len({r.run.id for r in records}) == 2, cli.explain(proc)
    assert all("--repeat" not in r.run.command for r in records), "each run records the command it ran"
    assert "2 runs in" in proc.stdout


def test_one_gpu_machine_skips_multi_gpu_topics(monkeypatch):
    """A collective needs two GPUs: on one, the runner skips it (and writes nothing)."""
    from examples.lab.harness import missing_gpus

    module = import_topic("collectives.ring_allreduce")
    assert missing_gpus(module, CPU) is None, "on the CPU it runs two gloo ranks"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert missing_gpus(module, torch.device("cuda")) == "needs 2 GPUs, this machine has 1"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert missing_gpus(module, torch.device("cuda")) is None
    assert missing_gpus(import_topic("graphs.launch_cost"), torch.device("cuda")) is None


def test_load_summaries_are_medians_of_the_samples_inside_each_window():
    from examples.lab.load import LoadMonitor, Sample

    monitor = LoadMonitor(None)  # no sampler process: feed it samples
    monitor._samples = [Sample(t, sm, 2619, w) for t, sm, w in
                        [(0.5, 1980, 90), (1.1, 1500, 690), (1.2, 1410, 700), (1.3, 1455, 695), (5.0, 1980, 80)]]
    monitor.power_reading = "instant"
    monitor.window(1.0, 1.25)
    monitor.window(1.25, 1.35)
    first = monitor.load_between(1.0, 1.25)
    assert (first.sm_mhz, first.power_w, first.samples) == (1455.0, 695.0, 2)
    assert monitor.load_between(2.0, 3.0) is None, "a window shorter than the period has no samples"
    summary = monitor.summary()
    assert (summary.sm_mhz_median, summary.sm_mhz_min, summary.sm_mhz_max) == (1455.0, 1410, 1500)
    assert (summary.samples, summary.power_w_max) == (3, 700), "idle samples outside every window are left out"


def test_an_averaged_power_reading_gives_no_figure_for_a_short_window():
    """NVML's usual power call averages the last second: in a 250 ms window it reports what ran before."""
    from examples.lab.load import AVERAGE, LoadMonitor, Sample

    monitor = LoadMonitor(None)
    monitor._samples = [Sample(t / 100, 1500, 2619, 100.0 + t) for t in range(0, 400, 10)]
    monitor.power_reading = AVERAGE
    short = monitor.load_between(1.0, 1.25)
    assert short.sm_mhz == 1500 and short.power_w is None and short.power_reading is None
    long = monitor.load_between(1.0, 3.0)
    assert long.power_reading == AVERAGE and long.power_w == 100.0 + 250, "only samples a second into the window"
    monitor.window(1.0, 1.25)
    assert monitor.summary().power_w_median is None


def test_the_sampler_says_which_power_reading_it_took(tmp_path):
    from examples.lab.load import read_power_reading, read_samples

    path = tmp_path / "s.load"
    path.write_text("# power instant\n1.0 1980 2619 690.5\n")
    assert read_power_reading(path) == "instant"
    assert [s.power_w for s in read_samples(path)] == [690.5]
    path.write_text("1.0 1980 2619 690.5\n")
    assert read_power_reading(path) is None, "a sampler that did not say"


def test_the_monitor_waits_for_the_samplers_first_reading(monkeypatch):
    """A topic that times for a tenth of a second must not finish before the sampler starts."""
    import subprocess as sp
    import sys

    from examples.lab import load

    slow_start = ("import sys, time; time.sleep(0.4); "
                  "open(sys.argv[-1], 'a').write('1.0 1980 2619 90.0\\n'); time.sleep(30)")

    real_popen = sp.Popen

    def fake_popen(cmd, **kwargs):
        return real_popen([sys.executable, "-c", slow_start, cmd[-1]], stdin=sp.DEVNULL)

    started = []

    def counting_popen(cmd, **kwargs):
        started.append(cmd)
        return fake_popen(cmd, **kwargs)

    monkeypatch.setattr(load.subprocess, "Popen", counting_popen)
    monkeypatch.setattr(load, "_SAMPLERS", {})
    began = time.monotonic()
    monitor = load.LoadMonitor(0)
    waited = time.monotonic() - began
    try:
        assert waited >= 0.3, "returned before the sampler wrote anything"
        assert monitor._sampler.path.stat().st_size > 0
        assert [(s.sm_mhz, s.power_w) for s in monitor.stop()] == [(1980, 90.0)]
        began = time.monotonic()
        second = load.LoadMonitor(0)
        assert time.monotonic() - began < 0.3 and len(started) == 1, "the next record shares the running sampler"
        assert [(s.sm_mhz, s.power_w) for s in second.stop()] == [(1980, 90.0)]
    finally:
        path, process = monitor._sampler.path, monitor._sampler.process
        load.close_samplers()
    assert process.poll() is not None and not path.exists(), "closing stops the sampler and removes its file"


def test_a_topic_timed_in_other_processes_gets_the_load_of_its_whole_run(monkeypatch):
    """The collectives time inside their ranks: the record's load is read over the topic's run."""
    from examples.lab import harness

    seen = {}

    class Monitor:
        def __init__(self, index):
            self.windows = []
            seen["monitor"] = self

        def window(self, start, end):
            self.windows.append((start, end))

        def stop(self):
            return []

        def load_between(self, start, end):
            return None

        def summary(self):
            return None

    module = types.ModuleType("examples.fake.out_of_process")
    module.__file__ = str(REPO / "examples" / "stack" / "layer_costs.py")
    module.measure = lambda lab: lab.keep_samples([1.0, 1.1, 0.9], case={"part": "x"}, metric="time", unit="us",
                                                  method="cuda_event, rank 0")
    monkeypatch.setattr(harness, "LoadMonitor", Monitor)
    harness.run_measurement(module, device=torch.device("cpu"), quick=True, command="test")
    (window,) = seen["monitor"].windows
    assert window[1] > window[0]


def test_validate_rejects_an_empty_or_missing_folder(tmp_path, cli):
    assert "no records" in cli.one_line_error(cli.run("-m", "examples.lab", "validate", tmp_path), status=1)
    missing = tmp_path / "nowhere"
    assert "no such records folder" in cli.one_line_error(cli.run("-m", "examples.lab", "validate", missing),
                                                          status=1)


def test_committed_records_validate():
    """The book's own records (docs/records/<machine>/<topic>.json) follow the schema."""
    root = REPO / "docs" / "records"
    if not root.is_dir():
        pytest.fail("docs/records/ is missing: the book's measurements are committed there")
    records = load_records(root)
    assert records, "docs/records/ holds no <machine>/<topic>.json"
    for record in records:
        source = REPO / record.source
        assert source.is_file(), f"{record.machine.slug}/{record.topic}.json: source {record.source} is gone"


def test_committed_gpu_records_carry_full_provenance():
    """What the book promises every GPU record holds: the machine, the software, the code, the load."""
    gpu = [r for r in load_records(REPO / "docs" / "records") if r.machine.device == "cuda"]
    assert gpu, "the book has no GPU records"
    for r in gpu:
        where = f"{r.machine.slug}/{r.topic}/{r.run.id}.json"
        m = r.machine
        for field in ("gpu_name", "sm_count", "compute_capability", "driver", "cuda", "cudnn", "nccl",
                      "torch", "triton", "host_cpu", "clocks_mhz", "power_limit_w"):
            assert getattr(m, field), f"{where}: machine.{field} is missing"
        assert r.run.id != "v1" and r.run.boot_id, f"{where}: a run of the current layout, with its machine's boot"
        assert r.run.commit and r.run.dirty is False, f"{where}: measured from a commit with clean examples"
        assert r.run.quick is False, f"{where}: quick-mode figures are for CI, not for the book"
        timed = False
        for row in r.results:
            for name, metric in row.metrics.items():
                if metric.method != "computed":
                    timed = True
                    assert metric.n and metric.q1 is not None, f"{where}: {name} has no spread"
        if timed and not (r.topic in MEASURED_BEFORE_THE_SAMPLER_WAITED and r.run.id.startswith("20261122T")):
            assert r.load is not None, f"{where}: no clocks or power read under load"


#: Topics whose runs of 2026-11-22 read no clocks, by a harness bug since fixed: the sampler
#: started after the 0.2 s matmul topic had finished, and the collectives time inside their
#: ranks, where no window was kept. Any later run of them must carry its load.
MEASURED_BEFORE_THE_SAMPLER_WAITED = {"stack.matmul_kernel", "collectives.ring_allreduce",
                                      "collectives.ddp_overlap"}


#: The GPU kinds every single-GPU figure of the book is measured on (machine slugs).
BOOK_KINDS = ("nvidia-h100-80gb-hbm3", "nvidia-h200")


@functools.cache
def _source_sha256(source: str) -> str:
    # Once per example, not once per record and topic: a hash reads the example, the
    # modules it imports and the harness, and thousands of them took minutes of CI.
    return provenance.source_sha256(REPO / source)


def runs_by_kind(records, topic: str, *, min_gpus: int) -> dict[str, list]:
    """The runs of ``topic`` a page shows, per machine slug, on machines with >= ``min_gpus`` GPUs:
    the current runs where any exist (the site then leaves the stale ones out), else the stale
    ones, which the site shows marked stale until the topic is re-measured."""
    kinds: dict[str, list] = {}
    for r in records:
        if r.topic == topic and r.machine.gpu_count >= min_gpus:
            kinds.setdefault(r.machine.slug, []).append(r)
    shown = {}
    for slug, runs in kinds.items():
        current = [r for r in runs if _source_sha256(r.source) == r.source_sha256]
        shown[slug] = current or runs
    return shown


#: (one-GPU topic, GPU kind) pairs measured on the book's other kind only, each with its reason.
#: A debt, not a waiver: the page says which kind it lacks, ``lab run --stale`` on that kind runs
#: the topic, and the test below fails once the kind has runs, so the entry goes with them.
PENDING_KINDS = {
    ("blas.alignment", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("dispatch.dispatch_table", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("measuring.timers", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("blas.workspace", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("ecosystem.flex_attention", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("compile.training", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("stack.memory_access", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("stack.banks_and_pages", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("graphs.graph_costs", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("dispatch.allocator_internals", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("compile.fusion_limits", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("compile.fusion_blockers", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("measuring.ratio_ci", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("stack.gemm_worklog", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("ecosystem.sparse_search", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("measuring.ncu_sections", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("ecosystem.fp8_blockwise", "nvidia-h100-80gb-hbm3"): "added 2026-11-28, when no H100 was lent",
    ("collectives.ddp_host", "nvidia-h100-80gb-hbm3"): "added 2026-11-29, when no H100 was lent",
}


def test_a_pending_kind_has_no_runs_yet():
    records = [r for r in load_records(REPO / "docs" / "records") if r.machine.device == "cuda"]
    for (topic, kind), why in PENDING_KINDS.items():
        assert topic in measured_topics(), f"{topic} is pending ({why}) but no longer a topic"
        runs = runs_by_kind(records, topic, min_gpus=1)
        assert kind not in runs, f"{topic} now has runs on {kind}: remove its PENDING_KINDS entry ({why})"
        assert any(enough_runs([r.run.boot_id for r in of_kind]) for of_kind in runs.values()), \
            f"{topic} is pending on {kind}, so its other kind needs its full runs"


#: Multi-GPU topics with no committed run on any machine yet, each with its reason. A debt, not a
#: waiver, like PENDING_KINDS: the test below fails once the topic has runs, so the entry goes with
#: them (two runs on one machine kind then pass as provisional; one run alone still fails).
PENDING_MULTI_GPU: dict[str, str] = {}


def test_a_pending_multi_gpu_topic_has_no_runs_yet():
    records = [r for r in load_records(REPO / "docs" / "records") if r.machine.device == "cuda"]
    for topic, why in PENDING_MULTI_GPU.items():
        assert topic in measured_topics(), f"{topic} is pending ({why}) but no longer a topic"
        needed = int(getattr(import_topic(topic), "MIN_GPUS", 1))
        assert needed > 1, f"{topic} needs one GPU: PENDING_KINDS, not PENDING_MULTI_GPU ({why})"
        runs = runs_by_kind(records, topic, min_gpus=needed)
        assert not runs, f"{topic} now has runs on {', '.join(runs)}: remove its PENDING_MULTI_GPU entry ({why})"


def test_every_book_figure_has_three_independent_runs_per_gpu_kind():
    """>= 3 runs (processes) per topic on each kind, on >= 2 separately started machines, among
    the runs the pages show; topics that need several GPUs: >= 3 runs on a machine with that many.
    One fresh run beside stale ones would make a figure rest on that run alone: it fails here.
    The one exception: a multi-GPU topic on a machine kind lent only at times may show two runs,
    which the site labels provisional (tests/test_appendix.py checks the label)."""
    records = [r for r in load_records(REPO / "docs" / "records") if r.machine.device == "cuda"]
    problems = []
    for topic in measured_topics():
        module = import_topic(topic)
        needed = int(getattr(module, "MIN_GPUS", 1))
        kinds = runs_by_kind(records, topic, min_gpus=needed)
        wanted = BOOK_KINDS if needed == 1 else tuple(k for k in kinds) or ("a multi-GPU machine",)
        for kind in wanted:
            runs = kinds.get(kind, [])
            if not runs and (topic, kind) in PENDING_KINDS:
                continue  # test_a_pending_kind_has_no_runs_yet holds it to account
            if not kinds and topic in PENDING_MULTI_GPU:
                continue  # test_a_pending_multi_gpu_topic_has_no_runs_yet holds it to account
            boots = {r.run.boot_id for r in runs}
            provisional = needed > 1 and len(runs) >= 2
            if not enough_runs([r.run.boot_id for r in runs]) and not provisional:
                problems.append(f"{topic} on {kind}: {len(runs)} runs on {len(boots)} machines")
    assert not problems, "; ".join(problems)


# -- on a GPU (skipped, with the reason, elsewhere) ------------------------------------
@pytest.mark.needs_cuda
@pytest.mark.parametrize("timer", ["cuda_event", "host_sync", "do_bench"])
def test_gpu_timers(timer):
    if timer == "do_bench":
        pytest.importorskip("triton", reason="do_bench is triton.testing's")
    gpu = torch.device("cuda")
    x = torch.randn(1 << 22, device=gpu)
    samples = timing.measure(lambda: x.mul_(1.0), device=gpu, timer=timer, warmup=2, repetitions=5)
    assert samples and all(0 < s < 1.0 for s in samples), samples


@pytest.mark.needs_cuda
def test_gpu_record(tmp_path):
    lab = Lab(torch.device("cuda"), quick=True)
    a = torch.randn(256, 256, device="cuda")
    lab.check("matmul", a @ a, a.double() @ a.double(), tolerance=1e-2)
    lab.time(lambda: a @ a, case={"n": 256})
    record = _record(lab)
    assert record.method.timer == "cuda_event" and record.machine.device == "cuda"
    assert record.machine.gpu_name and record.machine.slug == provenance.slugify(record.machine.gpu_name)
    assert load_records(write_record(tmp_path, record).parents[1]) == [record]


def test_kernel_names_notes_a_failing_profiler_instead_of_raising():
    from examples.lab.kernels import kernel_names

    def broken():
        raise RuntimeError("no device")

    note = kernel_names(broken)  # on a CPU-only torch the profiler itself refuses first
    assert isinstance(note, str) and note.startswith("profiler failed: ")
    assert len(note) <= 200


def fake_topic(name: str, error: Exception | None = None, ran: list | None = None) -> types.ModuleType:
    """A topic module whose measure() notes that it ran, then raises ``error`` or keeps one figure."""
    module = types.ModuleType(f"examples.fake.{name}")
    module.__file__ = str(REPO / "examples/lab/harness.py")

    def measure(lab):
        if ran is not None:
            ran.append(name)
        if error is not None:
            raise error
        lab.value(case={}, metric="x", value=1.0, unit="")

    module.measure = measure
    return module


@pytest.fixture
def run_fake_topics(monkeypatch, tmp_path):
    """``python -m examples.lab run --device cpu`` over fake topics (name -> module), fresh caches."""
    import examples.lab.__main__ as runner
    from examples.lab import registry

    monkeypatch.delenv("LAB_TRACEBACK", raising=False)
    for name in runner.CACHE_VARIABLES:
        monkeypatch.setenv(name, str(tmp_path / name))

    def run(topics: dict, *names: str) -> int:
        monkeypatch.setattr(registry, "measured_topics", lambda: list(topics))
        monkeypatch.setattr(registry, "import_topic", topics.__getitem__)
        return runner.main(["run", "--device", "cpu", *(names or topics), "--out", str(tmp_path / "out")])

    return run


def test_a_cuda_error_ends_the_later_topics_of_its_process(run_fake_topics, capsys):
    """A CUDA error is sticky: every later topic of the process would fail the same way,
    so the runner says they were not run, and how to run them, instead of ten false failures."""
    ran: list[str] = []
    topics = {"fake.first": fake_topic("first", ran=ran),
              "fake.crash": fake_topic("crash", RuntimeError("CUDA error: an illegal memory access was encountered"),
                                       ran=ran),
              "fake.after": fake_topic("after", ran=ran)}
    status = run_fake_topics(topics)
    out, err = capsys.readouterr()
    assert status == 1 and ran == ["first", "crash"], "the topic after the CUDA error must not run"
    assert "FAILED fake.after: not run: fake.crash's CUDA error" in err
    assert "python -m examples.lab run fake.after" in err


def test_the_runner_reports_an_unavailable_or_failing_topic_in_one_line(run_fake_topics, monkeypatch, capsys):
    """A missing tool skips the topic; a tool that fails is one FAILED line, not a traceback."""
    from examples.lab.harness import Unavailable

    topics = {"fake.missing": fake_topic("missing", Unavailable("Nsight Systems (nsys) is not installed")),
              "fake.broken": fake_topic("broken", RuntimeError("nsys exited with 1: no report\nsecond line")),
              "fake.wrong": fake_topic("wrong", CheckFailed("sum: relative error 1 exceeds 0"))}
    status = run_fake_topics(topics)
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    assert "skipped fake.missing: Nsight Systems (nsys) is not installed" in out
    assert "FAILED fake.broken: RuntimeError: nsys exited with 1: no report\n" in err and "second line" not in err
    assert "FAILED fake.wrong: correctness check failed" in err
    monkeypatch.setenv("LAB_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="no report"):
        run_fake_topics(topics, "fake.broken")


def test_compared_variants_are_interleaved_in_rounds_and_ratios_are_paired():
    """A B, B A, A B ...: drift in clocks and heat falls on every variant alike."""
    from examples.lab.harness import Lab

    calls: list[str] = []
    lab = Lab(CPU, quick=True)
    try:
        variants = {name: (lambda name=name: calls.append(name)) for name in ("triton", "cublas")}
        result = lab.compare(variants, case={"size": 64}, key="kernel", baseline="cublas",
                             warmup=1, repetitions=4)
    finally:
        lab.load.stop()
    assert calls == ["triton", "cublas",                       # warm-up round
                     "triton", "cublas", "cublas", "triton",   # rounds 0 and 1
                     "cublas", "triton", "triton", "cublas"]   # rounds 2 and 3: rotated
    assert set(result) == {"triton", "cublas"} and result["triton"].n == 4
    assert "interleaved" in result["triton"].method
    rows = {r.case["kernel"]: r.metrics for r in lab.rows()}
    assert "speedup" in rows["triton"] and "speedup" not in rows["cublas"]
    assert rows["triton"]["speedup"].unit == "x" and rows["triton"]["speedup"].n == 4


def test_compare_rows_keeps_each_variant_in_its_own_row_with_paired_ratios(monkeypatch):
    """Variants of different cases, timed in the same interleaved rounds; the baseline
    has no row of its own, and a ratio pairs the baseline's sample with the variant's
    sample of the same round (times a factor)."""
    from examples.lab import timing
    from examples.lab.harness import Lab

    seconds = {"copy": [1.0, 2.0, 4.0], "gemv": [2.0, 2.0, 2.0]}  # the copy drifts, the GEMV not
    monkeypatch.setattr(timing, "measure_interleaved", lambda fns, **kw: {n: seconds[n] for n in fns})
    lab = Lab(CPU, quick=True)
    try:
        kept = lab.compare_rows({"copy": lambda: None, "gemv": lambda: None},
                                {"gemv": ({"level": "gemv", "n": 64}, "time")}, baseline="copy",
                                ratios={"gemv": ({"level": "gemv", "n": 64}, "fraction_of_copy", 3.0)},
                                unit="ms")
        with pytest.raises(ValueError, match="need a baseline"):
            lab.compare_rows({"a": lambda: None}, {}, ratios={"a": ({}, "r", 1.0)})
    finally:
        lab.load.stop()
    assert list(kept) == ["gemv"] and kept["gemv"].median == 2000.0
    (row,) = lab.rows()
    assert row.case == {"level": "gemv", "n": 64}
    ratio = row.metrics["fraction_of_copy"]
    # 3 x copy / gemv, round by round: 1.5, 3, 6 (a ratio of medians would give 3 alone)
    assert (ratio.min, ratio.median, ratio.max, ratio.n) == (1.5, 3.0, 6.0, 3)
    assert ratio.method.startswith("paired ratio copy / gemv")


def test_a_topic_starts_from_the_same_state_whatever_ran_before(tmp_path):
    """Topics share a process: a switch one flips is put back, and noted in its record."""
    from examples.lab.harness import run_measurement

    module = fake_topic("flips")

    def measure(lab):
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
        torch.backends.cuda.enable_flash_sdp(not torch.backends.cuda.flash_sdp_enabled())
        lab.value(case={}, metric="x", value=1.0, unit="")

    module.measure = measure
    before = (torch.backends.cudnn.benchmark, torch.backends.cuda.flash_sdp_enabled())
    record = run_measurement(module, device=CPU, quick=True, command="test")
    assert (torch.backends.cudnn.benchmark, torch.backends.cuda.flash_sdp_enabled()) == before
    left = record.notes["global settings left changed (put back by the harness)"]
    assert any("cudnn.benchmark" in line for line in left) and any("flash_sdp" in line for line in left)


def test_a_record_whose_code_changed_while_it_ran_is_refused(monkeypatch):
    from examples.lab import provenance
    from examples.lab.harness import run_measurement
    from examples.lab.records import RecordError

    hashes = iter(["a" * 64, "b" * 64])
    monkeypatch.setattr(provenance, "source_sha256", lambda path: next(hashes))
    module = fake_topic("edited")
    with pytest.raises(RecordError, match="changed on disk while it ran"):
        run_measurement(module, device=CPU, quick=True, command="test")


def test_paired_ratios_take_each_round_alone(monkeypatch):
    """A ratio of samples from the same round, not of two medians: a shared drift cancels."""
    from examples.lab import timing
    from examples.lab.harness import Lab

    drift = {"a": [1.0, 2.0, 4.0], "b": [2.0, 4.0, 8.0]}  # b is 2x slower in every round
    monkeypatch.setattr(timing, "measure_interleaved", lambda fns, **kw: drift)
    lab = Lab(CPU, quick=True)
    try:
        lab.compare({"a": None, "b": None}, case={}, baseline="b", unit="s")
    finally:
        lab.load.stop()
    speedup = {r.case["variant"]: r.metrics for r in lab.rows()}["a"]["speedup"]
    assert (speedup.median, speedup.min, speedup.max) == (2.0, 2.0, 2.0)


def test_a_records_hash_covers_the_example_modules_it_imports_and_the_harness(tmp_path, monkeypatch):
    from examples.lab import provenance

    files = {p.relative_to(provenance.REPO_ROOT).as_posix()
             for p in provenance.source_files(provenance.REPO_ROOT / "examples/capstone/fused_decode.py")}
    assert {"examples/capstone/fused_decode.py", "examples/capstone/decode.py", "examples/capstone/fused.py",
            "examples/capstone/model.py", "examples/lab/harness.py", "examples/lab/timing.py"} <= files
    assert "examples/lab/records.py" not in files, "a bookkeeping module cannot move a figure"


def test_a_set_up_kept_for_the_next_topic_is_freed_when_another_comes_next():
    """capstone.decode keeps its 16 GB set-up for capstone.fused_decode, and only for it."""
    from examples.capstone import decode
    from examples.lab.__main__ import _release_shared

    assert "capstone.fused_decode" in decode.SHARES_WITH and decode.release is decode.release_setup
    freed = []
    module = types.SimpleNamespace(SHARES_WITH=("capstone.fused_decode",), release=lambda: freed.append(1))
    assert _release_shared(module, ["capstone.decode", "capstone.fused_decode"], 0) is module
    assert freed == [], "the sharing topic comes next: keep it"
    assert _release_shared(module, ["capstone.decode", "stack.roofline", "capstone.fused_decode"], 0) is None
    assert _release_shared(module, ["capstone.decode"], 0) is None
    assert freed == [1, 1], "another topic, or none, comes next: free it"
    # The same topic twice: what follows this run of it decides, not what follows its first.
    twice = ["capstone.decode", "stack.roofline", "capstone.decode", "capstone.fused_decode"]
    assert _release_shared(module, twice, 2) is module and freed == [1, 1]


def test_a_set_up_kept_for_a_topic_that_is_then_skipped_is_freed(run_fake_topics, capsys):
    """capstone.decode kept its set-up for capstone.fused_decode, which a small card then skipped:
    the set-up stayed allocated for the rest of the run (2.6 GiB of an 8 GiB preview on an H200)."""
    freed: list[str] = []
    keeper = fake_topic("keeper")
    keeper.SHARES_WITH, keeper.release = ("fake.sharer",), lambda: freed.append("keeper")
    sharer = fake_topic("sharer")
    sharer.REQUIRES_CUDA = True  # skipped on this CPU, as a topic too big for the card is skipped
    topics = {"fake.keeper": keeper, "fake.sharer": sharer, "fake.after": fake_topic("after")}
    assert run_fake_topics(topics) == 0
    assert "skipped fake.sharer: needs a CUDA GPU" in capsys.readouterr().out
    assert freed == ["keeper"], "what was kept for the skipped topic must go when it is skipped"
    freed.clear()
    sharer.REQUIRES_CUDA = False  # it runs and uses the set-up; whatever it did, the runner frees it after
    assert run_fake_topics(topics) == 0 and freed == ["keeper"]
    freed.clear()
    sharer.measure = lambda lab: (_ for _ in ()).throw(RuntimeError("its set-up step failed"))
    assert run_fake_topics(topics) == 1 and freed == ["keeper"], "a topic that fails before its own release"


def test_the_check_reads_every_chunk_and_both_parts_of_complex_numbers(monkeypatch):
    """The error is summed a chunk at a time on the output's device; chunking changes nothing,
    and an error only in the imaginary part, or only in the last chunk, is caught."""
    from examples.lab import harness

    monkeypatch.setattr(harness, "CHECK_CHUNK", 7)
    lab = Lab(torch.device("cpu"), quick=True)
    x = torch.randn(10, 5, dtype=torch.float32)
    reference = x.double()
    off = x.clone()
    off[-1, -1] += 10.0  # in the last, short chunk
    assert lab.check("exact", x, reference, tolerance=1e-6) < 1e-7
    expected = torch.linalg.vector_norm(off.double() - reference) / torch.linalg.vector_norm(reference)
    with pytest.raises(harness.CheckFailed):
        lab.check("last chunk", off, reference, tolerance=1e-3)
    assert lab._checks[-1].rel_error == pytest.approx(expected.item(), rel=1e-12)
    z = torch.randn(16, dtype=torch.complex64)
    assert lab.check("complex", z, z.to(torch.complex128), tolerance=1e-6) < 1e-7
    with pytest.raises(harness.CheckFailed):
        lab.check("imaginary part", z + 1j, z.to(torch.complex128), tolerance=1e-3)


def test_a_topic_keeps_inductors_compile_workers_for_the_next(monkeypatch):
    """Inductor stops idle compile workers after a minute; the lab keeps them for later topics."""
    import torch._inductor.config as inductor_config

    from examples.lab import harness

    monkeypatch.setattr(inductor_config, "quiesce_async_compile_pool", True)
    monkeypatch.delenv("TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL", raising=False)
    harness.run_measurement(fake_topic("workers"), device=torch.device("cpu"), quick=True, command="test")
    assert inductor_config.quiesce_async_compile_pool is False
    assert os.environ["TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL"] == "0"


def test_kernel_timer_cuts_the_profiled_schedule_by_each_calls_gpu_work(monkeypatch):
    """The 'kernel' timer profiles each call alone to count its GPU operations,
    then cuts one profiled schedule by those counts: a flush before each sample
    is dropped, and each sample is its own operations' durations over ``inner``."""
    from examples.lab.kernels import GpuOp

    ops = {"flush": [7_000], "a": [1_000, 2_000], "b": [5_000]}  # ns per GPU operation
    ran: list[int] = []

    class Flush:
        def __init__(self, device):
            pass

        def __call__(self):
            ran.extend(ops["flush"])

    def events(work):
        ran.clear()
        work()
        return [GpuOp(i, d, "kernel") for i, d in enumerate(ran)]

    monkeypatch.setattr(timing, "L2Flusher", Flush)
    monkeypatch.setattr(timing, "gpu_operations", events)
    fns = {"a": lambda: ran.extend(ops["a"]), "b": lambda: ran.extend(ops["b"])}
    samples = timing.measure_kernels(fns, device=torch.device("cuda"), rounds=[["a", "b"], ["b", "a"]],
                                     inner=2, flush_l2=True)
    assert samples == {"a": [3e-6, 3e-6], "b": [5e-6, 5e-6]}

    uneven = iter([[1], [1, 1], [1, 1, 1, 1, 1]])  # a call that ran more the second time
    fns = {"a": lambda: ran.extend(next(uneven))}
    with pytest.raises(RuntimeError, match="not the same GPU work every call"):
        timing.measure_kernels(fns, device=torch.device("cuda"), rounds=[["a"], ["a"]])
    with pytest.raises(ValueError, match="needs a CUDA device"):
        timing.measure_kernels(fns, device=torch.device("cpu"), rounds=[["a"]])


def test_kernel_timer_falls_back_to_the_host_clock_without_a_gpu():
    from examples.lab.harness import Lab

    lab = Lab(torch.device("cpu"), quick=True)
    result = lab.time(lambda: torch.ones(4).sum(), case={"n": 4}, timer="kernel", repetitions=3, warmup=1)
    assert result.method == "host_sync"


def test_each_run_points_the_compiler_caches_it_was_not_given_at_new_empty_folders(monkeypatch):
    import examples.lab.__main__ as runner

    for name in runner.CACHE_VARIABLES:
        monkeypatch.setenv(name, "")  # recorded, so that what the runner sets is undone
        monkeypatch.delenv(name)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/the/user/s/own")
    first, second = runner._fresh_caches(), runner._fresh_caches()
    assert first != second and os.listdir(first) == []
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(first)
    assert os.environ["TRITON_CACHE_DIR"] == "/the/user/s/own", "a cache the user set is theirs"


@pytest.fixture
def fake_torch(monkeypatch, tmp_path):
    """A torch package the runner finds (not imports), in a folder the test says it may not write."""
    import importlib.machinery
    import importlib.util

    import examples.lab.__main__ as runner

    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    spec = importlib.machinery.ModuleSpec("torch", None, origin=str(package / "__init__.py"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "torch" else real_find_spec(name, *a))
    writable = {"yes": False}
    real_can_write = runner._can_write
    monkeypatch.setattr(runner, "_can_write", lambda folder: writable["yes"] if folder == str(package)
                        else real_can_write(folder))
    for name in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE"):
        monkeypatch.setenv(name, "")  # recorded, so that what the runner sets is undone
        monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return package, writable


@pytest.mark.parametrize("why", ["its folder is read-only", "PYTHONDONTWRITEBYTECODE is set"])
@pytest.mark.parametrize("cache", ["the user's cache", "no user cache"])
def test_a_torch_without_bytecode_python_may_not_write_gets_one_bytecode_folder_for_every_run(
        fake_torch, tmp_path, monkeypatch, why, cache):
    """Every process that imports such a torch would compile its sources again; the lab's
    processes share one folder in the user's cache (kept from run to run, as pip's bytecode
    would be), or the run's own where there is none, and write their bytecode there only."""
    import examples.lab.__main__ as runner

    _, writable = fake_torch
    if why == "PYTHONDONTWRITEBYTECODE is set":
        writable["yes"] = True
        monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
        monkeypatch.setattr(sys, "dont_write_bytecode", True)
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache" if cache == "the user's cache" else blocker))
    folder = runner._bytecode_cache(str(tmp_path / "run"))
    expected = (tmp_path / "cache" / "python-to-silicon" / "bytecode" if cache == "the user's cache"
                else tmp_path / "run" / "bytecode")
    assert folder == str(expected) and os.path.isdir(folder)
    assert sys.pycache_prefix == folder and os.environ["PYTHONPYCACHEPREFIX"] == folder
    assert not sys.dont_write_bytecode and "PYTHONDONTWRITEBYTECODE" not in os.environ


def test_a_runs_compiler_caches_are_gone_when_it_ends(tmp_path):
    """Its kernels and builds serve no later run, and a GPU run leaves hundreds of MiB."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        env.pop(name, None)
    code = ("import os, examples.lab.__main__ as r; root = r._fresh_caches(); "
            "os.makedirs(os.environ['TRITON_CACHE_DIR']); print(root)")
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          check=True)
    root = done.stdout.strip()
    assert root.startswith(str(tmp_path)) and not os.path.exists(root)


def test_a_folder_is_writable_only_if_a_file_can_be_made_there(tmp_path):
    import examples.lab.__main__ as runner

    assert runner._can_write(str(tmp_path)) and list(tmp_path.iterdir()) == [], "the probe leaves nothing"
    assert not runner._can_write(str(tmp_path / "missing"))


@pytest.mark.parametrize("why", ["torch has its bytecode", "Python may write it", "the user chose a folder"])
def test_the_bytecode_is_left_where_python_keeps_it_otherwise(fake_torch, tmp_path, monkeypatch, why):
    import importlib.util

    import examples.lab.__main__ as runner

    package, writable = fake_torch
    if why == "torch has its bytecode":
        compiled = importlib.util.cache_from_source(str(package / "__init__.py"))
        os.makedirs(os.path.dirname(compiled))
        open(compiled, "wb").close()
    elif why == "Python may write it":
        writable["yes"] = True
    else:
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "mine"))
    assert runner._bytecode_cache(str(tmp_path / "run")) is None
    assert sys.pycache_prefix is None and not (tmp_path / "run").exists()


def test_the_runner_imports_the_compiler_stack_up_front_only_for_topics_that_compile():
    """Frozen with the rest, its objects are not walked again before every topic; a run of
    topics that never compile is spared the import."""
    import examples.lab.__main__ as runner

    assert runner._compiles("compile.modes") and runner._compiles("capstone.fused_decode")
    assert not runner._compiles("dispatch.op_cost") and not runner._compiles("blas.levels")


def test_an_autotuners_candidates_are_compiled_once_per_key_all_at_once():
    """Every configuration it will try, handed to Triton's asynchronous compile (a pool of
    threads) before its first call for a key; never again for that key, nor for a key it has
    already tuned."""
    from triton.runtime import _async_compile

    from examples.lab import compile_candidates as cc

    class FakeAutotuner:
        arg_names, keys = ["x", "n", "k"], ["n", "k"]

        def __init__(self):
            self.cache, self.warmed = {}, []

        def warmup(self, *args, grid, **kwargs):
            mode = _async_compile.active_mode.get()
            self.warmed.append((args[1:], kwargs, mode is not None))

    tuner, x = FakeAutotuner(), torch.zeros(2, dtype=torch.bfloat16)
    assert cc.autotune_key(tuner, (x, 4096, 14336), {"INT8": True}) == (4096, 14336, "torch.bfloat16")
    assert cc.compile_candidates(tuner, None, x, 4096, 14336, INT8=True)
    assert tuner.warmed == [((4096, 14336), {"INT8": True}, True)], "inside the asynchronous compile mode"
    assert not cc.compile_candidates(tuner, None, x, 4096, 14336, INT8=True), "once per key"
    tuner.cache[(4096, 4096, "torch.bfloat16")] = "tuned"
    assert not cc.compile_candidates(tuner, None, x, 4096, 4096), "a key already tuned"
    assert cc.compile_candidates(tuner, None, x.float(), 4096, 4096), "another dtype is another key"
    assert len(tuner.warmed) == 2
