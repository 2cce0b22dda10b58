"""ecosystem.triton_op on the CPU: the twin's record, and both registrations in
Triton's interpreter (compiling them needs a GPU: fake tensors have no data
for the interpreter to read)."""
from __future__ import annotations

import pytest
import torch


def test_cpu_record_has_the_twin_only(cli, tmp_path):
    """The example's command line (test_runs_on_cpu leaves it to this test)."""
    _, record = cli.quick_record("ecosystem.triton_op", tmp_path, timeout=300)
    assert record.checks and all(c.passed for c in record.checks)
    assert [c.name for c in record.checks] == [
        "twin = a * sigmoid(a) * b", "compiled torch, 4Ki", "compiled torch, 1Mi"]
    rows = {(r.case["registration"], r.case["size"]): r.metrics for r in record.results}
    assert set(rows) == {("torch", "4Ki"), ("torch", "1Mi")}
    assert set(rows["torch", "4Ki"]) == {"graph_breaks", "time"}
    assert set(rows["torch", "1Mi"]) == {"time"}
    assert rows["torch", "4Ki"]["graph_breaks"].median == 0
    assert all(m["time"].median > 0 and m["time"].unit == "us" for m in rows.values())


def test_twin_is_silu_times_b_and_rounds_once():
    from examples.ecosystem.triton_op import silu_mul_reference, with_elementwise_work

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(257, dtype=torch.float64, generator=g) for _ in range(2))
    got32 = silu_mul_reference(a.float(), b.float())
    torch.testing.assert_close(got32.double(), a / (1 + torch.exp(-a)) * b, rtol=1e-6, atol=1e-6)
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    got = silu_mul_reference(a16, b16)
    assert got.dtype == torch.bfloat16
    exact = a16.double() * torch.sigmoid(a16.double()) * b16.double()
    # float32 inside, one rounding at the end: within half a bfloat16 step (2^-8 of the value)
    assert ((got.double() - exact).abs() <= exact.abs() * 2**-8 * 1.01).all()
    torch.testing.assert_close(with_elementwise_work(torch.mul)(a, b), a * b * 2 + 1)


def test_helpers_read_inductor_code_and_label_sizes():
    from examples.ecosystem.triton_op import launch_lines, registrations, size_label

    code = (
        "# Source Nodes: [torch.ops.book.silu_mul_opaque]\n"
        "silu_mul_kernel_0 = async_compile.triton('silu_mul_kernel', '''\n"
        "        silu_mul_kernel_0.run(arg0_1, arg1_1, buf0, 4096, stream=stream0)\n"
        "        buf1 = torch.ops.book.silu_mul_opaque.default(arg0_1, arg1_1)\n"
        "        assert_size_stride(buf1, (4096, ), (1, ), "
        "'torch.ops.book.silu_mul_opaque.default')\n"
        "        triton_poi_fused_add_mul_0.run(buf1, 4096, stream=stream0)\n"
        "        return (buf1, )\n")
    assert launch_lines(code) == [
        "silu_mul_kernel_0.run(arg0_1, arg1_1, buf0, 4096, stream=stream0)",
        "buf1 = torch.ops.book.silu_mul_opaque.default(arg0_1, arg1_1)",
        "triton_poi_fused_add_mul_0.run(buf1, 4096, stream=stream0)"]
    sizes = (4096, 1 << 20, 1 << 26, 3 << 19, 4099)
    assert [size_label(n) for n in sizes] == ["4Ki", "1Mi", "64Mi", "1536Ki", "4099 elements"]
    assert list(registrations(cuda=False)) == ["torch"]
    assert list(registrations(cuda=True)) == ["triton_op", "custom_op", "torch"]


INTERPRETER_SCRIPT = r"""
import torch
from examples.ecosystem import triton_op as t

for name in ("silu_mul_traced", "silu_mul_opaque"):  # registered, under the book namespace
    assert getattr(torch.ops.book, name).default.name() == f"book::{name}"
ops = {"triton_op": torch.ops.book.silu_mul_traced, "custom_op": torch.ops.book.silu_mul_opaque}
torch.manual_seed(0)
for shape in [(4099,), (3, 1000), (1,)]:  # a masked tail; several programs; one element
    a, b = torch.randn(shape), torch.randn(shape)
    want = t.silu_mul_reference(a, b)
    for name, op in ops.items():
        got = op(a, b)
        assert got.shape == a.shape and got.dtype == a.dtype, name
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=name)
    # a transposed (non-contiguous) input is made contiguous, not read wrongly
    a2 = torch.randn(shape[::-1]).T if len(shape) == 2 else a
    for name, op in ops.items():
        torch.testing.assert_close(op(a2, b), t.silu_mul_reference(a2, b), msg=name)
torch.library.opcheck(torch.ops.book.silu_mul_opaque, (torch.randn(100), torch.randn(100)))
from examples.lab.harness import Lab  # the GPU run's checks, here on CPU tensors
lab = Lab(torch.device("cpu"), quick=True)
t.check_ops(lab)
assert [c.name for c in lab._checks][:2] == [
    "triton_op = twin, float32", "custom_op = twin, float32"]
assert all(c.passed for c in lab._checks) and len(lab._checks) == 4
# The opaque op compiles on the CPU too: one call by name, the kernel out of Inductor's sight.
from torch._inductor.utils import run_and_get_code
f = t.with_elementwise_work(torch.ops.book.silu_mul_opaque)
a, b = torch.randn(4096), torch.randn(4096)
assert t.graph_breaks(f, a, b) == 0
out, codes = run_and_get_code(torch.compile(f, fullgraph=True, dynamic=False), a, b)
torch.testing.assert_close(out, t.with_elementwise_work(t.silu_mul_reference)(a, b))
launches = t.launch_lines("\n".join(codes))
assert len(launches) == 1 and "torch.ops.book.silu_mul_opaque.default(" in launches[0], launches
assert not any(t.silu_mul_kernel.__name__ in code for code in codes)
print("ok")
"""


def test_both_registrations_in_the_interpreter_match_the_twin(cli):
    pytest.importorskip("triton")
    proc = cli.run("-c", INTERPRETER_SCRIPT, env=cli.cpu_env(TRITON_INTERPRET="1"), timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", cli.explain(proc)
