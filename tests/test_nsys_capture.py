"""Chapter 8's Nsight Systems capture: the command, and the reader of nsys's SQLite export."""
from __future__ import annotations

import sqlite3

import pytest
import torch

from examples.measuring import nsys_capture as nc


def export(path, *, ranges, calls, kernels, drop=()):
    """A SQLite file with the tables and columns nsys export writes (the ones the reader uses)."""
    db = sqlite3.connect(path)
    names: dict[str, int] = {}

    def sid(text):
        return names.setdefault(text, len(names) + 1)

    tables = {
        "NVTX_EVENTS": "start INT, end INT, eventType INT, text TEXT, textId INT",
        "CUPTI_ACTIVITY_KIND_RUNTIME": "start INT, end INT, nameId INT, correlationId INT",
        "CUPTI_ACTIVITY_KIND_KERNEL": "start INT, end INT, shortName INT, correlationId INT",
    }
    db.execute("CREATE TABLE StringIds (id INT, value TEXT)")
    for name, columns in tables.items():
        if name not in drop:
            db.execute(f"CREATE TABLE {name} ({columns})")
    if "NVTX_EVENTS" not in drop:
        for start, end, text in ranges:  # one text inline, as push/pop ranges are; registered ones by id
            inline = text if not text.startswith("registered") else None
            db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?)",
                       (start, end, inline, None if inline else sid(text)))
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in drop:
        for start, end, name, corr in calls:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)", (start, end, sid(name), corr))
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in drop:
        for start, end, name, corr in kernels:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?)", (start, end, sid(name), corr))
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in names.items()])
    db.commit()
    db.close()
    return str(path)


STEP = dict(
    ranges=[(1_000, 11_000, "decode"), (20_000, 30_000, "registered step")],
    calls=[(1_500, 2_500, "cudaLaunchKernel_v7000", 1),      # two launches, 1 µs each
           (3_000, 4_000, "cudaLaunchKernel_v7000", 2),
           (4_000, 10_500, "cudaDeviceSynchronize_v3020", 3),  # 6.5 µs blocked
           (12_000, 12_500, "cudaLaunchKernel_v7000", 4),     # between the ranges
           (21_000, 22_000, "cudaGraphLaunch_v10000", 5)],
    kernels=[(5_000, 7_000, "gemv", 1), (6_000, 9_000, "add", 2),  # overlap: busy 4 µs
             (13_000, 14_000, "stray", 4),
             (22_500, 23_000, "k1", 5), (23_000, 31_000, "k2", 5)])  # graph kernels share the launch's id


def test_the_reader_gives_each_range_its_calls_and_the_kernels_they_launched(tmp_path):
    captured = nc.read_capture(export(tmp_path / "a.sqlite", **STEP))
    assert list(captured) == ["decode", "registered step"]
    decode = captured["decode"][0]
    assert [c[2] for c in decode["calls"]] == ["cudaLaunchKernel", "cudaLaunchKernel", "cudaDeviceSynchronize"]
    assert [k[2] for k in decode["kernels"]] == ["gemv", "add"]  # not the one launched between the ranges
    f = nc.step_figures(decode)
    assert f["step"] == pytest.approx(10.0) and f["kernels"] == 2 and f["launch_calls"] == 2
    assert f["gpu_busy"] == pytest.approx(4.0)  # the union of [5, 7] and [6, 9] µs
    assert f["busy_fraction"] == pytest.approx(40.0)
    assert f["in_launch"] == pytest.approx(2.0) and f["in_sync"] == pytest.approx(6.5)
    assert f["first_kernel"] == pytest.approx(4.0)
    graph = nc.step_figures(captured["registered step"][0])
    # both kernels of the graph belong to it, the one that ends after the range too
    assert graph["kernels"] == 2 and graph["launch_calls"] == 1 and graph["gpu_busy"] == pytest.approx(8.5)


def test_the_timeline_panel_is_relative_to_the_range_and_reaches_the_last_kernel(tmp_path):
    step = nc.read_capture(export(tmp_path / "a.sqlite", **STEP))["registered step"][0]
    panel = nc.timeline_panel("graph", step)
    assert panel["span"] == [0.0, 11.0]  # the range ends at 10 µs, its last kernel at 11
    lanes = {lane["name"]: lane["events"] for lane in panel["lanes"]}
    assert lanes["NVTX range"] == [[0.0, 10.0, "graph"]]
    assert lanes["CPU: CUDA API"] == [[1.0, 2.0, "cudaGraphLaunch"]]
    assert [e[2] for e in lanes["GPU: kernels"]] == ["k1", "k2"]


def test_an_export_without_kernels_is_refused_with_one_line(tmp_path):
    path = export(tmp_path / "b.sqlite", **STEP, drop=("CUPTI_ACTIVITY_KIND_KERNEL",))
    with pytest.raises(RuntimeError, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        nc.read_capture(path)


def test_busy_time_is_the_union_of_the_intervals():
    assert nc.busy_ns([]) == 0
    assert nc.busy_ns([(0, 10), (5, 20), (30, 40), (32, 35)]) == 30


def test_api_names_lose_cuptis_version_suffix():
    assert nc.api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert nc.api_name("cudaGetDeviceProperties_v2_v12000") == "cudaGetDeviceProperties"
    assert nc.api_name("cuLaunchKernel") == "cuLaunchKernel"


def test_nsys_records_only_the_marked_region_with_graph_nodes():
    cmd = nc.nsys_command("nsys", "out", ["python3", "-c", "pass"])
    joined = " ".join(cmd)
    assert "--capture-range=cudaProfilerApi" in joined and "--cuda-graph-trace=node" in joined
    assert "--trace=cuda,nvtx,osrt" in joined and cmd[-3:] == ["python3", "-c", "pass"]
    assert nc.export_command("nsys", "out.nsys-rep", "out.sqlite")[-1] == "out.nsys-rep"


def test_a_machine_without_nsys_gets_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nc.glob, "glob", lambda pattern: [])
    with pytest.raises(RuntimeError, match=r"nsys\) is not installed"):
        nc.find_nsys()


def test_the_child_touches_cuda_only_after_the_parents_go(monkeypatch):
    """A child context while the parent times is in the parent's untraced figures."""
    order = []

    class Stop(Exception):
        pass

    def touched(*args, **kwargs):
        order.append("cuda")
        raise Stop

    monkeypatch.setattr(nc, "wait_for_go", lambda: order.append("go"))
    for name in ("init", "_lazy_init", "synchronize", "current_blas_handle"):
        monkeypatch.setattr(torch.cuda, name, touched)
    monkeypatch.setattr(nc, "prepare_cuda", touched)
    monkeypatch.setattr(nc, "build_steps", touched)
    with pytest.raises(Stop):
        nc.captured_steps()
    assert order == ["go", "cuda"]
