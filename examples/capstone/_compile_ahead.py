"""Compile an autotuned Triton kernel's candidates all at once, in threads, before its
autotuner times them.

Triton's autotuner compiles each candidate the first time it launches it, inside its
timing loop: one compile after another, in this process (about 0.4 s each on an H200's
host, over a hundred a decode run). Most of a compile runs outside the interpreter (LLVM,
ptxas), so compiles in threads overlap. The kernels are exactly those the autotuner would
have built (the same arguments, the same options), only built sooner; what it times and
chooses does not change, and neither does anything timed after it.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager


@contextmanager
def compiled_ahead(*modules):
    """Within the block, each autotuned kernel of ``modules``, whenever its autotuner is about
    to time its candidates for a key it has not seen, compiles them all first."""
    autotuners = _autotuners_in(modules)
    for tuner in autotuners:
        tuner.prune_configs = _compiling(tuner, tuner.prune_configs)
    try:
        yield
    finally:
        for tuner in autotuners:
            del tuner.prune_configs  # the instance attribute: the class's method shows again


def _autotuners_in(modules) -> list:
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # no Triton: nothing is autotuned
        return []
    return [value for module in modules for value in vars(module).values() if isinstance(value, Autotuner)]


def _compiling(tuner, prune):
    def prune_then_compile(kwargs, *rest):
        configs = prune(kwargs, *rest)
        if len(configs) > 1:  # one candidate is launched untimed, compiled as it launches
            args = list(tuner.nargs.values())  # the launch's positional arguments, in order
            # The launch's keywords, less the two that ``kernel[grid](...)`` adds for the launch itself.
            options = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}

            def build(config):
                tuner.fn.warmup(*args, grid=(1,), **options, **config.all_kwargs())

            with ThreadPoolExecutor(len(configs)) as pool:
                list(pool.map(build, configs))  # re-raises a failed compile here, as the launch would
        return configs

    return prune_then_compile
