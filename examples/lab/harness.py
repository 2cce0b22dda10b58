"""The harness an example measures through.

An example's ``measure(lab)`` says *what* to run for each case and how to check
it; the harness owns warm-up, repetitions, the timer, statistics and
provenance, and turns the whole run into one :class:`~examples.lab.records.Record`.
"""
from __future__ import annotations

import math
import os
import sys
import time as _clock
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from pydantic import ValidationError

from examples.lab import provenance, timing
from examples.lab.load import LoadMonitor
from examples.lab.records import SCHEMA_VERSION, Check, Method, Metric, Record, RecordError, Row, Scalar
from examples.lab.stats import summarize

#: Seconds to each display unit.
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


class CheckFailed(RuntimeError):
    """The fast path disagreed with its reference: nothing it measured may be kept."""


class Unavailable(RuntimeError):
    """This machine lacks something the example needs (a profiler, a package): say what, in one line.

    ``python -m examples.lab run`` skips the topic with this reason; one example run alone exits 1.
    """


#: Elements compared at a time: the float64 copies of a chunk take 256 MiB, whatever the tensor.
CHECK_CHUNK = 1 << 24


def _error_and_norm(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """‖actual − expected‖ and ‖expected‖ in float64, on ``actual``'s device, a chunk at a time:
    a 2 GiB output is checked where it lives, not copied to the host, and fits a small GPU."""
    a = actual.reshape(-1)
    e = expected.reshape(-1)
    if a.is_complex() or e.is_complex():  # both parts count
        a, e = (torch.view_as_real(t.to(torch.complex128)).reshape(-1) for t in (a, e))
    squared_diff = torch.zeros((), dtype=torch.float64, device=a.device)
    squared_norm = torch.zeros((), dtype=torch.float64, device=a.device)
    for start in range(0, a.numel(), CHECK_CHUNK):
        a64 = a[start:start + CHECK_CHUNK].to(torch.float64)
        e64 = e[start:start + CHECK_CHUNK].to(a.device, torch.float64)
        squared_norm += e64.square().sum()
        squared_diff += (a64 - e64).square().sum()
    return math.sqrt(squared_diff.item()), math.sqrt(squared_norm.item())


class Lab:
    """What an example sees while it measures: the device, the mode and the timers."""

    def __init__(self, device: torch.device, *, quick: bool, on_case: Callable[[str], None] | None = None):
        self.device = device
        self.quick = quick
        self.timer = "cuda_event" if device.type == "cuda" else "host_sync"
        self.warmup = 3 if quick else 25
        self.repetitions = 5 if quick else 60
        self.notes: dict[str, Any] = {}
        self._rows: dict[tuple, tuple[dict[str, Scalar], dict[str, Metric]]] = {}
        self._checks: list[Check] = []
        self._on_case = on_case or (lambda _: None)
        #: Samples clocks and power while each metric is timed (GPU only).
        self.load = LoadMonitor(device.index if device.index is not None else torch.cuda.current_device()
                                if self.cuda else None)
        #: (case key, metric) -> the monotonic-clock window it was timed in.
        self._windows: dict[tuple, tuple[float, float]] = {}
        #: LAB_TRACE=1: one line per timed figure on stderr, with its seconds (where a topic's time goes).
        self._trace = os.environ.get("LAB_TRACE") == "1"
        self._began = _clock.monotonic()

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    # -- measuring ---------------------------------------------------------
    def time(
        self,
        fn: Callable[..., Any],
        *,
        case: dict[str, Scalar],
        metric: str = "time",
        unit: str = "us",
        timer: str | None = None,
        inner: int = 1,
        warmup: int | None = None,
        repetitions: int | None = None,
        flush_l2: bool = False,
        inputs: Sequence[tuple] | None = None,
    ) -> Metric:
        """Time ``fn`` under ``case`` and keep the result as ``metric`` (time per call)."""
        if unit not in TIME_UNITS:
            raise ValueError(f"unit {unit!r} is not a time unit ({', '.join(TIME_UNITS)})")
        timer = self._timer(timer)
        self._on_case(_describe(case, metric))
        began = _clock.monotonic()
        samples = timing.measure(
            fn,
            device=self.device,
            timer=timer,
            warmup=self.warmup if warmup is None else warmup,
            repetitions=self.repetitions if repetitions is None else repetitions,
            inner=inner,
            flush_l2=flush_l2,
            inputs=inputs,
        )
        ended = _clock.monotonic()
        self._traced(began, ended, _describe(case, metric))
        self.load.window(began, ended)
        scale = TIME_UNITS[unit]
        result = summarize([s * scale for s in samples], unit=unit, method=timer)
        result = result.model_copy(update={
            "warmup": self.warmup if warmup is None else warmup, "inner": inner,
        })
        self._keep(case, metric, result)
        self._windows[(_key(case), metric)] = (began, ended)
        return result

    # --8<-- [start:compare]
    def compare(
        self,
        variants: dict[str, Callable[..., Any]],
        *,
        case: dict[str, Scalar],
        key: str = "variant",
        metric: str = "time",
        unit: str = "us",
        baseline: str | None = None,
        speedup_metric: str = "speedup",
        timer: str | None = None,
        inner: int = 1,
        warmup: int | None = None,
        repetitions: int | None = None,
        flush_l2: bool = False,
        inputs: Sequence[tuple] | None = None,
    ) -> dict[str, Metric]:
        """Time ``variants`` against each other, interleaved: each round
        takes one sample of every variant, in :func:`timing.round_order`,
        so that drift in clocks, power and heat falls on all alike.

        Each variant is kept as ``metric`` under ``case | {key: name}``.
        With a ``baseline``, every other variant also gets
        ``speedup_metric``: the baseline's sample over its own sample *of
        the same round*, median and spread of those paired ratios.
        """
        if unit not in TIME_UNITS:
            raise ValueError(f"unit {unit!r} is not a time unit")
        if baseline is not None and baseline not in variants:
            raise ValueError(f"baseline {baseline!r} is not a variant")
        timer = self._timer(timer)
        warmup = self.warmup if warmup is None else warmup
        runs = self.repetitions if repetitions is None else repetitions
        described = _describe(case, metric) + " · " + " vs ".join(variants)
        self._on_case(described)
        began = _clock.monotonic()
        samples = timing.measure_interleaved(
            variants, device=self.device, timer=timer, warmup=warmup,
            repetitions=runs, inner=inner, flush_l2=flush_l2, inputs=inputs)
        ended = _clock.monotonic()
        self._traced(began, ended, described)
        self.load.window(began, ended)
        scale = TIME_UNITS[unit]
        method = f"{timer}, interleaved rounds"
        results = {}
        for name, values in samples.items():
            result = summarize([v * scale for v in values], unit=unit,
                               method=method)
            result = result.model_copy(
                update={"warmup": warmup, "inner": inner})
            row = {**case, key: name}
            self._keep(row, metric, result)
            self._windows[(_key(row), metric)] = (began, ended)
            results[name] = result
            if baseline is not None and name != baseline:
                paired = [b / v for b, v in zip(samples[baseline], values)]
                self._keep(row, speedup_metric, summarize(
                    paired, unit="x",
                    method=f"paired ratio {baseline} / {name}, {method}"))
        return results
    # --8<-- [end:compare]

    def compare_rows(
        self,
        variants: dict[str, Callable[[], Any]],
        rows: dict[str, tuple[dict[str, Scalar], str]],
        *,
        baseline: str | None = None,
        ratios: dict[str, tuple[dict[str, Scalar], str, float]] | None = None,
        unit: str = "us",
        timer: str | None = None,
        warmup: int | None = None,
        repetitions: int | None = None,
        flush_l2: bool = False,
    ) -> dict[str, Metric]:
        """:meth:`compare` for variants that are not the values of one key of one case
        (sizes, levels, a baseline that is no row): the same interleaved rounds, but each
        variant is kept where ``rows`` says, name -> (case, metric); a variant with no
        row (a baseline) is timed for the ratios only.

        ``ratios``, name -> (case, metric, factor), keeps ``factor`` times the baseline's
        sample over the variant's sample *of the same round*: the median and spread of
        paired ratios (``factor`` turns a ratio of times into one of rates, say).
        """
        if unit not in TIME_UNITS:
            raise ValueError(f"unit {unit!r} is not a time unit")
        if ratios and baseline not in variants:
            raise ValueError(f"ratios need a baseline among the variants, not {baseline!r}")
        timer = self._timer(timer)
        warmup = self.warmup if warmup is None else warmup
        runs = self.repetitions if repetitions is None else repetitions
        described = " vs ".join(variants)
        self._on_case(described)
        began = _clock.monotonic()
        samples = timing.measure_interleaved(
            variants, device=self.device, timer=timer, warmup=warmup,
            repetitions=runs, flush_l2=flush_l2)
        ended = _clock.monotonic()
        self._traced(began, ended, described)
        self.load.window(began, ended)
        method = f"{timer}, interleaved rounds"
        kept = {}
        for name, (case, metric) in rows.items():
            kept[name] = self.keep_samples([s * TIME_UNITS[unit] for s in samples[name]], case=case,
                                           metric=metric, unit=unit, method=method, warmup=warmup, inner=1)
            self._windows[(_key(case), metric)] = (began, ended)
        for name, (case, metric, factor) in (ratios or {}).items():
            pairs = [factor * b / v for b, v in zip(samples[baseline], samples[name])]
            self.keep_samples(pairs, case=case, metric=metric, unit="x",
                              method=f"paired ratio {baseline} / {name}, {method}")
        return kept

    def _timer(self, timer: str | None) -> str:
        """The timer asked for, or the run's; ``"kernel"`` (the GPU's own
        durations) means the host clock where there is no GPU to ask."""
        if timer == "kernel" and not self.cuda:
            return "host_sync"
        return timer or self.timer

    def _traced(self, began: float, ended: float, description: str) -> None:
        if self._trace:
            print(f"[lab {ended - self._began:7.1f} s] {description}: {ended - began:.2f} s timed",
                  file=sys.stderr, flush=True)

    @property
    def host_reference(self) -> dict[str, float]:
        """This run's host speed (:func:`host_reference`): divide a host-bound figure by it."""
        return host_reference(self.device)

    def keep_samples(
        self, samples: Sequence[float], *, case: dict[str, Scalar], metric: str, unit: str, method: str,
        warmup: int | None = None, inner: int | None = None,
    ) -> Metric:
        """Keep samples measured elsewhere (another process, a profiler) with their spread.

        ``method`` names the clock that produced them, e.g. ``"cuda_event, rank 0"``;
        ``warmup`` and ``inner`` say how they were taken, where known.
        """
        result = summarize(samples, unit=unit, method=method)
        result = result.model_copy(update={"warmup": warmup, "inner": inner})
        self._keep(case, metric, result)
        return result

    def value(self, *, case: dict[str, Scalar], metric: str, value: float, unit: str) -> Metric:
        """Keep a figure computed from measured ones (a ratio, a bandwidth)."""
        result = Metric(unit=unit, median=float(value), method="computed")
        self._keep(case, metric, result)
        return result

    def check(self, name: str, actual: torch.Tensor, expected: torch.Tensor, *, tolerance: float) -> float:
        """Relative error ‖actual − expected‖ / ‖expected‖ in float64; raise if above ``tolerance``."""
        if actual.shape != expected.shape:
            raise CheckFailed(f"{name}: shape {tuple(actual.shape)} != reference {tuple(expected.shape)}")
        diff, norm = _error_and_norm(actual.detach(), expected.detach())
        rel = diff / norm if norm else diff
        if not math.isfinite(rel):
            rel = math.inf
        passed = rel <= tolerance
        self._checks.append(Check(name=name, rel_error=rel if math.isfinite(rel) else 1e300,
                                  tolerance=tolerance, passed=passed))
        if not passed:
            raise CheckFailed(f"{name}: relative error {rel:.3g} exceeds {tolerance:g}")
        return rel

    def note(self, key: str, value: Any) -> None:
        """Keep a non-numeric observation (an error message, a kernel name)."""
        self.notes[key] = value

    def _keep(self, case: dict[str, Scalar], metric: str, result: Metric) -> None:
        _, metrics = self._rows.setdefault(_key(case), (dict(case), {}))
        metrics[metric] = result

    # -- the record ----------------------------------------------------------
    def rows(self) -> list[Row]:
        """Every row kept so far (an example may read them while it measures)."""
        return [Row(case=case, metrics=metrics) for case, metrics in self._rows.values()]

    def _rows_with_load(self) -> list[Row]:
        """Every row, each timed metric with the clocks and power sampled while it ran.

        Reading the samples stops the sampler: only the finished record does it.
        """
        rows = []
        for key, (case, metrics) in self._rows.items():
            with_load = {}
            for name, m in metrics.items():
                window = self._windows.get((key, name))
                load = self.load.load_between(*window) if window else None
                with_load[name] = m.model_copy(update={"load": load}) if load else m
            rows.append(Row(case=case, metrics=with_load))
        return rows

    def record(self, *, topic: str, source: Path, command: str) -> Record:
        """The validated record of this run; :class:`RecordError` if it breaks the schema."""
        try:
            return self._record(topic=topic, source=source, command=command)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RecordError(f"the record of {topic} does not validate: {where}: {first['msg']}") from None

    def _record(self, *, topic: str, source: Path, command: str) -> Record:
        results = self._rows_with_load()
        return Record(
            schema_version=SCHEMA_VERSION,
            topic=topic,
            source=source.relative_to(provenance.REPO_ROOT).as_posix(),
            source_sha256=provenance.source_sha256(source),
            machine=provenance.machine_info(self.device.type),
            run=provenance.run_info(quick=self.quick, command=command).model_copy(
            update={"host_reference": host_reference(self.device)}),
            method=Method(timer=self.timer, warmup=self.warmup, repetitions=self.repetitions),
            checks=self._checks,
            results=results,
            notes=self.notes,
            load=self.load.summary(),
        )


_HOST_REFERENCE: dict[str, dict[str, float]] = {}


def host_reference(device: torch.device) -> dict[str, float]:
    """How fast this host issues work, measured once per process and kept in every record of
    the run: a bare Python call (ns) and, on a GPU, the enqueue of a one-element add (us per
    call, back to back, host clock). Host-bound figures moved up to 2x between hosts of one
    GPU kind; stated relative to these, they travel.
    """
    key = str(device)
    if key not in _HOST_REFERENCE:
        def nothing() -> None:
            pass

        def per_call(fn, calls: int) -> float:  # the median of 7 tries, seconds per call
            tries = []
            for _ in range(7):
                t0 = _clock.perf_counter_ns()
                for _ in range(calls):
                    fn()
                tries.append((_clock.perf_counter_ns() - t0) / calls / 1e9)
            return sorted(tries)[3]

        reference = {"python_call_ns": round(per_call(nothing, 20000) * 1e9, 2)}
        one = torch.zeros(1, device=device)
        if device.type == "cuda":
            for _ in range(100):
                one.add_(1)
            torch.cuda.synchronize(device)
            reference["tiny_op_us"] = round(per_call(lambda: one.add_(1), 2000) * 1e6, 3)
            torch.cuda.synchronize(device)
        else:
            reference["tiny_op_us"] = round(per_call(lambda: one.add_(1), 2000) * 1e6, 3)
        _HOST_REFERENCE[key] = reference
    return dict(_HOST_REFERENCE[key])


def _key(case: dict[str, Scalar]) -> tuple:
    return tuple(sorted(case.items()))


def _describe(case: dict[str, Scalar], metric: str) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items()) + f" · {metric}"


