"""Chapter 2: the dispatch keys, the op logger, the sync points and the budget model."""
from __future__ import annotations

import io
import json

import pytest
import torch

from examples.dispatch.budget import budget
from examples.dispatch.dispatch_keys import keys, thread_keys
from examples.dispatch.op_logger import autograd_graph, log_ops
from examples.dispatch.sync_points import count_transfers, make_step, run_loop, sync_points


def test_keys_of_a_cpu_tensor_and_an_inference_tensor():
    assert keys(torch.randn(2)).split(", ")[-1] == "CPU"
    assert "AutogradCPU" in keys(torch.randn(2))
    with torch.inference_mode():
        t = torch.randn(2)
    assert "AutogradCPU" not in keys(t) and "ADInplaceOrView" not in keys(t)


def test_autocast_removes_its_key_from_the_exclude_set():
    assert "AutocastCPU" in thread_keys().split("exclude")[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "AutocastCPU" not in thread_keys().split("exclude")[1]


def test_op_logger_sees_forward_and_backward_ops():
    x = torch.randn(3, 4)
    w = torch.randn(4, 5, requires_grad=True)
    forward = log_ops(lambda: torch.tanh(x @ w))
    # tanh saves its output for the backward pass: a detach records that
    assert forward[:2] == ["aten.mm.default", "aten.tanh.default"]
    assert set(forward) <= {"aten.mm.default", "aten.tanh.default", "aten.detach.default"}
    y = torch.tanh(x @ w).sum()
    assert autograd_graph(y)[:3] == ["SumBackward0", "TanhBackward0", "MmBackward0"]
    assert "aten.tanh_backward.default" in log_ops(y.backward)
    with torch.no_grad():
        assert autograd_graph(torch.tanh(x @ w)) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16: the GPU's
def test_every_sync_point_runs_in_the_loop(dtype):
    step, x = make_step(2, 8, 2, torch.device("cpu"), dtype)
    sink = io.StringIO()
    for name, sync in sync_points(sink).items():
        run_loop(step, x, sync, 2)
    assert "tensor(" in sink.getvalue()  # print(loss) printed


def test_print_of_a_tensor_runs_many_ops_and_item_two():
    step, x = make_step(2, 8, 2, torch.device("cpu"), torch.float32)
    y, loss = step(x)
    points = sync_points(io.StringIO())
    counts = {name: count_transfers(points[name], loss, y) for name in
              ("none", ".item()", "print(loss)", "print(loss.item())")}
    assert counts["none"] == {"aten_ops": 0}
    # item and _local_scalar_dense; the float's formatting is plain Python
    assert counts[".item()"]["aten_ops"] == counts["print(loss.item())"]["aten_ops"] == 2
    assert counts["print(loss)"]["aten_ops"] >= 20  # _Formatter's ops


@pytest.mark.needs_cuda
def test_print_of_a_cuda_scalar_copies_to_the_host_many_times():
    step, x = make_step(2, 8, 2, torch.device("cuda"), torch.float32)
    y, loss = step(x)
    points = sync_points(io.StringIO())
    item = count_transfers(points[".item()"], loss, y)
    printed = count_transfers(points["print(loss)"], loss, y)
    assert (item["kernels"], item["d2h_copies"], item["stream_syncs"]) == (0, 1, 1)
    assert printed["d2h_copies"] >= 4 and printed["kernels"] >= 10


def test_budget_cpu_bound_fusion_and_graph():
    b = budget(ops=1000, cpu_us=10, gpu_us=2, fusion=5, graph_us=1)
    assert (b.bound, b.cpu_ms, b.gpu_ms, b.step_ms) == ("CPU", 10, 2, 10)
    assert b.fused_step_ms == pytest.approx(2)
    assert b.graph_step_ms == pytest.approx(2.01)


def test_budget_gpu_bound_gains_nothing_from_fusion():
    b = budget(ops=100, cpu_us=5, gpu_us=50, fusion=4)
    assert b.bound == "GPU" and b.fused_step_ms == b.step_ms == pytest.approx(5)


@pytest.mark.parametrize("argv", [["--ops", "10", "--cpu-us", "0", "--gpu-us", "1"],
                                  ["--ops", "1.5", "--cpu-us", "1", "--gpu-us", "1"],
                                  ["--ops", "10", "--cpu-us", "1", "--gpu-us", "inf"],
                                  ["--ops", "10", "--cpu-us", "1", "--gpu-us", "1", "--fusion", "0.5"]])
def test_budget_cli_rejects(cli, argv):
    cli.one_line_error(cli.run("-m", "examples.dispatch.budget", *argv))


def test_budget_cli_json(cli):
    proc = cli.run("-m", "examples.dispatch.budget", "--ops", "600", "--cpu-us", "8", "--gpu-us", "3", "--json")
    assert proc.returncode == 0, cli.explain(proc)
    assert json.loads(proc.stdout)["bound"] == "CPU"


def test_a_dispatch_mode_sees_composites_whole_only_under_inference_mode():
    # Under no_grad the Autograd key is still visited, and linear (a
    # CompositeImplicitAutograd op) decomposes there, above the mode's Python
    # key; inference_mode removes Autograd, so the mode is reached first.
    a, w, b = torch.randn(8, 3), torch.randn(4, 3), torch.randn(4)
    linear = lambda: torch.nn.functional.linear(a, w, b)  # noqa: E731
    with torch.no_grad():
        assert log_ops(linear) == ["aten.t.default", "aten.addmm.default"]
    with torch.inference_mode():
        assert log_ops(linear) == ["aten.linear.default"]


def test_the_layer_counted_in_both_grad_modes():
    from examples.dispatch.kernel_count import DecoderLayer

    layer = DecoderLayer(64, 4, 16, "cpu", torch.float32)
    x = torch.randn(1, 1, 64)
    with torch.no_grad():
        below = log_ops(lambda: layer(x, 3))
    with torch.inference_mode():
        whole = log_ops(lambda: layer(x, 3))
    assert whole.count("aten.linear.default") == 4 and "aten.rms_norm.default" in whole
    assert "aten.scaled_dot_product_attention.default" in whole
    assert "aten.linear.default" not in below and below.count("aten.mm.default") == 4
    assert "aten.scaled_dot_product_attention.default" not in below
    assert len(below) > len(whole)


def test_key_priority_is_the_installed_torch_s_and_has_no_dtype():
    from examples.dispatch.dispatch_keys import LESSON_KEYS, priority_order

    order = priority_order(LESSON_KEYS).split(", ")
    # autocast casts first, then autograd records the node on the cast inputs
    assert order.index("AutocastCUDA") < order.index("AutogradCUDA") < order.index("ADInplaceOrView")
    assert order.index("ADInplaceOrView") < order.index("Functionalize") < order.index("Python")
    assert order[0] == "FuncTorchBatched" and order[-1] == "CUDA"
    # dtype is not a dispatch key: a half, a float and an int tensor carry the same keys
    assert keys(torch.randn(2)) == keys(torch.randn(2).half()) == keys(torch.arange(2))


def test_the_lesson_s_sync_rows_and_their_control():
    step, x = make_step(2, 8, 2, torch.device("cpu"), torch.float32)
    y, loss = step(x)
    points = sync_points(io.StringIO())
    counts = {name: count_transfers(points[name], loss, y)["aten_ops"] for name in points}
    assert counts["x.shape"] == 0  # metadata: no op at all
    # float() and int() of a one-element tensor are .item(): one copy to the host
    assert counts["float(loss)"] == counts[".item()"]
    assert count_transfers(lambda loss, y: int(loss), loss, y)["aten_ops"] == counts[".item()"]
    # a CPU tensor is already on the host: only the GPU makes these copy
    for name in (".tolist()", ".cpu().numpy()", ".unique()"):
        assert counts[name] >= 1, name


@pytest.mark.needs_cuda
def test_an_eager_step_queues_kernels_without_waiting():
    from examples.dispatch.kernel_count import DecoderLayer, count_kernels

    layer = DecoderLayer(256, 4, 32, "cuda", torch.bfloat16)
    x = torch.randn(1, 1, 256, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        layer(x, 3)
        kernels, waits = count_kernels(lambda: layer(x, 3))
    assert kernels >= 20 and waits == 0


def test_the_dispatch_table_rows_a_reader_needs():
    from examples.dispatch.dispatch_table import registrations, scaled_add, table_rows, walk

    add = table_rows("aten::add.Tensor")
    assert add["CPU"].startswith("kernel") and add["AutogradCPU"].startswith("autograd kernel")
    assert add["ADInplaceOrView"].startswith("fallthrough") and add["AutocastCPU"].startswith("fallthrough")
    assert add["BackendSelect"].startswith("fallthrough")
    # A factory has no tensor to take a backend from: a BackendSelect kernel picks it.
    assert table_rows("aten::empty.memory_format")["BackendSelect"].startswith("kernel")
    assert table_rows("aten::mm")["AutocastCPU"].startswith("kernel")  # on autocast's list
    assert registrations("aten::add.Tensor")["CPU"] == "boxed unboxed"
    custom = scaled_add()
    assert registrations("book_dispatch::scaled_add") == {
        "CPU": "boxed", "CUDA": "boxed", "Meta": "boxed", "Autograd[alias]": "boxed"}
    steps = walk("aten::add.Tensor", torch.randn(2))
    assert steps.startswith("AutogradCPU: autograd kernel")
    assert steps.split(" -> ")[-1].startswith("CPU: kernel")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert walk("aten::add.Tensor", torch.randn(2)).startswith("AutocastCPU: skipped, fallthrough")
    x, y = torch.randn(5, requires_grad=True), torch.randn(5)
    out = custom(x, y, 3.0)
    torch.testing.assert_close(out, x + 3.0 * y)
    assert log_ops(lambda: custom(x, y, 3.0)) == ["book_dispatch.scaled_add.default"]
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, torch.ones(5))
