"""Sync points: what each one costs a loop, and how to catch them.

A GPU loop runs fast when the CPU queues the next step's kernels while the GPU
still works on this one. Anything that needs a value on the host (``.item()``,
``float()``, ``.cpu()``, ``.numpy()``, ``.tolist()``, ``print`` of a tensor,
``torch.save``, ``nonzero`` and ``unique`` whose output size depends on the
data, an ``if`` on a tensor) makes the CPU wait for the GPU to drain, every
iteration; reading ``x.shape`` (metadata, kept on the host) is the control
that does not. The example times a loop with and without each one, on a small
(launch-bound) and a large (GPU-bound) step, and on a tiny one (one layer),
all the loops of a step interleaved in rounds (``Lab.compare``) so that each
slowdown is a ratio of two loops timed side by side; it runs each under
``torch.cuda.set_sync_debug_mode("warn")`` to see whether it is reported,
and counts with the profiler what one call of each makes the GPU do: its
kernels, its device-to-host copies and the CPU's waits for them.
"""

from __future__ import annotations

import io
import sys
import warnings

import torch


# --8<-- [start:sync_points]
def sync_points(sink: io.StringIO) -> dict:
    """Each sync point as a function of the step's loss and output."""
    return {
        "none": lambda loss, y: None,
        "x.shape": lambda loss, y: y.shape[-1],  # metadata: no sync
        ".item()": lambda loss, y: loss.item(),
        "float(loss)": lambda loss, y: float(loss),
        ".cpu()": lambda loss, y: y[0].cpu(),
        # the float32 loss: NumPy has no bfloat16
        ".cpu().numpy()": lambda loss, y: loss.cpu().numpy(),
        ".tolist()": lambda loss, y: y[0].tolist(),
        "print(loss)": lambda loss, y: print(loss, file=sink),
        "print(loss.item())": lambda loss, y: print(loss.item(), file=sink),
        "torch.save": lambda loss, y: torch.save(loss, io.BytesIO()),
        "nonzero": lambda loss, y: torch.nonzero(y[0] > 0),
        ".unique()": lambda loss, y: (y[0] > 0).unique(),
        "if loss > 0": lambda loss, y: 1 if loss > 0 else 0,
    }


# --8<-- [end:sync_points]


# --8<-- [start:loop]
def make_step(batch: int, hidden: int, layers: int, device, dtype):
    weights = [torch.randn(hidden, hidden, device=device, dtype=dtype)
               / hidden**0.5 for _ in range(layers)]

    def step(x):
        for w in weights:
            x = torch.tanh(x @ w)
        return x, x.float().square().mean()

    return step, torch.randn(batch, hidden, device=device, dtype=dtype)


def run_loop(step, x, sync, iterations: int) -> None:
    for _ in range(iterations):
        y, loss = step(x)
        sync(loss, y)  # the line under test


# --8<-- [end:loop]


# --8<-- [start:count]
def count_transfers(sync, loss, y) -> dict[str, int]:
    """What one call of ``sync`` makes each side do, from the profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = loss.is_cuda
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()  # nothing of the step left in flight
    with profile(activities=activities) as prof:
        sync(loss, y)
        if cuda:
            torch.cuda.synchronize()  # so the last copy is recorded
    gpu = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    # CUPTI may suffix runtime calls with a version: cudaMemcpy_v3020
    cpu = [e.name.split("_")[0] for e in prof.events()
           if e.device_type == DeviceType.CPU]
    counts = {"aten_ops": sum(n.startswith("aten::") for n in cpu)}
    if cuda:
        counts.update(
            # GPU side: kernels, and copies to the host (CUPTI's names)
            kernels=sum("memcpy" not in n.lower() and "memset" not in
                        n.lower() for n in gpu),
            d2h_copies=sum("DtoH" in n for n in gpu),
            # CPU side: the runtime calls that copy, and that wait
            memcpy_calls=sum(n in ("cudaMemcpyAsync", "cudaMemcpy")
                             for n in cpu),
            stream_syncs=sum(n == "cudaStreamSynchronize" for n in cpu),
        )
    return counts


# --8<-- [end:count]


def caught_by_debug_mode(step, x, sync) -> str:
    """What ``set_sync_debug_mode("warn")`` says about one iteration."""
    if not torch.cuda.is_available():
        return "needs CUDA"
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_loop(step, x, sync, 1)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    messages = [str(w.message).splitlines()[0] for w in seen
                if "synchroniz" in str(w.message)]
    return messages[0] if messages else "not reported"


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    # (batch, hidden, layers): one layer of a tiny step, then 8 layers of a
    # launch-bound and of a GPU-bound one.
    sizes = {"tiny": (1, 64, 1), "small": (8, 256, 8),
             "large": (2048, 4096, 8)}
    if lab.quick:
        sizes = {"tiny": (1, 16, 1), "small": (8, 64, 4),
                 "large": (256, 256, 4)}
    # Iterations per timed loop. Five keep every sample far above the host
    # clock's resolution and the one synchronize that ends it (the tiny
    # step's loop lasts over 0.3 ms, that sync some 10 us); the spread comes
    # from the rounds (their count is unchanged), and 20 iterations a loop
    # made the topic four times as long.
    iterations = 5
    sink = io.StringIO()
    for size, (batch, hidden, layers) in sizes.items():
        step, x = make_step(batch, hidden, layers, lab.device, dtype)
        y, loss = step(x)
        ref = x.double()
        for w in step.__closure__[0].cell_contents:
            ref = torch.tanh(ref @ w.double())
        lab.check(f"{size} step", y, ref, tolerance=2e-2)
        # The GPU-bound step runs for tens of milliseconds a loop: fewer
        # repetitions give as steady a median. Warm-up rounds run every loop,
        # `iterations` steps each: enough for cuBLAS's first calls.
        fewer = ({"warmup": 2, "repetitions": 20}
                 if size == "large" and not lab.quick else {"warmup": 3})
        loops = {name: (lambda sync=sync: run_loop(step, x, sync, iterations))
                 for name, sync in sync_points(sink).items()}
        timed = lab.compare(loops, case={"step": size}, key="sync",
                            metric="loop", unit="us", baseline="none",
                            timer="host_sync", **fewer)
        paired = {row.case["sync"]: row.metrics["speedup"]
                  for row in lab.rows() if row.case.get("step") == size
                  and "speedup" in row.metrics}
        for name, sync in sync_points(sink).items():
            case = {"step": size, "sync": name}
            lab.value(case=case, metric="per_iteration",
                      value=timed[name].median / iterations, unit="us")
            # speedup is none / this loop within one round; its reciprocal is
            # the paired slowdown, whose median is the reciprocal of the
            # median speedup (exactly so for an odd count of rounds).
            lab.value(case=case, metric="slowdown", unit="x",
                      value=1 / paired[name].median if name in paired else 1.0)
            if size == "small":
                lab.note(f"sync debug mode: {name}",
                         caught_by_debug_mode(step, x, sync))
                y, loss = step(x)
                sync(loss, y)  # once before, so nothing first-time counts
                for metric, n in count_transfers(sync, loss, y).items():
                    lab.value(case=case, metric=metric, value=n, unit="")
        sink.truncate(0)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
