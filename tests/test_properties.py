"""Property-based tests (hypothesis): the record model, the validator, the site's loader and the
calculators' Python models, on inputs the strategies make.

- The record model round-trips (dump, parse: the same record) and never crashes: any JSON at all is
  a record or a one-line :class:`RecordError` naming its origin, never another exception.
- A mutated real record (a value replaced, a key dropped, a number negated or scaled) is a record or
  a one-line error, through ``parse_record``, ``lab validate`` and the site's loader alike; one whose
  statistics were put out of order is always refused, naming the statistic.
- Each calculator's model holds its invariants: monotone in what it should be, in consistent units,
  and its command line refuses bad input in one line.

Every test is bounded (``max_examples``, no deadline flakiness on a loaded CI machine, no example
database written into the work tree): together they take a few seconds of CPU.
"""
from __future__ import annotations

import copy
import io
import json
import math
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from examples.lab.records import (BOOK_RECORDS, Metric, Record, RecordError, Row, dump_record, load_record,
                                  parse_record, record_files)

REPO = Path(__file__).resolve().parents[1]
#: Bounded for CI: examples per test, no deadline (a shared runner stalls), nothing written to disk.
BOUNDED = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FEW = settings(BOUNDED, max_examples=25)

#: Real records of different shapes, small enough to mutate quickly: a few rows and notes, one
#: with notes only, one with load readings and twenty rows.
SAMPLES = [next(p for p in record_files(BOOK_RECORDS) if p.parts[-2] == topic and p.parts[-3] == "nvidia-h200")
           for topic in ("compile.pipeline", "dispatch.kernel_count", "graphs.launch_cost")]
SAMPLE_TEXT = {p: p.read_text(encoding="utf-8") for p in SAMPLES}


def _one_line(error: Exception, origin: str) -> None:
    text = str(error)
    assert "\n" not in text and text.startswith(f"{origin}: "), text


# -- the record model -----------------------------------------------------------------------

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False)
scalars = st.one_of(st.booleans(), st.integers(-2**31, 2**31), finite, st.text(max_size=12), st.none())


@st.composite
def metrics(draw) -> Metric:
    """A metric whose statistics are in order and whose sign its unit allows."""
    unit = draw(st.sampled_from(["us", "ms", "GB/s", "TFLOP/s", "x", "", "MiB", "furlongs"]))
    values = sorted(draw(st.lists(positive, min_size=5, max_size=5)))
    keep = draw(st.sampled_from(["all", "median", "quartiles"]))
    low, q1, median, q3, high = values
    stats = {"median": median}
    if keep in ("all", "quartiles"):
        stats.update(q1=q1, q3=q3)
    if keep == "all":
        stats.update(min=low, max=high, n=draw(st.integers(1, 1000)))
    return Metric(unit=unit, method=draw(st.sampled_from(["computed", "cuda_event"])), **stats)


rows = st.builds(Row, case=st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=6), scalars, max_size=4),
                 metrics=st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=8), metrics(), min_size=1,
                                         max_size=4))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                           max_leaves=12)


@BOUNDED
@given(results=st.lists(rows, max_size=5), notes=st.dictionaries(st.text(min_size=1, max_size=8), json_values,
                                                                  max_size=3))
def test_the_record_model_round_trips(results, notes):
    assume(results or notes)
    base = load_record(SAMPLES[0])
    record = base.model_copy(update={"results": results, "notes": notes})
    record = Record.model_validate(record.model_dump())  # as the harness builds one: validated
    again = parse_record(dump_record(record), "generated")
    assert again == record and dump_record(again) == dump_record(record)


@BOUNDED
@given(st.one_of(json_values, st.text(max_size=60), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))))
def test_any_text_is_a_record_or_a_one_line_error(value):
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        parse_record(text, "input.json")
    except RecordError as error:
        _one_line(error, "input.json")


# -- mutated real records ---------------------------------------------------------------------

