"""Which GPU kernels one call ran, by the names the profiler gives them.

Many examples note the kernels behind a library call (which cuBLAS or cuDNN
kernel, split-K or not, which attention backend): the note is an observation
for the reader, not a check, so a profiler that fails is noted, not raised.
"""
from __future__ import annotations

from typing import Callable

import torch


def kernel_names(fn: Callable[[], object], width: int = 120) -> list[str] | str:
    """The distinct GPU kernels one call of ``fn`` launched, sorted, each name cut to ``width``."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.key[:width] for e in prof.key_averages()
                       if str(e.device_type).endswith("CUDA")})
    except Exception as exc:  # noqa: BLE001 - the profiler is an observation, not a check
        return f"profiler failed: {type(exc).__name__}: {exc}"[:200]
