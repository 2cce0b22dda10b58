"""Chapter 1's calculators and decoders: the roofline, the MMA shapes, the PTX."""
from __future__ import annotations

import json

import pytest
import torch

from examples.stack.layer_costs import layers
from examples.stack.mma_shape import GENERATIONS, mma_flops
from examples.stack.roofline import sm_clocks_during, work
from examples.stack.roofline_model import ridge_point, roofline


def test_ridge_point_is_peak_over_bandwidth():
    assert ridge_point(peak_tflops=1000, bandwidth_gbs=5000) == pytest.approx(200)


@pytest.mark.parametrize("intensity, bound", [(10, "memory"), (1000, "compute")])
def test_roofline_bound_and_rate(intensity, bound):
    r = roofline(flops=intensity * 1e6, nbytes=1e6, peak_tflops=1000, bandwidth_gbs=5000)
    assert r.bound == bound
    assert r.attainable_tflops == pytest.approx(min(1000, intensity * 5))
    # the floor is the larger of the two times
    assert r.time_us == pytest.approx(max(intensity * 1e6 / 1e15, 1e6 / 5e12) * 1e6)


def test_gemm_intensity_grows_with_size():
    flops, nbytes = work("gemm", 4096, 2)
    assert flops / nbytes == pytest.approx(4096 / 3)
    assert work("add", 16, 4) == (256, 3 * 256 * 4)
    assert work("sum", 16, 2) == (256, 256 * 2)  # reads only
    with pytest.raises(ValueError):
        work("conv", 16, 4)


def test_roofline_on_the_cpu_places_every_point_under_its_roofs():
    from examples.lab.harness import run_measurement
    from examples.stack import roofline as topic

    record = run_measurement(topic, device=torch.device("cpu"), quick=True, command="test")
    rows = {(r.case["op"], r.case.get("n")): r.metrics for r in record.results}
    roof = rows[("memory roof", None)]["bandwidth"].median
    streams = {op: rows[(op, 2048)]["bandwidth"].median for op in ("copy", "add", "sum")}
    assert roof == max(streams.values())
    assert record.notes["memory roof from"] == max(streams, key=streams.get)
    peak = rows[("sustained", 256)]["rate"].median
    assert rows[("ridge", None)]["rate"].median == peak  # the ridge uses the sustained roof
    for (op, n), metrics in rows.items():
        if "of_roof" in metrics:
            rate = metrics["rate"].median if "rate" in metrics else 0.0
            expected = max(rate / peak, metrics["bandwidth"].median / roof)
            assert metrics["of_roof"].median == pytest.approx(expected)
            if op in ("copy", "add", "sum"):
                # The memory roof is their best bandwidth. (Their of_roof may still pass 1
                # on a busy CPU: the sum's additions over a sustained GEMM rate that the
                # load held down; on a GPU a stream's FLOP rate is far below any GEMM's.)
                assert metrics["bandwidth"].median / roof <= 1.0


def test_sm_clocks_need_nvml(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)  # import fails
    called = []
    assert sm_clocks_during(lambda: called.append(1), 3, 0) is None
    assert called == []  # nothing queued without a clock to read


def test_mma_shapes():
    assert mma_flops("m16n8k16") == 4096
    assert mma_flops("m64n64k16") == 131072
    with pytest.raises(ValueError):
        mma_flops("16x8x16")


def test_hopper_doubles_ampere_per_sm_per_clock():
    ampere, hopper = GENERATIONS
    assert hopper.flops_per_sm_clock / ampere.flops_per_sm_clock == pytest.approx(2, rel=1e-3)
    assert hopper.flops_per_tensor_core_clock == pytest.approx(1024, rel=1e-3)


def test_layers_on_cpu_are_cpu_only():
    names = list(layers(__import__("torch").device("cpu")))
    assert names[0] == "1 Python call" and not any("CUDA" in n for n in names)


@pytest.mark.parametrize("argv", [["--flops", "0", "--bytes", "1", "--peak-tflops", "1", "--bandwidth-gbs", "1"],
                                  ["--flops", "1", "--bytes", "nan", "--peak-tflops", "1", "--bandwidth-gbs", "1"],
                                  ["--flops", "1", "--bytes", "1", "--peak-tflops", "1"]])
