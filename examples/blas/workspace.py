"""The cuBLAS workspace: scratch memory that lets cuBLAS split a long K, and whether the kernel it buys is faster.

A GEMM with a small output and a long reduction (1024 x 2048 outputs, K = 32,768) has few
output tiles for its work: 128 tiles of 128 x 128 for 132 SMs, each tile a reduction 32,768
long. cuBLAS can split K among more CTAs and add their partial
sums afterwards (split-K), but the partial sums need somewhere to live: the *workspace*, a
device buffer torch hands to cuBLAS (``cublasSetWorkspace``) and to cuBLASLt (the
``workspace`` argument of ``cublasLtMatmul``, with ``CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES``
telling the heuristic how much there is). With no workspace, the heuristic may only pick
kernels that need none.

torch sizes the buffers from two environment variables: ``CUBLAS_WORKSPACE_CONFIG``
(``:SIZE_KiB:COUNT`` pairs; unset, ``:4096:2:16:8``, 8 MiB + 128 KiB, and 32 MiB on
sm_90 per cuBLAS's recommendation for Hopper) and ``CUBLASLT_WORKSPACE_SIZE`` (KiB; unset,
1 MiB), in ``aten/src/ATen/cuda/CublasHandlePool.cpp``. Each buffer is allocated once per
cuBLAS handle and stream, at that handle's first GEMM, and kept: a setting belongs to a
process. So each setting here runs in a worker process of its own, started with that
environment, and the parent asks the workers for one sample at a time, in interleaved
rounds (:func:`examples.lab.timing.round_order`): only one worker runs at a time, so they
never share the GPU while timed. Each worker times its calls by the GPU's own kernel
durations (one profiler session around all its samples, cut per sample as
:func:`examples.lab.timing.measure_kernels` does), notes the kernels cuBLAS chose, and
measures the workspace it was given (the caching allocator's bytes at the first cuBLAS
and cuBLASLt call: the buffers come from it).

Two calls, two libraries (``aten/src/ATen/native/cuda/Blas.cpp``, ``addmm_out_cuda_impl``):
``torch.mm`` is ``addmm`` with beta = 0, which the cuBLASLt test (``isInputCompliesAddmmCudaLt``
wants beta = 1) refuses, so it runs ``cublasGemmEx``; ``torch.addmm(bias, a, b)`` with a 1-D
bias passes it and runs ``cublasLtMatmul`` with the bias in the epilogue. A square 8192^3
product, with tiles enough for every SM, is the control: its workspace should not matter.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

import torch

#: The environment variables torch reads for its BLAS workspaces; every worker starts
#: with these removed from the parent's environment, then the setting's own are set.
WORKSPACE_VARIABLES = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_UNIFIED_WORKSPACE")

# --8<-- [start:settings]
#: One worker process per setting: its name, and the variables it starts with.
SETTINGS = {
    "torch's default": {},  # 32 MiB for cuBLAS on sm_90; the worker measures what it got
    "1 MiB": {"CUBLAS_WORKSPACE_CONFIG": ":1024:1", "CUBLASLT_WORKSPACE_SIZE": "1024"},
    "none": {"CUBLAS_WORKSPACE_CONFIG": ":0:0", "CUBLASLT_WORKSPACE_SIZE": "0"},
}
# --8<-- [end:settings]
BASELINE = "none"

# --8<-- [start:calls]
#: The two calls: a plain product (cuBLAS) and one with a 1-D bias (cuBLASLt, bias in the epilogue).
CALLS = {
    "torch.mm (cuBLAS)": lambda a, b, bias, out=None: torch.mm(a, b, out=out),
    "torch.addmm, 1-D bias (cuBLASLt)": lambda a, b, bias, out=None: torch.addmm(bias, a, b, out=out),
}
# --8<-- [end:calls]

#: (M, N, K): a small output with a long K (PR pytorch/pytorch#101145's shape), then the control.
SHAPES = ((1024, 2048, 32768), (8192, 8192, 8192))
QUICK_SHAPES = ((32, 64, 1024), (64, 64, 64))
#: Calls per sample, per shape: a few milliseconds of GPU work each.
INNER = {SHAPES[0]: 8, SHAPES[1]: 2}
QUICK_INNER = 2
#: Rows and columns of each product checked against float64.
CHECKED = (32, 64)
TOLERANCE = 2e-2  # bf16 operands and output; float32 on the CPU lands far under it
#: Seconds a worker may take to answer: starting (importing torch, the CUDA context) or one step.
START_TIMEOUT_S, STEP_TIMEOUT_S = 120.0, 60.0


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


def case_name(shape, call: str) -> str:
    return f"{call}, {shape_name(shape)}"


# -- the worker: one process, one workspace setting --------------------------------------

def _inputs(shape, device, dtype, seed: int):
    """The same inputs in every worker (one seed), scaled so the products are near 1."""
    m, n, k = shape
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=g, device=device, dtype=dtype) / k**0.25
    b = torch.randn(k, n, generator=g, device=device, dtype=dtype) / k**0.25
    bias = torch.randn(n, generator=g, device=device, dtype=dtype)
    return a, b, bias


def _workspace_bytes(device, dtype) -> dict:
    """What the caching allocator handed out at this process's first cuBLAS call and at its
    first cuBLASLt call (a tiny mm, then a tiny addmm with a 1-D bias, outputs made first):
    the workspaces torch made. Nothing but the buffers is allocated in between."""
    a = torch.randn(64, 64, device=device, dtype=dtype)
    b, bias, out = torch.randn_like(a), torch.randn(64, device=device, dtype=dtype), torch.empty_like(a)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.mm(a, b, out=out)
    torch.cuda.synchronize(device)
    after_mm = torch.cuda.memory_allocated(device)
    torch.addmm(bias, a, b, out=out)
    torch.cuda.synchronize(device)
    after_addmm = torch.cuda.memory_allocated(device)
    seen = {"cuBLAS workspace (bytes)": after_mm - before,
            "cuBLASLt workspace beyond it (bytes)": after_addmm - after_mm}
    query = getattr(torch.backends.cuda, "cublaslt_workspace_size", None)  # torch >= 2.12 only
    if query is not None:
        seen["torch.backends.cuda.cublas_workspace_size()"] = torch.backends.cuda.cublas_workspace_size()
        seen["torch.backends.cuda.cublaslt_workspace_size()"] = query()
    return seen


class _Worker:
    """What one worker process holds: its inputs, its calls, and the samples it has taken."""

    def __init__(self, request: dict):
        # Imported before any profiler session: it makes every session settle as it stops.
        from examples.lab import kernels  # noqa: F401
        from examples.blas.levels import kernels_of
        from examples.lab.timing import ops_per_call

        self.device = torch.device(request["device"])
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:  # torch.cuda's memory calls want an index
            self.device = torch.device("cuda", torch.cuda.current_device())
        dtype = torch.bfloat16 if self.cuda else torch.float32
        self.ready = {"torch": torch.__version__,
                      "variables": {k: os.environ[k] for k in WORKSPACE_VARIABLES if k in os.environ}}
        if not self.cuda:  # the quick path: idle workers' spinning threads would slow the one that runs
            torch.set_num_threads(1)
        if self.cuda:  # first, before any other cuBLAS call makes the buffers
            torch.cuda.set_device(self.device)
            self.ready["workspace"] = _workspace_bytes(self.device, dtype)
        self.calls, self.inner, self.ops = {}, {}, {}
        checks, kernels = {}, {}
        for shape, inner in request["shapes"]:
            a, b, bias = _inputs(shape, self.device, dtype, seed=sum(shape))
            rows, cols = CHECKED
            ref = a[:rows].double() @ b[:, :cols].double()
            for call, fn in CALLS.items():
                name = case_name(shape, call)
                expected = ref + bias[:cols].double() if "addmm" in call else ref
                # Into a buffer of NaN: an element the call does not write stays NaN.
                out = fn(a, b, bias, out=torch.full((shape[0], shape[1]), float("nan"), device=self.device, dtype=dtype))
                checks[name] = {"actual": out[:rows, :cols].double().cpu().tolist(),
                                "expected": expected.cpu().tolist(),
                                "all_finite": bool(torch.isfinite(out).all())}
                self.calls[name] = lambda fn=fn, a=a, b=b, bias=bias: fn(a, b, bias)
                self.inner[name] = inner
                kernels[name] = kernels_of(self.calls[name], self.device)
                if self.cuda:
                    self.ops[name] = ops_per_call(self.calls[name])
        self.ready |= {"checks": checks, "kernels": kernels}
        self.order: list[str] = []  # the cases timed, in the order the parent asked for them
        self.host_s: list[float] = []

    def run(self, name: str, *, timed: bool) -> None:
        """``inner`` calls of one case, back to back, then wait for the GPU: the parent sends
        the next request (to this or another worker) only once the device is idle."""
        started = time.perf_counter()
        for _ in range(self.inner[name]):
            self.calls[name]()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        if timed:
            self.order.append(name)
            self.host_s.append((time.perf_counter() - started) / self.inner[name])

    def samples(self, events) -> dict[str, list[float]]:
        """Seconds per call of each sample, by the GPU's durations (cut per sample by the
        counts each call ran alone) or, on the CPU, by the host clock."""
        per_case: dict[str, list[float]] = {name: [] for name in self.calls}
        if not self.cuda:
            for name, seconds in zip(self.order, self.host_s):
                per_case[name].append(seconds)
            return per_case
        expected = sum(self.inner[n] * self.ops[n] for n in self.order)
        if len(events) != expected:
            raise RuntimeError(f"{len(events)} GPU operations where the calls alone ran {expected}")
        at = 0
        for name in self.order:
            count = self.inner[name] * self.ops[name]
            per_case[name].append(sum(op.duration_ns for op in events[at:at + count]) / 1e9 / self.inner[name])
            at += count
        return per_case


def serve() -> None:
    """A worker's main: JSON requests on stdin, one JSON line per answer on the protocol pipe.

    Started by :class:`Workers` with one setting's environment. Anything a library prints goes
    to stderr (file descriptor 1 is pointed there), so stdout carries answers only. An error
    is answered as ``{"error": ...}`` in one line, and the worker exits.
    """
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")

    worker = None
    try:
        for line in sys.stdin:
            request = json.loads(line)
            op = request["op"]
            if op == "setup":
                worker = _Worker(request)
                answer(worker.ready)
            elif op == "run":  # warm-up: untimed
                worker.run(request["case"], timed=False)
                answer({})
            elif op == "time":  # a session of timed runs, until "end"
                answer({"samples": _timed_session(worker, answer)})
            elif op == "quit":
                answer({})
                answers.close()
                # Nothing is left to write or free that outlives the process, and the
                # interpreter's own teardown of torch takes a second or more per process.
                os._exit(0)
            else:
                raise ValueError(f"unknown request {op!r}")
    except Exception as exc:  # noqa: BLE001 - said to the parent in one line, which raises
        first = (str(exc).strip().splitlines() or [""])[0]
        answer({"error": f"{type(exc).__name__}: {first}"[:300]})
        sys.exit(1)


def _timed_session(worker: _Worker, answer) -> dict:
    """Serve ``run`` requests inside one profiler session (GPU) until ``end``; the samples."""
    def session() -> None:
        answer({"ready": True})
        for line in sys.stdin:
            request = json.loads(line)
            if request["op"] == "end":
                return
            if request["op"] != "run":
                raise ValueError(f"request {request['op']!r} inside a timed session")
            worker.run(request["case"], timed=True)
            answer({})
        raise RuntimeError("the parent closed the pipe inside a timed session")

    if worker.cuda:
        from examples.lab.kernels import gpu_operations

        return worker.samples(gpu_operations(session))
    session()
    return worker.samples(None)


# -- the parent: the workers, in rounds ---------------------------------------------------

class WorkerFailed(RuntimeError):
    """A worker answered with an error, or died: one line that names its setting."""


class Workers:
    """One worker process per setting, started together; a context manager that always ends them."""

    def __init__(self, settings: dict[str, dict[str, str]]):
        from examples.lab.provenance import REPO_ROOT

        self.processes: dict[str, subprocess.Popen] = {}
        self.stderr: dict[str, tempfile._TemporaryFileWrapper] = {}
        self.answers: dict[str, queue.Queue] = {}
        base = {k: v for k, v in os.environ.items() if k not in WORKSPACE_VARIABLES}
        code = "from examples.blas.workspace import serve; serve()"
        try:
            for name, variables in settings.items():
                self.stderr[name] = tempfile.TemporaryFile(mode="w+")
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-c", code], env=base | variables, cwd=REPO_ROOT, text=True,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr[name], bufsize=1)
                self.answers[name] = queue.Queue()
                threading.Thread(target=self._read, args=(name,), daemon=True).start()
        except BaseException:
            self.close()
            raise

    def _read(self, name: str) -> None:
        """Every line the worker answers, into its queue; ``None`` when its pipe closes."""
        for line in self.processes[name].stdout:
            self.answers[name].put(line)
        self.answers[name].put(None)

    def send(self, name: str, request: dict) -> None:
        try:
            self.processes[name].stdin.write(json.dumps(request) + "\n")
            self.processes[name].stdin.flush()
        except (BrokenPipeError, OSError):
            self._failed(name, "its pipe closed")

    def receive(self, name: str, timeout: float = STEP_TIMEOUT_S) -> dict:
        try:
            line = self.answers[name].get(timeout=timeout)
        except queue.Empty:
            self._failed(name, f"no answer in {timeout:.0f} s")
        if line is None:
            self._failed(name, f"it exited with code {self.processes[name].wait()}")
        message = json.loads(line)
        if "error" in message:
            raise WorkerFailed(f"workspace worker '{name}': {message['error']}")
        return message

    def ask(self, name: str, request: dict, timeout: float = STEP_TIMEOUT_S) -> dict:
        self.send(name, request)
        return self.receive(name, timeout)

    def _failed(self, name: str, why: str):
        """A worker that died says why on stderr: its last line."""
        self.stderr[name].seek(0)
        lines = [line.strip() for line in self.stderr[name].read().splitlines() if line.strip()]
        last = f": {lines[-1][:300]}" if lines else ""
        raise WorkerFailed(f"workspace worker '{name}': {why}{last}")

    def close(self) -> dict[str, int]:
        """Ask each worker to quit; one that does not within 10 s is killed. Their exit codes."""
        for name, process in self.processes.items():
            if process.poll() is None:
                try:
                    process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    process.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for file in self.stderr.values():
            file.close()
        return {name: process.returncode for name, process in self.processes.items()}

    def __enter__(self):
        return self

    def __exit__(self, kind, *_) -> None:
        codes = self.close()
        failed = {name: code for name, code in codes.items() if code != 0}
        if failed and kind is None:  # an error already on its way says more
            raise WorkerFailed(f"workspace workers exited with {failed} after answering everything")


# --8<-- [start:rounds]
def sample_in_rounds(workers: Workers, names: list[str], cases: list[str], *, warmup: int,
                     rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per worker and case, one sample per round. Within a round each case asks every worker
    in :func:`round_order` for one sample and waits for it, so that only one process uses
    the GPU at a time; sample i of every worker comes from round i, so they pair up."""
    from examples.lab.timing import round_order

    for r in range(warmup):  # untimed, through the same requests
        for case in cases:
            for name in round_order(names, r):
                workers.ask(name, {"op": "run", "case": case})
    for name in names:
        workers.ask(name, {"op": "time"})  # each opens its profiler session, idle until asked
    for r in range(rounds):
        for case in cases:
            for name in round_order(names, r):
                workers.ask(name, {"op": "run", "case": case})
    return {name: workers.ask(name, {"op": "end"})["samples"] for name in names}
