"""collectives.ddp_probe: DDP's step against its profile, a bucket alone, and
NCCL's protocol probes. On the CPU the two gloo ranks time the step and lay
both ranks' bucket marks on one clock; the trace arithmetic, the TUNING-line
parser and the environment of the probes are checked on made-up inputs."""
from __future__ import annotations

import os

import pytest
import torch

from examples.collectives import ddp_probe as probe


TOPIC = "examples.collectives.ddp_probe"


@pytest.fixture(scope="module")
def quick_run(cli, tmp_path_factory):
    """The example's command line, once (test_runs_on_cpu leaves it to this module)."""
    _, record = cli.quick_record(TOPIC.removeprefix("examples."), tmp_path_factory.mktemp("ddp_probe"), timeout=300)
    return record


def test_record_on_gloo(quick_run):
    # No retry: ring_allreduce._rank_main frees the DDP models' reference cycles
    # and destroys the process group before a rank exits (the gloo teardown crash).
    record = quick_run
    assert record.checks and all(c.passed for c in record.checks)
    names = " | ".join(c.name for c in record.checks)
    assert "DDP gradients, rank 1 vs rank 0" in names
    assert "in DDP's processes" in names and "default, 65536 B" in names

    steps = {r.case["rank"]: r.metrics for r in record.results
             if r.case["part"] == "step"}
    assert set(steps) == {0, 1}
    assert {r.case["profiler"] for r in record.results
            if r.case["part"] in ("step", "bucket")} == {"off"}
    for rank, metrics in steps.items():
        assert set(metrics) == {"step", "peer_ready_later"}
        assert metrics["step"].method == f"host clock, rank {rank}"
        assert metrics["step"].n == 5 and metrics["step"].median > 0
    # Two ranks on one clock: each sees the other as late as it is early.
    assert steps[0]["peer_ready_later"].median == pytest.approx(
        -steps[1]["peer_ready_later"].median, abs=1e-9)

    sums = {(r.case["setting"], r.case["bytes"]): r.metrics
            for r in record.results if r.case["part"] == "all_reduce"}
    bucket = probe.QUICK_BUCKET_BYTES
    assert set(sums) == {("default, DDP's processes", bucket),
                         ("default", probe.SMALL_BYTES), ("default", bucket)}
    t = sums["default", bucket]["time"]
    assert t.method == "host clock, max over 2 ranks per sample"
    assert t.inner == probe.calls_per_sample(bucket) and t.n == 5
    assert sums["default", bucket]["vs_default"].median == 1
    assert "profiler" in record.notes and "model" in record.notes


def test_cuda_without_a_gpu_is_one_line(cli):
    proc = cli.run("-m", "examples.collectives.ddp_probe", "--quick",
                   "--device", "cuda")
    assert "no CUDA GPU" in cli.one_line_error(proc)


def _step(ready_ms, comm_ms, first_ms=0.0, end_ms=10.0, anchor_ms=0.0):
    """A made-up step: ready marks and (start, duration) of each kernel."""
    ns = 1_000_000
    return {"step_ms": end_ms, "anchor_ns": round(anchor_ms * ns),
            "ready_ns": [round(r * ns) for r in ready_ms],
            "trace": {"first": round(first_ms * ns), "end": round(end_ms * ns),
                      "comm": [[round(s * ns), round(d * ns)]
                               for s, d in comm_ms],
                      "names": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]}}


def test_step_figures_of_made_up_steps():
    # Rank 0 reaches every bucket 1 ms before rank 1; moving a bucket takes
    # 0.14 ms once both are there, so rank 0's kernels last 1.14 ms.
    rank0 = _step([2.0, 3.0, 4.0], [(2.0, 1.14), (3.14, 1.0), (4.14, 0.9)])
    rank1 = _step([3.0, 4.0, 5.0], [(3.0, 0.14), (4.0, 0.14), (5.0, 0.04)],
                  end_ms=12.0)
    broken = _step([3.0, 4.0, 5.0], [(3.0, 0.14), (4.0, 0.14)])  # one lost
    figs = probe.step_figures([[rank0, rank0], [rank1, broken]], full=[0, 1])
    assert figs["dropped"] == 1
    r0, r1 = figs["ranks"]
    assert r0["peer_ready_later"] == [pytest.approx(1.0)]
    assert r1["peer_ready_later"] == [pytest.approx(-1.0)]
    assert r0["span"] == [pytest.approx(10.0)]
    assert r1["span"] == [pytest.approx(12.0)]
    assert r0["first_bucket_start"] == [pytest.approx(2.0)]
    assert r0["last_bucket_start"] == [pytest.approx(4.14)]
    # Medians over the two full-size buckets.
    assert r0["bucket_duration"] == [pytest.approx(1.07)]
    assert r0["peer_later"] == [pytest.approx((1.0 + 0.86) / 2)]
    assert r0["transfer"] == [pytest.approx(0.14)]
    assert r1["transfer"] == [pytest.approx(0.14)]  # it waited for nobody
    per0 = figs["buckets"][0]
    assert per0[0]["duration"] == [pytest.approx(1.14)]
    assert per0[2]["peer_later"] == [pytest.approx(0.86)]
    # Every all-reduce ended on both ranks at once: the clocks agree.
    assert figs["end_mismatch"] == [pytest.approx(0.0, abs=1e-6)]


