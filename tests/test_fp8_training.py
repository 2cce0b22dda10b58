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


def test_steps_compiled_ahead_in_children_are_loaded_not_compiled_again(tmp_path):
    """Each child compiles one recipe's step into the run's caches; the topic's own compile of
    the same steps then finds every forward and backward graph there. A child that fails is
    reported in one line and costs nothing else."""
    pytest.importorskip("torchao")
    script = """
import json
import torch
torch.set_float32_matmul_precision("high")  # and back, as blas.precision leaves it: another cache key
torch.set_float32_matmul_precision("highest")
from examples.lab.compile_ahead import Job, cache_hits, compile_ahead
from examples.ecosystem import fp8_training as f
jobs = [Job("examples.ecosystem.fp8_training:compile_one", (r, 64, 128, 256, "cpu")) for r in ("bf16", "tensorwise")]
jobs.append(Job("examples.ecosystem.fp8_training:no_such_function", ()))
outcome = compile_ahead(jobs, cores=2)
f.compile_one("bf16", 64, 128, 256, "cpu")
f.compile_one("tensorwise", 64, 128, 256, "cpu")
print(json.dumps({"summary": outcome.summary(), **cache_hits()}))
"""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(__file__)), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["summary"].startswith("2 of 3 graphs in "), result
    assert "no_such_function(): AttributeError" in result["summary"], "the failure, in one line"
    assert (result["hits"], result["misses"]) == (4, 0), "two steps, a forward and a backward each, all found"


def test_the_compile_ahead_children_plan_within_the_gpu_memory_given(monkeypatch):
    """No more children at once than the memory allows, yet always one: a step too large for the
    budget still runs (alone), as the topic itself would run it."""
    import time

    from examples.lab import compile_ahead as ca

    spans, threads_given = {}, []

    class FakeProcess:
        def __init__(self, job):
            self.job, self.ends = job, time.monotonic() + 0.15

        def poll(self):
            now = time.monotonic()
            if now < self.ends:
                return None
            spans[self.job.args[0]] = (spans[self.job.args[0]][0], now)
            return 0

    def fake_start(job, threads, settings):
        spans[job.args[0]] = (time.monotonic(), None)
        threads_given.append(threads)
        return FakeProcess(job), open(os.devnull, "w+")

    monkeypatch.setattr(ca, "_start", fake_start)
    jobs = [ca.Job("m:f", (i,), gpu_bytes=4) for i in range(4)] + [ca.Job("m:f", ("big",), gpu_bytes=100)]
    outcome = ca.compile_ahead(jobs, free_gpu_bytes=12, cores=10)  # 70 % of 12: two small ones at once
    assert outcome.compiled == 5 and not outcome.failed
    assert list(spans) == [0, 1, 2, 3, "big"], "in order"

    def together(a, b):
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    assert together(0, 1) and together(2, 3), "two fit the budget at once"
    assert not together(0, 2) and not together(1, 2), "a third waits for room"
    assert not any(together("big", i) for i in range(4)), "too large for the budget: alone"
    assert threads_given[0] == 10 // 5, "each child's share of the cores"
