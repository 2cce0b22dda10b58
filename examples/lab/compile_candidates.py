"""Compile every configuration a Triton autotuner will try, on all cores at once, before it times them.

A ``@triton.autotune`` kernel compiles its candidate configurations one by one, on the
calling thread, as it benchmarks them: for the capstone's matrix-vector kernels that is
most of a topic's set-up (a kernel takes about a second to compile, most of it in
``ptxas`` and LLVM, which a thread pool runs side by side). Triton's asynchronous compile
mode (``triton.runtime._async_compile``) hands each compile to an executor instead; the
autotuner then finds each configuration compiled and only times it. The same kernels and
the same choice either way: only when they are compiled changes. With a Triton that has
no such mode, nothing is done here and the autotuner compiles as before.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

#: (autotuner, its key) pairs already compiled: each is compiled once per process.
_COMPILED: set[tuple[int, tuple]] = set()


def autotune_key(autotuner, args: tuple, kwargs: dict) -> tuple:
    """The key under which ``autotuner`` keeps its choice for this call: the values of its
    ``key`` arguments, then the dtype of each tensor argument (as ``Autotuner.run`` makes it)."""
    named = {**dict(zip(autotuner.arg_names, args)), **kwargs}
    key = [named[name] for name in autotuner.keys if name in named]
    key += [str(value.dtype) for name, value in named.items()
            if name in autotuner.arg_names and hasattr(value, "dtype")]
    return tuple(key)


def compile_candidates(autotuner, grid, *args, **kwargs) -> bool:
    """Before ``autotuner[grid](*args, **kwargs)`` first runs for its key, compile every
    configuration it will try (after its pruning) on a pool of threads, one per core.
    Returns whether it compiled anything here."""
    key = autotune_key(autotuner, args, kwargs)
    if key in autotuner.cache or (id(autotuner), key) in _COMPILED:
        return False
    _COMPILED.add((id(autotuner), key))
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # an older Triton: the autotuner compiles them in turn, as before
        return False
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=cores) as pool, AsyncCompileMode(pool):
        autotuner.warmup(*args, grid=grid, **kwargs)
    return True
