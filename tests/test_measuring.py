"""Chapter 8: the timing helpers of the traps and the profile reader, on the CPU."""
from __future__ import annotations

import types

import pytest
import torch

from examples.measuring.cpu_bound_trap import host_clock_no_sync, pointwise
from examples.measuring.profile_mix import profile_step, union_us
from examples.measuring.warm_cache_trap import ways


def test_host_clock_gives_one_sample_per_repetition():
    x = torch.randn(16)
    samples = host_clock_no_sync(pointwise, x, 7)
    assert len(samples) == 7 and all(s > 0 for s in samples)


def test_the_three_ways_of_timing_the_cache():
    x, y = torch.randn(4), torch.empty(4)
    pool = [(torch.randn(4), torch.empty(4))]
    labels = dict(ways(x, y, pool))
    assert labels["L2 flushed before each"] == {"flush_l2": True}
    assert labels["rotating buffers"]["inputs"] is pool
    assert labels["same buffers (warm L2)"] == {}


def test_profile_step_without_a_gpu_counts_no_kernels():
    if torch.cuda.is_available():
        return  # the GPU path is exercised by the measured run
    kernels, busy, shares, prof = profile_step(lambda: torch.randn(8) * 2, steps=2)
    assert (kernels, busy, shares) == (0, 0, [])
    assert any("aten::mul" in e.key for e in prof.key_averages())


def test_the_gpu_is_busy_for_the_union_of_its_operations():
    from examples.lab.kernels import GpuOp

    ops = [GpuOp(0, 10_000, "a"), GpuOp(5_000, 10_000, "b"),  # overlapping: 15 µs
           GpuOp(20_000, 2_000, "c"), GpuOp(21_000, 500, "d")]  # d inside c
    assert union_us(ops) == 17.0


