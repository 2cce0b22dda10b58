"""Chapter 7: the FP8 training recipe (torchao's float8), run on the CPU in quick mode."""
from __future__ import annotations

import math
import os
import sys

import pytest
import torch

from examples.ecosystem.fp8_training import RECIPES, TOLERANCE, SwiGLU, training_flops

TOPIC = "examples.ecosystem.fp8_training"


@pytest.fixture(scope="module")
def quick_run(cli, tmp_path_factory):
    return cli.quick_record(TOPIC.removeprefix("examples."), tmp_path_factory.mktemp("fp8_training"), timeout=240)


def test_quick_cpu_record_has_every_recipe_checked_and_timed(quick_run):
    proc, record = quick_run
    rows = {row.case["recipe"]: row for row in record.results}
    assert set(rows) == {"bf16", *RECIPES}
    for recipe, row in rows.items():
        assert set(row.case) == {"recipe", "tokens", "d", "h"}
        metrics = row.metrics
        for name in ("time", "rate"):
            assert math.isfinite(metrics[name].median) and metrics[name].median > 0, (recipe, name)
        assert metrics["time"].unit == "ms" and metrics["rate"].unit == "TFLOP/s"
        if recipe == "bf16":
            assert "speedup" not in metrics
            assert metrics["error_out"].median < 1e-4  # float32 on the CPU
        else:
            assert math.isfinite(metrics["speedup"].median) and metrics["speedup"].median > 0
            # FP8 really rounded (a few per cent), and within what the check allows.
            assert 5e-3 < metrics["error_out"].median <= TOLERANCE["fp8"]["out"], recipe
            assert 5e-3 < metrics["error_grad_w"].median <= TOLERANCE["fp8"]["grad"], recipe
    assert len(record.checks) == 3 * len(rows) and all(c.passed for c in record.checks)
    assert record.notes.get("torchao")
    assert "Failed to load" not in proc.stdout + proc.stderr  # torchao's .so warnings kept out


def test_flops_are_nine_products_of_a_training_step():
    t, d, h = 8, 16, 24
    assert training_flops(t, d, h) == 18 * t * d * h
    # The count the profiler's FLOP counter makes of one forward and backward.
    from torch.utils.flop_counter import FlopCounterMode

    block = SwiGLU(d, h)
    x = torch.randn(t, d, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        block(x).float().pow(2).mean().backward()
    assert counter.get_total_flops() == training_flops(t, d, h)


def test_missing_torchao_is_one_line_error(cli, tmp_path):
    # A torchao that cannot be imported, first on the path: as if it were not installed.
    (tmp_path / "torchao.py").write_text('raise ImportError("No module named \'torchao\'")\n')
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = cli.cpu_env(PYTHONPATH=path)
    proc = cli.run("-m", TOPIC, "--quick", "--device", "cpu", env=env)
    line = cli.one_line_error(proc, status=1)
    assert "needs torchao" in line and '".[fp8]"' in line, cli.explain(proc)
    # The flags are still parsed first: a bad flag is a usage error, torchao or not.
    proc = cli.run("-m", TOPIC, "--no-such-flag", env=env)
    assert "--no-such-flag" in cli.one_line_error(proc, status=2)
    # The runner skips the topic, says why in one line, and writes nothing for it.
    proc = cli.run("-m", "examples.lab", "run", "--quick", "--device", "cpu", "ecosystem.fp8_training",
                   "--out", str(tmp_path / "out"), env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, cli.explain(proc)
    assert "skipped ecosystem.fp8_training: needs torchao" in proc.stdout, cli.explain(proc)
    assert not list((tmp_path / "out").glob("**/*.json"))


def test_missing_torchao_raises_in_process(monkeypatch):
    from examples.ecosystem import fp8_training

    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao -> ImportError
    monkeypatch.delitem(sys.modules, "torchao.float8", raising=False)
    with pytest.raises(fp8_training.MissingTorchao, match=r"needs torchao .*\.\[fp8\]"):
        fp8_training.torchao_float8()