def topic_of(module: ModuleType) -> str:
    """``examples.graphs.decode_loop`` -> ``graphs.decode_loop``."""
    name = module.__spec__.name if module.__spec__ else module.__name__
    return name.removeprefix("examples.")


def requires_cuda(module: ModuleType) -> bool:
    return bool(getattr(module, "REQUIRES_CUDA", False))


def missing_gpus(module: ModuleType, device: torch.device) -> str | None:
    """Why ``module`` cannot run on ``device`` for want of GPUs (``MIN_GPUS``), or ``None``."""
    needed = int(getattr(module, "MIN_GPUS", 1))
    if device.type != "cuda" or needed <= 1:
        return None
    have = torch.cuda.device_count()
    return None if have >= needed else f"needs {needed} GPUs, this machine has {have}"


def run_measurement(
    module: ModuleType,
    *,
    device: torch.device,
    quick: bool,
    command: str,
    on_case: Callable[[str], None] | None = None,
) -> Record:
    """Run one example's ``measure`` and return its validated record.

    Topics of one ``lab run`` share a process: each starts from an emptied allocator
    cache, and global settings a topic leaves changed are put back (and noted in its
    record), so that no figure depends on which topics ran before it.
    """
    began = _clock.monotonic()  # the topic's wall time includes starting the load sampler
    source = Path(module.__file__)
    hashed = provenance.source_sha256(source)  # the code as it runs, not as it is when the record is written
    host_reference(device)  # once per run, before the first topic loads the GPU
    _fresh_allocator(device)
    _keep_compile_workers()
    settings = global_settings()
    lab = Lab(device, quick=quick, on_case=on_case)
    started = _clock.monotonic()
    try:
        module.measure(lab)
        lab.synchronize()
        if not lab.load.windows:
            # Timed out of this process (the collectives time in their ranks): the load is the topic's.
            lab.load.window(started, _clock.monotonic())
    except ValidationError as exc:  # a metric or note the schema refuses (NaN, inf, ...)
        first = exc.errors()[0]
        raise RecordError(f"{topic_of(module)} kept an invalid figure: {first['msg']}") from None
    finally:
        lab.load.stop()
        changed = restore_global_settings(settings)
    if changed:
        lab.note("global settings left changed (put back by the harness)", changed)
    if provenance.source_sha256(source) != hashed:
        raise RecordError(f"{topic_of(module)}: its code changed on disk while it ran; run it again")
    record = lab.record(topic=topic_of(module), source=source, command=command)
    run = record.run.model_copy(update={"wall_s": round(_clock.monotonic() - began, 2)})
    return record.model_copy(update={"run": run})