NCU_CSV = '''==PROF== Connected to process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","h","nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","16,000"
"0","4242","python3","h","nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","33,600,000"
"1","4242","python3","h","_matvec_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","12,000"
"1","4242","python3","h","_matvec_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","80.5"
"2","4242","python3","h","nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT","1","7","(128, 1, 1)","(224, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","80,000"
"3","4242","python3","h","_matvec_kernel","1","7","(128, 1, 1)","(28672, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","77,000"
"3","4242","python3","h","_matvec_kernel","1","7","(128, 1, 1)","(28672, 1, 1)","0","9.0","Command line profiler metrics","not_a_kept_metric","","1"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_parses_into_one_row_per_kernel_in_launch_order():
    from examples.measuring.ncu_capture import by_product, parse

    kernels = parse(NCU_CSV)
    assert [k["name"][:6] for k in kernels] == ["nvjet_", "_matve", "nvjet_", "_matve"]
    assert kernels[0]["duration"] == pytest.approx(16.0) and kernels[0]["dram_read"] == pytest.approx(33.6)
    assert kernels[1]["dram_throughput"] == pytest.approx(80.5) and "not_a_kept_metric" not in kernels[3]
    rows = by_product(kernels)
    assert [(shape.split()[0], lib) for shape, lib, _ in rows] == [
        ("wo", "cuBLAS"), ("wo", "book"), ("w13", "cuBLAS"), ("w13", "book")]
    with pytest.raises(RuntimeError, match="ncu profiled 2 kernels"):
        by_product(kernels[:2])
    # a split-K product and its reduction are one cuBLAS row: times and bytes added
    reduce = {"name": "splitKreduce_kernel", "duration": 4.0, "dram_read": 0.1}
    rows = by_product(kernels[:1] + [reduce] + kernels[1:])
    assert rows[0][2]["kernels"] == 2 and rows[0][2]["duration"] == pytest.approx(20.0)
    assert rows[0][2]["dram_read"] == pytest.approx(33.7) and rows[0][2]["name"].startswith("nvjet")


def test_ncu_is_told_to_profile_only_the_marked_region_with_caches_flushed():
    from examples.measuring.ncu_capture import METRICS, ncu_command

    cmd = ncu_command("ncu", "out.csv", ["python3", "-c", "pass"])
    joined = " ".join(cmd)
    assert "--profile-from-start off" in joined and "--cache-control all" in joined
    assert "--clock-control none" in joined and cmd[-3:] == ["python3", "-c", "pass"]
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(METRICS)


def test_a_waiting_child_runs_only_after_go_and_leaves_on_an_error(tmp_path):
    import sys

    from examples.measuring._waiting_child import WaitingChild

    marker = tmp_path / "ran"
    child = [sys.executable, "-c",
             "import sys; from pathlib import Path; "
             "from examples.measuring._waiting_child import wait_for_go; "
             f"wait_for_go(); Path({str(marker)!r}).write_text('ran'); print('done')"]
    with WaitingChild(child) as waiting:
        waiting.ready(timeout=120)
        assert not marker.exists()  # loaded, waiting: nothing run yet
        done = waiting.go(timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert marker.read_text() == "ran"
    marker.unlink()
    with pytest.raises(ZeroDivisionError):
        with WaitingChild(child) as waiting:
            waiting.ready(timeout=120)
            1 / 0  # the parent fails before its word: the child leaves without running
    assert waiting.proc.returncode == 0 and not marker.exists()


def test_timers_take_turns_in_rotating_rounds_and_keep_one_list_per_round():
    from examples.measuring.timers import time_in_rounds

    ran = []

    def fake(name):
        def timer(call, lab, samples):
            ran.append(name)
            return [float(len(ran))] * samples
        return timer

    windows = {}
    lab = types.SimpleNamespace(load=types.SimpleNamespace(window=lambda a, b: None))
    per_round = time_in_rounds(None, lab, {n: fake(n) for n in "ABC"}, rounds=4, samples=2, windows=windows)
    assert "".join(ran) == "ABCCBABCAACB"  # the lab's round_order
    assert {n: len(r) for n, r in per_round.items()} == {"A": 4, "B": 4, "C": 4}
    assert all(len(samples) == 2 for r in per_round.values() for samples in r)
    # each timer's own blocks, for the clock it ran at
    assert {n: len(w) for n, w in windows.items()} == {"A": 4, "B": 4, "C": 4}
    assert all(a <= b for w in windows.values() for a, b in w)


def test_timers_keep_ratios_per_round_and_tritons_default_return_the_mean():
    from examples.lab.harness import Lab
    from examples.measuring.timers import DO_BENCH, KERNEL, keep

    lab = Lab(torch.device("cpu"), quick=True)
    # seconds per call: the kernel 1 and 2 us in two rounds; do_bench skewed by one slow call
    per_round = {KERNEL: [[1e-6, 1e-6, 1e-6], [2e-6, 2e-6, 2e-6]],
                 DO_BENCH: [[2e-6, 2e-6, 8e-6], [4e-6, 4e-6, 7e-6]]}
    keep(lab, "add", per_round, rounds=2)
    rows = {r.case["timer"]: r.metrics for r in lab.rows()}
    assert set(rows[KERNEL]) == {"time"}
    assert rows[DO_BENCH]["vs_kernel"].median == pytest.approx(2.0)  # medians 2/1 and 4/2
    assert rows[DO_BENCH]["returned"].median == pytest.approx(4.5)  # the means, 4 and 5 us
    assert sorted([rows[DO_BENCH]["returned_vs_kernel"].min, rows[DO_BENCH]["returned_vs_kernel"].max]) == \
        pytest.approx([2.5, 4.0])  # 4/1 and 5/2: the mean over the kernel's median, per round


# A made-up ``ncu --page raw --csv --print-units base`` log in the shape ncu writes it: its own
# lines, a header, a row of units, a row per kernel; a sub-reason, "n/a" and a grid that are not
# numbers. Synthetic: the numbers test the parsing, they are no measurement.
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
_RAW_COLUMNS = ["ID", "Process ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum",
                "sm__cycles_elapsed.avg.per_second", "dram__bytes_read.sum",
                "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                "lts__t_sector_hit_rate.pct", _STALL.format("long_scoreboard"), _STALL.format("barrier"),
                _STALL.format("selected"), _STALL.format("math_pipe_throttle"), _STALL.format("wait"),
                _STALL.format("long_scoreboard_pipe_l1tex")]
_RAW_ROWS = [
    ["", "", "", "", "nsecond", "cycle/second", "byte", "sector", "request", "%", "", "", "", "", "", ""],
    ["2", "7", "nvjet_sm90_tss_128x256", "(132, 1, 1)", "1,800,000", "1,590,000,000", "450,000,000",
     "0", "0", "93.5", "0.5", "1", "1", "6", "1.5", "0.5"],
    ["0", "7", "strided_sum", "(32768, 1, 1)", "80,000", "1,590,000,000", "268,500,000",
     "8,388,608", "524,288", "n/a", "40", "3", "1", "0", "6", "40"],
    ["1", "7", "strided_sum", "(4096, 1, 1)", "82,000", "1,590,000,000", "268,600,000",
     "8,388,608", "262,144", "1.0", "30", "2", "1", "0", "7", "30"],
]
RAW_CSV = "\n".join(["==PROF== Connected to process 7", *(
    ",".join(f'"{v}"' for v in row) for row in [_RAW_COLUMNS, *_RAW_ROWS]), "==PROF== Disconnected"])


def test_ncu_raw_page_parses_into_kernels_in_launch_order_with_units_converted():
    from examples.measuring.ncu_sections import by_kernel, parse_raw, stall_cycles, stall_shares

    kernels = parse_raw(RAW_CSV)
    assert [k["name"] for k in kernels] == ["strided_sum", "strided_sum", "nvjet_sm90_tss_128x256"]
    first = kernels[0]
    assert first["gpu__time_duration.sum"] == pytest.approx(80.0)  # ns -> us
    assert first["dram__bytes_read.sum"] == pytest.approx(268.5)  # bytes -> MB
    assert first["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1590.0)  # Hz -> MHz
    assert "lts__t_sector_hit_rate.pct" not in first and "Grid Size" not in first  # n/a, a grid
    cycles = stall_cycles(first)  # the sub-reason is inside its reason: left out
    assert cycles == {"long_scoreboard": 40.0, "barrier": 3.0, "selected": 1.0, "math_pipe_throttle": 0.0,
                      "wait": 6.0}
    assert stall_shares(cycles)["long_scoreboard"] == pytest.approx(80.0)
    rows = by_kernel(kernels)
    assert rows["stride-8 read"]["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 262144
    assert rows["GEMM"]["name"].startswith("nvjet")
    with pytest.raises(RuntimeError, match="not two reads and a GEMM"):
        by_kernel(kernels[:2])
    with pytest.raises(RuntimeError, match="no table of raw metrics"):
        parse_raw("==PROF== nothing profiled")


def test_ncu_sections_keeps_a_row_per_kernel_and_a_stall_table_of_reasons_by_kernel():
    from examples.lab.harness import Lab
    from examples.lab.stats import summarize
    from examples.measuring.ncu_sections import by_kernel, keep, parse_raw

    lab = Lab(torch.device("cpu"), quick=True)
    book = {name: summarize([t], unit="us", method="kernel")
            for name, t in (("coalesced read", 64.0), ("stride-8 read", 66.0), ("GEMM", 1500.0))}
    keep(lab, by_kernel(parse_raw(RAW_CSV)), book)
    rows = {tuple(sorted(r.case.items())): r.metrics for r in lab.rows()}
    coalesced = rows[(("kernel", "coalesced read"),)]
    assert coalesced["sectors_per_request"].median == pytest.approx(16.0)
    assert rows[(("kernel", "stride-8 read"),)]["sectors_per_request"].median == pytest.approx(32.0)
    assert "sectors_per_request" not in rows[(("kernel", "GEMM"),)]  # no load requests: no ratio
    assert coalesced["ncu_over_book"].median == pytest.approx(80.0 / 64.0)
    assert coalesced["cycles_per_issue"].median == pytest.approx(50.0)
    stalls = {dict(case)["stall"]: m for case, m in rows.items() if "stall" in dict(case)}
    assert stalls["long scoreboard"]["share_coalesced"].median == pytest.approx(80.0)
    assert stalls["math pipe throttle"]["share_gemm"].median == pytest.approx(60.0)
    assert "other reasons" not in stalls  # every reported reason has its row here
    assert lab.notes["top stalls, GEMM"].startswith("math pipe throttle 60 %")


def test_ncu_sections_asks_for_its_sections_as_raw_metrics_at_base_clock():
    from examples.measuring.ncu_sections import METRICS, SECTIONS, STALLS_ASKED, ncu_command, refusal

    cmd = ncu_command("ncu", "out.csv", ["python3", "-c", "pass"])
    joined = " ".join(cmd)
    assert "--clock-control base" in joined and "--cache-control all" in joined
    assert "--page raw --csv" in joined and "--profile-from-start off" in joined
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == list(SECTIONS)
    # WarpStateStats for every stall reason (GMMA is asked for by no name); no chart or tables:
    # the record keeps none of their counters, and each costs replays of every kernel.
    assert "WarpStateStats" in SECTIONS and not any(s.endswith(("_Chart", "_Tables")) for s in SECTIONS)
    asked = cmd[cmd.index("--metrics") + 1].split(",")
    assert asked[:len(METRICS)] == list(METRICS) and len(asked) == len(METRICS) + len(STALLS_ASKED)
    assert "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio" in asked
    assert "ERR_NVGPUCTRPERM" in refusal("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert refusal("==PROF== Disconnected") is None


def test_ncu_clock_rates_reach_mhz_however_ncu_writes_the_unit():
    """ncu 2025.3 writes the SM clock's unit as "hz"; the first H200 runs refused it."""
    from examples.measuring.ncu_sections import unit_factor

    for unit, mhz_per_unit in {"hz": 1e-6, "Hz": 1e-6, "cycle/second": 1e-6, "cycle/nsecond": 1e3,
                               "MHz": 1.0, "GHz": 1e3, "khz": 1e-3}.items():
        assert unit_factor(unit) == pytest.approx(mhz_per_unit), unit
    assert unit_factor("warp") == 1.0  # unknown: left as it is, and the note says so