def test_untraced_steps_have_no_trace_figures():
    off = [{k: v for k, v in _step([1.0], [(1.0, 0.1)]).items()
            if k != "trace"}]
    figs = probe.step_figures([off, off], full=[0])
    assert set(figs["ranks"][0]) == {"step", "peer_ready_later"}
    assert figs["end_mismatch"] == [] and figs["dropped"] == 0


def test_timeline_of_kernels():
    kernels = [
        {"name": "sm90_xmma_gemm_bf16", "start": 100, "dur": 50},
        {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL("
                 "ncclDevKernelArgsStorage<4096ul>)", "start": 180, "dur": 70},
        {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL("
                 "ncclDevKernelArgsStorage<4096ul>)", "start": 120, "dur": 20},
    ]
    t = probe.timeline(kernels)
    assert (t["first"], t["end"]) == (100, 250)
    assert t["comm"] == [[120, 20], [180, 70]]
    assert t["names"] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert probe.timeline([]) is None


LOG = """\
h:1:1 [0] NCCL INFO   Algorithm   |            Tree    Ring  CollNetDirect |
h:1:1 [0] NCCL INFO   Protocol    |    LL |   LL128 |  Simple |
h:1:1 [0] NCCL INFO  Max NThreads |   512 |     640 |     512 |
h:1:1 [0] NCCL INFO     Broadcast |   0.0/   0.0 |   0.0/   0.0 |
h:1:1 [0] NCCL INFO     AllReduce |   6.8/  40.0 |  14.1/ 240.0 |
h:1:1 [0] NCCL INFO   Algorithm   |            NVLS   NVLSTree   PAT |
h:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}
h:1:1 [0] NCCL INFO AllReduce: 33570816 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}
h:1:1 [0] NCCL INFO AllReduce: 33570816 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}
h:1:1 [0] NCCL INFO Broadcast: 16384 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}
h:1:1 [0] NCCL INFO AllReduce: 65536 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}
"""


def test_tuning_lines():
    lines = probe.tuning_lines(LOG.splitlines())
    assert lines == [
        "  Algorithm   |            Tree    Ring  CollNetDirect |",
        "  Protocol    |    LL |   LL128 |  Simple |",
        "    AllReduce |   6.8/  40.0 |  14.1/ 240.0 |",
        ("AllReduce: 33570816 Bytes -> Algo RING proto SIMPLE "
         "channel{Lo..Hi}={0..23}"),
        "AllReduce: 65536 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}",
    ]
    assert probe.tuning_lines(["h:1:1 [0] NCCL INFO Init COMPLETE"]) == []


def test_nccl_environment_sets_exactly_its_variables(monkeypatch):
    monkeypatch.setenv("NCCL_PROTO", "LL128")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    with probe.nccl_environment({"NCCL_ALGO": "Tree"}):
        assert os.environ["NCCL_ALGO"] == "Tree"
        assert "NCCL_PROTO" not in os.environ  # the user's is not inherited
    assert os.environ["NCCL_PROTO"] == "LL128" and "NCCL_ALGO" not in os.environ
    with pytest.raises(ValueError), probe.nccl_environment(
            {"NCCL_NVLS_ENABLE": "1"}):
        pass


def test_settings_and_sizes():
    assert set(probe.SETTINGS) == {
        "default", "NCCL_PROTO=LL", "NCCL_PROTO=LL128", "NCCL_PROTO=Simple",
        "NCCL_ALGO=Ring", "NCCL_ALGO=Tree"}
    for env in probe.SETTINGS.values():
        assert set(env) <= set(probe.NCCL_VARIABLES)
    assert probe.calls_per_sample(probe.BUCKET_BYTES) == 8
    assert probe.calls_per_sample(probe.SMALL_BYTES) == 50
    x = torch.arange(10.0)
    assert probe.sample(x, points=3).tolist() == [0.0, 3.0, 6.0, 9.0]
    a = probe.rank_input(1, 0, 1000)
    assert torch.equal(a, probe.rank_input(1, 0, 1000))
    assert not torch.equal(a, probe.rank_input(1, 1, 1000))
