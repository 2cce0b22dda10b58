"""Compile a topic's independent graphs in child processes, side by side, before the topic
compiles them in turn.

``torch.compile`` builds one graph at a time, and most of a graph's compile is one core's
work (tracing, lowering, code generation) with Triton's kernel compiles on a few more: a
topic that compiles several independent graphs (``ecosystem.fp8_training``: seven forward
and backward pairs, most of its minute) leaves most of a many-core host idle.
:func:`compile_ahead` gives each graph to a child process that builds it, compiles it and
runs it once (a backward compiles at its first call) into this run's compile caches
(``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``, which a child inherits), several at
once. The topic's own compile then finds each graph in Inductor's FX graph cache: the same
compiled code, loaded rather than built. :func:`cache_hits` counts what the topic found
there, for its record.

What the children copy from the topic's process: the global switches that Inductor's cache
key includes (:data:`KEYED_SETTINGS`: the float32 matmul precision, the reduced-precision
reductions, deterministic algorithms). A child starts with torch's defaults, and the topic's
process may no longer have them: after ``blas.precision`` sets and puts back
``set_float32_matmul_precision("highest")``, ``torch.backends.cuda.matmul.fp32_precision``
reads ``"ieee"``, not the ``"none"`` it started with (the same precision, another key), and
without the copy no graph a child compiled would be found.

What the children do not keep: the autotuner's choices (``autotune_local_cache`` off). They
run side by side on one GPU, and a block size timed under that contention could differ from
one timed alone; the topic tunes its kernels alone, as it would without this. A child that
fails (no memory, a crash) costs only its share of the speed-up: the topic compiles that
graph itself, and the record says which child failed and why.

A child runs ``python -m examples.lab.compile_ahead TARGET ARGS``: ``TARGET`` is
``package.module:function`` and ``ARGS`` a JSON list of its arguments.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: A child that has not finished by then is stopped; its graph compiles in the topic.
TIMEOUT_S = 300
#: Of the GPU memory free when the children start, the share they may plan to hold at once.
MEMORY_SHARE = 0.7


@dataclass(frozen=True)
class Job:
    """One graph to compile: ``target(*args)`` in a child; ``gpu_bytes`` about what it holds."""

    target: str
    args: tuple
    gpu_bytes: int = 0


@dataclass
class Outcome:
    seconds: float = 0.0
    compiled: int = 0
    failed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.compiled} of {self.compiled + len(self.failed)} graphs in {self.seconds:.1f} s"
        return text + ("; " + "; ".join(self.failed) if self.failed else "")


#: (name, getter, setter) of each switch that enters Inductor's FX graph cache key
#: (``torch/_inductor/codecache.py``, ``FxGraphHashDetails``); a torch without one skips it.
KEYED_SETTINGS = (
    ("torch.backends.cuda.matmul.fp32_precision",
     lambda t: t.backends.cuda.matmul.fp32_precision,
     lambda t, v: setattr(t.backends.cuda.matmul, "fp32_precision", v)),
    ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
     lambda t: t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
     lambda t, v: setattr(t.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", v)),
    ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
     lambda t: t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
     lambda t, v: setattr(t.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", v)),
    ("torch.are_deterministic_algorithms_enabled()",
     lambda t: [t.are_deterministic_algorithms_enabled(), t.is_deterministic_algorithms_warn_only_enabled()],
     lambda t, v: t.use_deterministic_algorithms(v[0], warn_only=v[1])),
    ("torch.utils.deterministic.fill_uninitialized_memory",
     lambda t: t.utils.deterministic.fill_uninitialized_memory,
     lambda t, v: setattr(t.utils.deterministic, "fill_uninitialized_memory", v)),
)
SETTINGS_VARIABLE = "LAB_COMPILE_AHEAD_SETTINGS"


def keyed_settings() -> dict:
    """This process's value of each of :data:`KEYED_SETTINGS` that this torch has."""
    import torch

    values = {}
    for name, read, _ in KEYED_SETTINGS:
        try:
            values[name] = read(torch)
        except AttributeError:
            continue
    return values


def apply_settings(values: dict) -> None:
    import torch

    for name, _, write in KEYED_SETTINGS:
        if name in values:
            write(torch, values[name])


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def compile_ahead(jobs: list[Job], *, free_gpu_bytes: int | None = None,
                  cores: int | None = None) -> Outcome:
    """Run ``jobs`` in child processes, as many at once as the cores and the GPU memory allow
    (at least one), and wait for all of them. Never raises for a child's failure: the
    :class:`Outcome` lists it."""
    cores = cores or usable_cores()
    settings = json.dumps(keyed_settings())
    budget = None if free_gpu_bytes is None else int(free_gpu_bytes * MEMORY_SHARE)
    waiting, running, outcome = list(jobs), [], Outcome()
    began = time.monotonic()
    while waiting or running:
        held = sum(job.gpu_bytes for job, _, _ in running)
        while waiting and (not running or budget is None or held + waiting[0].gpu_bytes <= budget):
            job = waiting.pop(0)
            # Each child's share of the cores for Triton's compile workers (its own pool).
            threads = max(1, cores // max(1, min(len(jobs), len(running) + len(waiting) + 1)))
            running.append((job, *_start(job, threads, settings)))
            held += job.gpu_bytes
        time.sleep(0.05)
        for entry in list(running):
            job, process, log = entry
            code = process.poll()
            if code is None and time.monotonic() - began < TIMEOUT_S:
                continue
            if code is None:
                process.kill()
                process.wait()
                outcome.failed.append(f"{_name(job)}: stopped after {TIMEOUT_S} s")
            elif code == 0:
                outcome.compiled += 1
            else:
                outcome.failed.append(f"{_name(job)}: {_last_line(log)}")
            log.close()
            running.remove(entry)
    outcome.seconds = time.monotonic() - began
    return outcome


def _start(job: Job, threads: int, settings: str):
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(threads), SETTINGS_VARIABLE: settings}
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "examples.lab.compile_ahead", job.target, json.dumps(list(job.args))],
        cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return process, log


def _name(job: Job) -> str:
    return f"{job.target.rsplit(':', 1)[-1]}{tuple(job.args)}"


def _last_line(log) -> str:
    log.seek(0)
    lines = [line.strip() for line in log.read().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "exited without a message"


def cache_hits() -> dict[str, int]:
    """Inductor's FX graph cache hits and misses in this process so far."""
    from torch._dynamo.utils import counters

    return {"hits": counters["inductor"]["fxgraph_cache_hit"],
            "misses": counters["inductor"]["fxgraph_cache_miss"]}


def _child(target: str, args: list) -> int:
    import torch._inductor.config as inductor_config

    inductor_config.autotune_local_cache = False  # tuned alone, by the topic; see above
    apply_settings(json.loads(os.environ.get(SETTINGS_VARIABLE, "{}")))  # the parent's cache key
    module, function = target.split(":")
    getattr(importlib.import_module(module), function)(*args)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or ":" not in sys.argv[1]:
        print("usage: python -m examples.lab.compile_ahead package.module:function '[json args]'",
              file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(_child(sys.argv[1], json.loads(sys.argv[2])))
    except Exception as exc:  # noqa: BLE001 - the parent shows this one line; the topic compiles it
        print(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
              file=sys.stderr)
        sys.exit(1)