def _paths(node, prefix=()):
    """Every path into a JSON value: keys and indices."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _at(node, path):
    for step in path:
        node = node[step]
    return node


@st.composite
def mutants(draw) -> tuple[Path, str]:
    """A real record with one change: a value replaced, a key dropped, a number negated or scaled."""
    path = draw(st.sampled_from(SAMPLES))
    data = json.loads(SAMPLE_TEXT[path])
    where = draw(st.sampled_from(list(_paths(data))[1:]))
    parent, key = _at(data, where[:-1]), where[-1]
    how = draw(st.sampled_from(["replace", "drop", "negate", "scale"]))
    value = parent[key]
    if how == "drop" and isinstance(parent, dict):
        del parent[key]
    elif how in ("negate", "scale") and isinstance(value, (int, float)) and not isinstance(value, bool):
        parent[key] = -value if how == "negate" else value * draw(st.sampled_from([0, 0.5, 1e6, 1e300]))
    else:
        parent[key] = draw(json_values)
    return path, json.dumps(data, allow_nan=True)


@BOUNDED
@given(mutants())
def test_a_mutated_record_is_a_record_or_a_one_line_error(mutant):
    path, text = mutant
    try:
        record = parse_record(text, str(path))
    except RecordError as error:
        _one_line(error, str(path))
        return
    # What loads, holds: statistics in order, and it writes and reads back the same.
    for row in record.results:
        for m in row.metrics.values():
            values = [v for v in (m.min, m.q1, m.median, m.q3, m.max) if v is not None]
            assert values == sorted(values)
    assert parse_record(dump_record(record), "again") == record


@BOUNDED
@given(path=st.sampled_from(SAMPLES), pick=st.integers(0, 10**6),
       pair=st.sampled_from([("min", "q1"), ("q1", "median"), ("median", "q3"), ("q3", "max"), ("min", "max")]),
       gap=st.floats(min_value=1e-6, max_value=1e6))
def test_statistics_out_of_order_are_always_refused_naming_the_statistic(path, pick, pair, gap):
    data = json.loads(SAMPLE_TEXT[path])
    found = [(i, n, m) for i, row in enumerate(data["results"]) for n, m in row["metrics"].items()
             if all(m.get(s) is not None for s in pair)]
    assume(found)
    i, name, m = found[pick % len(found)]
    low, high = pair
    m[low] = m[high] + gap * max(1.0, abs(m[high]))  # strictly above the statistic after it
    with pytest.raises(RecordError) as caught:
        parse_record(json.dumps(data), str(path))
    _one_line(caught.value, str(path))
    assert f"results.{i}.metrics.{name}." in str(caught.value)


def _validate(folder: Path) -> tuple[int, str, str]:
    from examples.lab.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(["validate", str(folder)])
        except SystemExit as exc:
            status = exc.code
    return status, out.getvalue(), err.getvalue()


@FEW
@given(mutants())
def test_lab_validate_and_the_site_loader_agree_in_one_line(mutant):
    """``lab validate`` and the site's loader read a mutated record the same way: both take it, or
    both refuse it in one line (validate: status 1, the file named; the loader: a reader's file left
    out with its reason, the same file of the book's own kept as broken)."""
    if str(REPO / "overrides" / "hooks") not in sys.path:
        sys.path.insert(0, str(REPO / "overrides" / "hooks"))
    from lab_site import store

    origin, text = mutant
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        file = root / origin.relative_to(BOOK_RECORDS)
        file.parent.mkdir(parents=True)
        file.write_text(text, encoding="utf-8")
        status, out, err = _validate(root)
        assert "Traceback" not in out + err
        reader = store.load([store.Root(1, root, "lab-records/1-x", "x", True)], REPO)
        book = store.load([store.Root(0, root, "records", None, False)], REPO)
    if status == 0:
        assert not reader.left_out and not book.broken and out.startswith("1 records valid")
        return
    assert status == 1 and not out and err.count("\n") == 1 and str(file) in err, (status, out, err)
    (reason,) = reader.left_out.values()
    assert "\n" not in reason and reason in err  # the same words, the file named once by the report
    (broken,) = book.broken.values()
    assert broken == err.strip().removeprefix("invalid record: ")


# -- the calculators' Python models -------------------------------------------------------------

from examples.capstone.speed_of_light import Shape, kv_bytes_per_token, speed_of_light, weight_count  # noqa: E402
from examples.collectives.ring_model import bus_bandwidth, ring_allreduce_seconds, ring_bound  # noqa: E402
from examples.dispatch.budget import budget  # noqa: E402
from examples.graphs.launch_budget import launch_budget, verdict  # noqa: E402
from examples.stack.roofline_model import ridge_point, roofline  # noqa: E402

sizes = st.floats(min_value=1.0, max_value=1e12)
rates = st.floats(min_value=1e-3, max_value=1e6)
counts = st.integers(min_value=1, max_value=10_000)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@BOUNDED
@given(layers=counts, kernels=counts, launch_us=rates, tokens=rates, more=st.integers(1, 100))
def test_launch_budget_grows_with_kernels_and_launch_cost(layers, kernels, launch_us, tokens, more):
    b = launch_budget(layers=layers, kernels_per_layer=kernels, launch_us=launch_us, tokens_per_second=tokens)
    assert b.overhead_ms > 0 and b.budget_ms > 0 and _close(b.fraction, b.overhead_ms / b.budget_ms)
    assert _close(b.budget_ms, 1e3 / tokens)  # ms per token
    bigger = launch_budget(layers=layers, kernels_per_layer=kernels + more, launch_us=launch_us,
                           tokens_per_second=tokens)
    assert bigger.overhead_ms > b.overhead_ms and bigger.fraction > b.fraction
    faster = launch_budget(layers=layers, kernels_per_layer=kernels, launch_us=launch_us, tokens_per_second=tokens * 2)
    assert faster.fraction >= b.fraction and verdict(b) == ("over budget" if b.fraction >= 1 else "within budget")


@BOUNDED
@given(ops=counts, cpu_us=rates, gpu_us=st.floats(0, 1e6), fusion=st.floats(1, 100), graph_us=st.floats(0, 1e3))
def test_dispatch_budget_is_bound_by_the_slower_side(ops, cpu_us, gpu_us, fusion, graph_us):
    b = budget(ops=ops, cpu_us=cpu_us, gpu_us=gpu_us, fusion=fusion, graph_us=graph_us)
    assert _close(b.step_ms, max(b.cpu_ms, b.gpu_ms)) if hasattr(b, "step_ms") else True
    assert b.bound == ("CPU" if b.cpu_ms > b.gpu_ms else "GPU")
    values = [v for v in vars(b).values() if isinstance(v, float)]
    assert all(v >= 0 for v in values)
    # Fusing can only help, and never below the GPU's own time.
    unfused = budget(ops=ops, cpu_us=cpu_us, gpu_us=gpu_us, fusion=1, graph_us=graph_us)
    fused_ms = [v for k, v in vars(b).items() if k.startswith("fused")]
    if fused_ms:
        assert fused_ms[0] <= [v for k, v in vars(unfused).items() if k.startswith("fused")][0] + 1e-12
        assert fused_ms[0] >= b.gpu_ms - 1e-12


@BOUNDED
@given(flops=sizes, nbytes=sizes, peak=rates, bandwidth=rates, factor=st.floats(1.01, 1e3))
def test_roofline_is_capped_by_the_peak_and_monotone_in_intensity(flops, nbytes, peak, bandwidth, factor):
    r = roofline(flops=flops, nbytes=nbytes, peak_tflops=peak, bandwidth_gbs=bandwidth)
    assert r.attainable_tflops <= peak * (1 + 1e-12) and r.time_us > 0
    assert _close(r.ridge, ridge_point(peak_tflops=peak, bandwidth_gbs=bandwidth))
    assert r.bound == ("memory" if r.intensity < r.ridge else "compute")
    denser = roofline(flops=flops * factor, nbytes=nbytes, peak_tflops=peak, bandwidth_gbs=bandwidth)
    assert denser.attainable_tflops >= r.attainable_tflops * (1 - 1e-12)  # more work per byte: never slower per FLOP
    assert denser.time_us >= r.time_us * (1 - 1e-12)  # more work: never less time
    # Units: the floor is the slower of the two times, in microseconds.
    assert _close(r.time_us, max(flops / (peak * 1e12), nbytes / (bandwidth * 1e9)) * 1e6)


@BOUNDED
@given(gpus=st.integers(1, 1024), nbytes=sizes, bandwidth=st.floats(1e3, 1e13), latency=st.floats(0, 1e-3))
def test_ring_allreduce_time_is_monotone_and_bus_bandwidth_consistent(gpus, nbytes, bandwidth, latency):
    t = ring_allreduce_seconds(gpus=gpus, nbytes=nbytes, bandwidth=bandwidth, latency=latency)
    if gpus == 1:
        assert t == 0 and ring_bound(gpus=1, nbytes=nbytes, bandwidth=bandwidth, latency=latency) is None
        return
    assert t > 0
    assert ring_allreduce_seconds(gpus=gpus, nbytes=nbytes * 2, bandwidth=bandwidth, latency=latency) > t
    assert ring_allreduce_seconds(gpus=gpus, nbytes=nbytes, bandwidth=bandwidth * 2, latency=latency) <= t
    assert ring_allreduce_seconds(gpus=gpus + 1, nbytes=nbytes, bandwidth=bandwidth, latency=latency) >= t * (1 - 1e-12)
    # Bus bandwidth: algbw x 2(p-1)/p, never more than twice the algorithm bandwidth.
    algbw = nbytes / t
    busbw = bus_bandwidth("all_reduce", gpus=gpus, algbw=algbw)
    assert algbw <= busbw < 2 * algbw or gpus == 2 and _close(busbw, algbw)


shapes = st.builds(Shape, layers=st.integers(1, 128), hidden=st.integers(64, 16384), ffn=st.integers(64, 65536),
                   heads=st.integers(1, 128), kv_heads=st.integers(1, 16), head_dim=st.integers(16, 256),
                   vocab=st.integers(256, 262144))


@BOUNDED
@given(shape=shapes, weight_bytes=st.sampled_from([0.5, 1.0, 2.0, 4.0]), context=st.integers(0, 131072),
       batch=st.integers(1, 256), bandwidth=st.floats(10, 1e5), more=st.integers(1, 4096))
def test_speed_of_light_reads_more_bytes_for_more_context_and_batch(shape, weight_bytes, context, batch, bandwidth,
                                                                    more):
    s = speed_of_light(shape, weight_bytes=weight_bytes, context=context, batch=batch, bandwidth_gbs=bandwidth)
    assert s.step_gb == pytest.approx(s.weight_gb + s.kv_gb) and s.ms_per_step > 0
    assert s.tokens_per_s == pytest.approx(batch / s.ms_per_step * 1e3)
    assert s.kv_kib_per_token * 1024 == kv_bytes_per_token(shape) and weight_count(shape) > 0
    longer = speed_of_light(shape, weight_bytes=weight_bytes, context=context + more, batch=batch,
                            bandwidth_gbs=bandwidth)
    assert longer.ms_per_step > s.ms_per_step and longer.kv_gb > s.kv_gb and longer.weight_gb == s.weight_gb
    wider = speed_of_light(shape, weight_bytes=weight_bytes, context=context, batch=batch + 1, bandwidth_gbs=bandwidth)
    assert wider.tokens_per_s >= s.tokens_per_s * (1 - 1e-12)  # batching never lowers the ceiling
    assert s.bound == ("weights" if s.weight_gb >= s.kv_gb else "kv cache")


#: Each calculator's command line and a value its model refuses (none of them is a number it takes).
BAD_FLAGS = {
    "examples.graphs.launch_budget": ["--layers", "--kernels-per-layer", "--launch-us", "--tokens-per-second"],
    "examples.dispatch.budget": ["--ops", "--cpu-us", "--fusion"],
    "examples.stack.roofline_model": ["--flops", "--bytes", "--peak-tflops", "--bandwidth-gbs"],
    "examples.capstone.speed_of_light": ["--bandwidth-gbs", "--batch", "--weight-bytes"],
    "examples.collectives.ring_model": ["--gpus", "--bytes", "--bandwidth"],
    "examples.collectives.two_level": ["--nodes", "--gpus-per-node", "--bytes", "--nvlink-bandwidth",
                                       "--network-bandwidth", "--call"],
}


@FEW
@given(module=st.sampled_from(sorted(BAD_FLAGS)), pick=st.integers(0, 100),
       bad=st.sampled_from(["-1", "0", "nan", "inf", "-inf", "abc", "", "1e400", "--"]))
def test_a_calculator_refuses_bad_input_in_one_line(module, pick, bad):
    """What a reader types into a model's command line: a number it refuses, or not a number at all."""
    import importlib

    example = importlib.import_module(module)
    flags = BAD_FLAGS[module]
    flag = flags[pick % len(flags)]
    argv = list(example.EXAMPLE_ARGV)  # the page's own inputs, one of them made bad
    argv[argv.index(flag) + 1] = bad
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        with pytest.raises(SystemExit) as caught:
            example.main(argv)
    assert caught.value.code == 2 and err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue()