def test_roofline_cli_rejects(cli, argv):
    cli.one_line_error(cli.run("-m", "examples.stack.roofline_model", *argv))


def test_roofline_cli_json(cli):
    proc = cli.run("-m", "examples.stack.roofline_model", "--flops", "1e6", "--bytes", "1e6",
                   "--peak-tflops", "1000", "--bandwidth-gbs", "5000", "--json")
    assert proc.returncode == 0, cli.explain(proc)
    assert json.loads(proc.stdout)["bound"] == "memory"


def test_mma_cli_rejects_bad_shape(cli):
    assert "m16n8k16" in cli.one_line_error(cli.run("-m", "examples.stack.mma_shape", "--shape", "big"))


@pytest.mark.parametrize("arch, ptx, sass", [(80, "mma.sync.aligned.m16n8k16", "HMMA.16816"),
                                             (90, "wgmma.mma_async", "HGMMA.64x64x16")])
def test_triton_compiles_tensor_core_instructions_without_a_gpu(arch, ptx, sass):
    pytest.importorskip("triton")
    from examples.stack.triton_ptx import compile_tile_matmul, mma_instructions

    found = mma_instructions(compile_tile_matmul(arch))
    assert any(name.startswith(ptx) for name in found["ptx"]), found
    if not found["sass"][0].startswith("unavailable"):
        assert any(name.startswith(sass) for name in found["sass"]), found


