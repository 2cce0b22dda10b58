"""Chapter 9's read roof: the CPU record holds what the page quotes, and the Triton read
kernels sum right in the interpreter (a subprocess, where TRITON_INTERPRET=1 is set
before import)."""
from __future__ import annotations

import pytest

def test_cpu_record_has_copy_the_reads_and_the_roof(cli, tmp_path):
    """On the CPU: copy and torch.sum (no Triton), in interleaved rounds; bandwidth counts
    read + write bytes for copy and read bytes for a read; the roof row is the best read."""
    _, record = cli.quick_record("capstone.read_roof", tmp_path)
    assert [c.name for c in record.checks] == ["torch.sum: sum of the bf16 values"]
    assert all(c.passed for c in record.checks)
    rows = {r.case.get("variant", r.case.get("part")): r.metrics for r in record.results}
    assert set(rows) == {"copy", "torch.sum", "roof"}
    nbytes = 2 * 2**19  # SMALL_ELEMENTS of bf16
    for name, moved in (("copy", 2 * nbytes), ("torch.sum", nbytes)):
        m = rows[name]
        assert m["time"].method.endswith("interleaved rounds")
        assert m["bandwidth"].median == pytest.approx(moved / (m["time"].median * 1e-6) / 1e9)
    assert "fraction_of_copy" not in rows["copy"]
    assert rows["torch.sum"]["fraction_of_copy"].method.startswith("paired ratio copy / torch.sum")
    assert rows["roof"]["read_roof"].median == rows["torch.sum"]["bandwidth"].median
    assert rows["roof"]["best_read_over_copy"].median == rows["torch.sum"]["fraction_of_copy"].median
    assert record.notes["best read"] == "torch.sum"


TRITON_SCRIPT = """
import torch
from examples.capstone.read_roof import grid_stride_sum, unrolled_sum
g = torch.Generator().manual_seed(0)
# Not a multiple of any block, and more than one pass of every program: the masks and loops run.
x = torch.rand(5 * 4096 * 2 + 123, generator=g, dtype=torch.bfloat16)
exact = x.double().sum().item()
for read in (grid_stride_sum, unrolled_sum):
    partial = read(x, 3)
    assert partial.shape == (3,) and partial.dtype == torch.float32, (read.__name__, partial)
    got = partial.double().sum().item()
    assert abs(got - exact) <= 1e-5 * exact, (read.__name__, got, exact)
print("ok")
"""


def test_triton_reads_in_the_interpreter(cli):
    pytest.importorskip("triton")
    proc = cli.run("-c", TRITON_SCRIPT, env=cli.cpu_env(TRITON_INTERPRET="1"))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", cli.explain(proc)
