"""Chapter 8: the timing helpers of the traps and the profile reader, on the CPU."""
from __future__ import annotations

import torch

from examples.measuring.cpu_bound_trap import host_clock_no_sync, pointwise
from examples.measuring.profile_mix import profile_step
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