def test_split_trace_keeps_ops_api_calls_and_gpu_operations_apart():
    from examples.stack.matmul_kernel import split_trace

    # the events of one warmed 8192^2 bf16 product on an H200, as recorded
    trace = [("CPU", "aten::matmul"), ("CPU", "aten::mm"), ("CPU", "Activity Buffer Request"),
             ("CPU", "cudaMemsetAsync"), ("CPU", "cuLaunchKernelEx"),
             ("CPU", "cudaDeviceSynchronize"), ("GPU", "Memset (Device)"),
             ("GPU", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT")]
    assert split_trace(trace) == {
        "aten": ["aten::matmul", "aten::mm"],
        "api": ["cudaMemsetAsync", "cuLaunchKernelEx"],  # the tracer's own wait left out
        "gpu": ["Memset (Device)", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"],
    }


def test_split_trace_of_a_cpu_product_has_ops_only():
    from examples.stack.matmul_kernel import kernels_of, split_trace

    x = torch.randn(32, 32)
    kinds = split_trace(kernels_of(lambda: x @ x))
    assert "aten::mm" in kinds["aten"]
    assert kinds["api"] == [] and kinds["gpu"] == []


def test_the_bare_launch_is_about_half_of_a_small_op_or_more_in_every_gpu_run():
    """The page says the bare launch costs about half of a whole small CUDA op of the same run
    or more (how much more is the host's), and is part of it: checked against every committed
    GPU record."""
    from pathlib import Path

    ratios = []
    for path in sorted(Path("docs/records").glob("nvidia-*/stack.layer_costs/*.json")):
        results = json.loads(path.read_text())["results"]
        cost = {row["case"]["layer"]: row["metrics"]["per_call"]["median"] for row in results}
        bare = next(v for k, v in cost.items() if "bare CUDA launch" in k)
        whole = next(v for k, v in cost.items() if "CUDA op (add" in k)
        ratios.append((path.name, bare / whole))
        # A record timed in interleaved rounds also has the paired ratio, round by round.
        paired = [row["metrics"]["bare_launch_over_layer"]["median"] for row in results
                  if "CUDA op (add" in row["case"]["layer"] and "bare_launch_over_layer" in row["metrics"]]
        ratios += [(path.name + " (paired)", r) for r in paired]
    assert ratios, "no GPU record of stack.layer_costs"
    assert all(0.4 <= r < 1 for _, r in ratios), ratios


def _layer_costs_rows(lab) -> dict[str, dict]:
    from examples.stack import layer_costs

    try:
        layer_costs.measure(lab)
    finally:
        lab.load.stop()
    return {row.case["layer"]: row.metrics for row in lab.rows()}


def test_layer_costs_times_every_row_in_the_same_interleaved_rounds():
    """The page compares rows with each other, so they are timed together, one sample of each
    per round (a drift of the host's clock falls on all alike), each sample many back-to-back
    calls on the synchronized host clock; the layer names are the ones the pages quote."""
    from examples.lab.harness import Lab

    lab = Lab(torch.device("cpu"), quick=True)
    rows = _layer_costs_rows(lab)
    assert list(rows) == list(layers(torch.device("cpu")))  # the CPU rows, in the staircase's order
    for metrics in rows.values():
        per_call = metrics["per_call"]
        assert per_call.method == "host_sync, interleaved rounds"
        assert per_call.unit == "us" and per_call.inner == 200 and per_call.n == lab.repetitions
        assert "bare_launch_over_layer" not in metrics  # no launch to set the rows against on a CPU


def test_layer_costs_sets_the_bare_launch_against_each_row_round_by_round(monkeypatch):
    """On a GPU the bare launch is the baseline: every other row gets the launch's sample over
    its own of the same round, so row 7's is the share of the op that is the launch. Checked on
    the CPU with stand-ins under the GPU rows' names."""
    from examples.lab.harness import Lab
    from examples.stack import layer_costs

    cpu_layers = layer_costs.layers

    def with_gpu_rows(device):
        cases = cpu_layers(device)
        x = torch.randn(4)
        cases[layer_costs.BARE_LAUNCH] = (layer_costs.python_call, (x,))
        cases["7 CUDA op (add, 4 floats)"] = (torch.add, (x, x))
        return cases

    monkeypatch.setattr(layer_costs, "layers", with_gpu_rows)
    rows = _layer_costs_rows(Lab(torch.device("cpu"), quick=True))
    assert layer_costs.BARE_LAUNCH == "6 bare CUDA launch (torch.cuda._sleep(0))"  # as the pages quote it
    assert "bare_launch_over_layer" not in rows[layer_costs.BARE_LAUNCH]
    ratio = rows["7 CUDA op (add, 4 floats)"]["bare_launch_over_layer"]
    assert ratio.unit == "x"
    assert ratio.method == f"paired ratio {layer_costs.BARE_LAUNCH} / 7 CUDA op (add, 4 floats), " \
                           "host_sync, interleaved rounds"
    assert all("bare_launch_over_layer" in m for name, m in rows.items() if name != layer_costs.BARE_LAUNCH)


def test_mma_paths_checks_each_path_s_instruction_and_restores_the_switch(monkeypatch):
    import os

    from examples.stack.mma_paths import MMA_V3_OFF, instruction_check, mma_v3_off

    wgmma = "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"
    mma_sync = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
    instruction_check([wgmma], "Triton wgmma")
    instruction_check([mma_sync], "Triton mma.sync")
    with pytest.raises(RuntimeError, match="has no wgmma"):
        instruction_check([mma_sync], "Triton wgmma")
    with pytest.raises(RuntimeError, match="not mma.sync alone"):
        instruction_check([wgmma, mma_sync], "Triton mma.sync")
    with pytest.raises(RuntimeError, match="not mma.sync alone"):
        instruction_check([], "Triton mma.sync")
    monkeypatch.delenv(MMA_V3_OFF, raising=False)
    with mma_v3_off(True):
        assert os.environ[MMA_V3_OFF] == "1"
    assert MMA_V3_OFF not in os.environ
    with mma_v3_off(False):
        assert MMA_V3_OFF not in os.environ
    monkeypatch.setenv(MMA_V3_OFF, "0")  # a reader's own setting is put back
    with mma_v3_off(True):
        assert os.environ[MMA_V3_OFF] == "1"
    assert os.environ[MMA_V3_OFF] == "0"


def test_gemm_worklog_builds_its_host_side_without_torch_headers():
    """Parsing torch's headers took most of a 7 s build; the host side is one C entry point,
    and the checks its TORCH_CHECKs made are made in Python before any launch."""
    from examples.stack.gemm_worklog import CPP, Sgemm

    assert [line for line in CPP.splitlines() if line.startswith("#include")] == ["#include <cuda_runtime.h>"]
    assert 'extern "C" int book_worklog_sgemm(' in CPP
    unloaded = Sgemm.__new__(Sgemm)  # no library: every call below is refused before it is reached
    a = torch.zeros(128, 128)
    with pytest.raises(ValueError, match="CUDA"):
        unloaded(a, a, a, 0)
