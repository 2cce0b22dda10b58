"""Chapter 4: the byte counter and roofline prediction of the fusion example,
the graph-break and recompilation helpers, and the Triton kernels through the
interpreter (in a subprocess, where TRITON_INTERPRET=1 is set before import)."""
from __future__ import annotations


import pytest
import torch

from examples.compile.fusion import (
    Traffic, min_bytes, pointwise_chain, predicted_speedup, roofline_time, softmax_by_hand,
)


def test_traffic_counts_each_eager_kernel():
    x = torch.randn(1000)
    with Traffic() as t:
        pointwise_chain(x)
    assert [op for op, _, _ in t.kernels] == ["aten.mul", "aten.add", "aten.relu"]
    assert sum(b for _, b, _ in t.kernels) == 3 * 2 * 4 * 1000
    assert min_bytes(pointwise_chain, x) == 2 * 4 * 1000


def test_traffic_counts_matmul_flops():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with Traffic() as t:
        a @ b
    flops = [f for op, _, f in t.kernels if op == "aten.mm"]
    assert flops == [2 * 8 * 16 * 4]


def test_a_batched_matmuls_reshape_of_its_result_is_no_kernel():
    """Eager attention: two bmm around a scale and a softmax. ``matmul`` hands a batched
    product back through ``_unsafe_view``, which moves no data (not flagged as a view)."""
    from examples.compile.fusion import attention

    q = k = v = torch.randn(2, 4, 16, 8)
    with Traffic() as t:
        attention(q, k, v)
    assert [op for op, _, _ in t.kernels] == ["aten.bmm", "aten.div", "aten._softmax", "aten.bmm"]


def test_prediction_memory_bound_chain_is_three():
    x = torch.randn(4096)
    with Traffic() as t:
        pointwise_chain(x)
    s = predicted_speedup(t.kernels, min_bytes(pointwise_chain, x), bandwidth=1e12, rate=1e15)
    assert s == pytest.approx(3.0)


def test_roofline_time_takes_the_slower_side():
    assert roofline_time(1e9, 0, 1e12, 1e15) == pytest.approx(1e-3)
    assert roofline_time(0, 1e15, 1e12, 1e15) == pytest.approx(1.0)


def test_softmax_by_hand_is_softmax():
    x = torch.randn(7, 33, dtype=torch.float64)
    torch.testing.assert_close(softmax_by_hand(x), torch.softmax(x, dim=-1))


def test_graph_breaks_found_and_fixed():
    from examples.compile.pipeline import explain, with_breaks, without_breaks

    x = torch.randn(8)
    broken, fixed = explain(with_breaks, x), explain(without_breaks, x)
    assert broken["graph breaks"] >= 1 and broken["graphs"] >= 2
    assert fixed == {"graphs": 1, "graph breaks": 0, "reasons": "none"}


def test_recompilations():
    from examples.compile.pipeline import compilations

    assert compilations(False) == 4
    assert compilations(True) == 1
    assert compilations(None, mark=True) == 1
    assert compilations(None) < 4


TRITON_SCRIPT = """
import torch
import examples.compile.triton_kernels as tk
assert tk.INTERPRETED
g = torch.Generator().manual_seed(1)
x, y = torch.randn(3001, generator=g), torch.randn(3001, generator=g)
assert torch.equal(tk.add(x, y), x + y)
s = torch.randn(5, 300, generator=g, dtype=torch.float16)
torch.testing.assert_close(tk.softmax(s).float(), torch.softmax(s.float(), -1), atol=1e-3, rtol=1e-3)
for m, k, n in [(64, 64, 64), (40, 72, 24)]:
    a = torch.randn(m, k, generator=g, dtype=torch.float16)
    b = torch.randn(k, n, generator=g, dtype=torch.float16)
    torch.testing.assert_close(tk.matmul(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
print("ok")
"""


def test_triton_kernels_in_the_interpreter(cli):
    proc = cli.run("-c", TRITON_SCRIPT, env=cli.cpu_env(TRITON_INTERPRET="1"))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", cli.explain(proc)