def _keep_compile_workers() -> None:
    """Keep Inductor's compile workers once started: by default it stops them after a
    minute without compiling, and the next topic that compiles waits seconds for new ones.
    No kernel or compiled code depends on it; only when the workers start does."""
    os.environ.setdefault("TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL", "0")  # read when Inductor loads
    config = sys.modules.get("torch._inductor.config")
    if config is not None and hasattr(config, "quiesce_async_compile_pool"):
        config.quiesce_async_compile_pool = False


def _fresh_allocator(device: torch.device) -> None:
    """Free what earlier topics left cached, so memory figures start from the same place."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


#: Process-wide switches a topic may flip to force a path (TF32, cuDNN's autotuner, SDPA's
#: backends): (name, read, write).
_SETTINGS = (
    ("torch.backends.cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32,
     lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
    ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
     lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
     lambda v: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", v)),
    ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
     lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
     lambda v: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", v)),
    ("torch.backends.cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32,
     lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
    ("torch.backends.cudnn.benchmark", lambda: torch.backends.cudnn.benchmark,
     lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    ("torch.backends.cudnn.deterministic", lambda: torch.backends.cudnn.deterministic,
     lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    ("torch.backends.cuda.flash_sdp_enabled", torch.backends.cuda.flash_sdp_enabled,
     torch.backends.cuda.enable_flash_sdp),
    ("torch.backends.cuda.mem_efficient_sdp_enabled", torch.backends.cuda.mem_efficient_sdp_enabled,
     torch.backends.cuda.enable_mem_efficient_sdp),
    ("torch.backends.cuda.math_sdp_enabled", torch.backends.cuda.math_sdp_enabled,
     torch.backends.cuda.enable_math_sdp),
    ("torch.backends.cuda.cudnn_sdp_enabled", torch.backends.cuda.cudnn_sdp_enabled,
     torch.backends.cuda.enable_cudnn_sdp),
    ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision,
     torch.set_float32_matmul_precision),
    ("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled,
     torch.use_deterministic_algorithms),
)


_UNREADABLE = object()


def _read(read) -> Any:
    """A switch's value; newer torch refuses to read a legacy TF32 switch once the new
    per-backend API has been used, and then that switch is left alone."""
    try:
        return read()
    except RuntimeError:
        return _UNREADABLE


def global_settings() -> dict[str, Any]:
    """The current value of each process-wide switch in :data:`_SETTINGS`."""
    return {name: _read(read) for name, read, _ in _SETTINGS}


def restore_global_settings(saved: dict[str, Any]) -> list[str]:
    """Put back every switch that differs from ``saved``; say which ones did."""
    changed = []
    for name, read, write in _SETTINGS:
        now = _read(read)
        if _UNREADABLE in (now, saved[name]) or now == saved[name]:
            continue
        changed.append(f"{name}: {saved[name]!r} -> {now!r}")
        write(saved[name])
    return changed