# --8<-- [end:rounds]


def measure(lab) -> None:
    shapes = QUICK_SHAPES if lab.quick else SHAPES
    inner = {shape: QUICK_INNER if lab.quick else INNER[shape] for shape in shapes}
    cases = [case_name(shape, call) for shape in shapes for call in CALLS]
    names = list(SETTINGS)
    warmup, rounds = (1, 3) if lab.quick else (3, 30)
    with Workers(SETTINGS) as workers:
        request = {"op": "setup", "device": str(lab.device), "shapes": [[list(s), inner[s]] for s in shapes]}
        for name in names:  # all set up at once: starting, checking and noting kernels time nothing
            workers.send(name, request)
        ready = {name: workers.receive(name, START_TIMEOUT_S) for name in names}
        for name in names:
            _keep_setup(lab, name, ready[name])
        samples = sample_in_rounds(workers, names, cases, warmup=warmup, rounds=rounds)
    _keep_samples(lab, samples, shapes, inner, warmup=warmup)


def _keep_setup(lab, name: str, ready: dict) -> None:
    """A worker's checks (in the record, as every topic's), its kernels and its workspace."""
    from examples.lab.harness import CheckFailed

    for case, check in ready["checks"].items():
        if not check["all_finite"]:
            raise CheckFailed(f"{case}, workspace {name}: the output has NaN or inf")
        lab.check(f"{case}, workspace {name}", torch.tensor(check["actual"], dtype=torch.float64),
                  torch.tensor(check["expected"], dtype=torch.float64), tolerance=TOLERANCE)
        lab.note(f"kernels, {case}, workspace {name}", ready["kernels"][case])
    lab.note(f"workspace {name}: variables", ready["variables"] or "none set (torch's defaults)")
    lab.note(f"workspace {name}: torch", ready["torch"])
    if "workspace" in ready:
        lab.note(f"workspace {name}: allocated", ready["workspace"])


def _keep_samples(lab, samples, shapes, inner, *, warmup: int) -> None:
    """Each setting's time and rate per case, and the paired speed-up of each workspace over none."""
    clock = "the GPU's kernel durations (CUPTI), summed per call" if lab.cuda else "host clock"
    method = f"{clock}, one worker process per setting, interleaved rounds across the workers"
    for shape in shapes:
        m, n, k = shape
        for call in CALLS:
            case = case_name(shape, call)
            for name in SETTINGS:
                row = {"shape": shape_name(shape), "op": call, "workspace": name}
                kept = lab.keep_samples([s * 1e6 for s in samples[name][case]], case=row, metric="time",
                                        unit="us", method=method, warmup=warmup, inner=inner[shape])
                lab.value(case=row, metric="rate", unit="TFLOP/s", value=2 * m * n * k / kept.median / 1e6)
                if name != BASELINE:
                    pairs = [none / this for none, this in zip(samples[BASELINE][case], samples[name][case])]
                    lab.keep_samples(pairs, case=row, metric="vs_none", unit="x",
                                     method=f"paired ratio {BASELINE} / {name}, same round, {method}")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