def test_triton_kernels_record_compares_kernels_in_rounds(cli, tmp_path):
    """The quick CPU record of compile.triton_kernels holds what the page
    quotes: each matmul size timed for both providers in interleaved rounds
    (``kernel_time``, the kernel timer's figure), Triton's paired fraction
    of the library's rate, and the one-call figure kept apart from it."""
    _, record = cli.quick_record("compile.triton_kernels", tmp_path, timeout=600)  # not in test_runs_on_cpu
    rows = record.rows(kernel="matmul")
    assert {r.case["provider"] for r in rows} == {"triton", "torch"}
    for row in rows:
        m = row.metrics
        assert m["kernel_time"].method.endswith("interleaved rounds")
        assert m["time_one_call"].method.endswith("interleaved rounds")
        assert m["one_call_vs_kernel"].median == pytest.approx(
            m["time_one_call"].median / m["kernel_time"].median)
        if row.case["provider"] == "triton":
            assert m["fraction_of_library"].method.startswith("paired ratio torch / triton")
        else:
            assert "fraction_of_library" not in m


def test_fusion_blockers_reads_each_kind_of_launch_in_order():
    from examples.compile.fusion_blockers import read_launches

    first = "def triton_poi_fused_add_0(in_ptr0): pass\ndef call(args):\n    triton_poi_fused_add_0.run(buf0)\n" \
            "    buf1 = torch.ops.book.opaque_tanh.default(buf0)\n    extern_kernels.mm(buf1, w, out=buf2)\n"
    second = "def call(args):\n    cpp_fused_gelu_0(buf0, buf1)\n"
    found = read_launches([first, second])
    assert found["in order"] == ["triton_poi_fused_add_0", "torch.ops.book.opaque_tanh.default",
                                 "extern_kernels.mm", "cpp_fused_gelu_0"]
    assert found["generated"] == ["triton_poi_fused_add_0", "cpp_fused_gelu_0"]
    assert found["fallback"] == ["torch.ops.book.opaque_tanh.default"]
    assert found["library"] == ["extern_kernels.mm"]


def test_fusion_blockers_ways_give_dynamo_the_graphs_they_claim():
    """The control and the custom-operator way are one graph each (a stray break there once
    made every call recompile and the timed code fall back to eager); the break is a break."""
    import torch

    from examples.compile import fusion_blockers as fb

    fb.register_opaque_tanh()
    x = torch.randn(8, 8)
    for fn in (fb.one_graph, fb.an_opaque_op):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(fn, backend="eager", fullgraph=True)(x), fn(x))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="graph_break|Graph break|graph break"):
        torch.compile(fb.a_graph_break, backend="eager", fullgraph=True)(x)
    torch._dynamo.reset()


def test_blocks_kept_names_each_tuned_triton_kernel_and_its_launch():
    """compile.fusion_blockers notes the block size each generated kernel kept from its first
    call's benchmark; read here from a module shaped as Inductor's (kernels as module globals)."""
    import types

    from examples.compile.fusion_blockers import blocks_kept

    def kernel(*launches):
        configs = [types.SimpleNamespace(kwargs={"XBLOCK": block}, num_warps=warps) for block, warps in launches]
        return types.SimpleNamespace(launchers=[types.SimpleNamespace(config=c) for c in configs])

    module = types.ModuleType("output_code")
    module.__file__ = "/tmp/inductor/ab/cabc.py"
    module.triton_poi_fused_gelu_1 = kernel((512, 8))
    module.triton_poi_fused_tanh_0 = kernel((1024, 4), (512, 8))  # two launchers: not benchmarked yet
    module.helper = kernel((1024, 4))  # not a generated kernel's name
    expected = ["triton_poi_fused_gelu_1: XBLOCK=512, 8 warps", "triton_poi_fused_tanh_0: 2 configurations, none kept yet"]
    assert blocks_kept([module]) == expected
    again = types.ModuleType("output_code")  # the same graph's code loaded a second time
    again.__dict__.update(vars(module), __file__="/tmp/inductor/fx/cabc.py")
    assert blocks_kept([module, again]) == expected
    assert blocks_kept([types.ModuleType("empty")]) == []
