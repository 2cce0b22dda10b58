"""A region in which Dynamo compiles nothing: figures measured there are of the code compiled before it."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def compiled_once(where: str):
    """Inside, nothing is compiled: a recompile is an error (not a silent fall back to eager
    after ``recompile_limit`` tries), and so is a first compile, as of code a reset dropped."""
    def frames():
        return torch._dynamo.utils.counters["frames"]["total"]

    before = frames()
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield
    if frames() != before:
        raise RuntimeError(f"Dynamo compiled {frames() - before} frame(s) while {where}")
