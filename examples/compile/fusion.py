"""Fusion: bytes an eager chain moves, bytes the fused kernel moves, speedups.

Each pattern is written as plain PyTorch ops. Run eagerly, every op is its own
kernel that reads its inputs from memory and writes its output back; the
byte counter below adds these up op by op. Compiled by Inductor, the chain
becomes as few kernels as it can, which ideally read the inputs once and
write the output once. With the copy bandwidth and the GEMM rate as roofs, a
roofline time per kernel gives the predicted speedup; the measured speedup is
eager time over compiled time.

The roofs are timed in each pattern's own interleaved rounds, beside its eager
and compiled calls: a copy in every pattern's, a GEMM in those whose eager
kernels do matrix products (the rate enters no other prediction). A drift of
clocks or power then falls on the roof as on the pattern, not on the ratio of
the two (``copy_bandwidth``, ``gemm_rate`` of each pattern).

On a GPU every time in the ratios is the kernels' own: their durations from
the profiler (CUPTI), summed over one call, for eager, compiled, the copy and
the GEMM alike. A compiled call also runs Dynamo's guards and Inductor's
launcher on the host; events around one call time those too, kept apart as
``compiled_one_call`` to show the difference (Chapter 8's trap). On a CPU the
kernels run on the host, and the synchronized host clock times them. On a GPU
the record also notes eager attention kernel by kernel, each duration beside
the roofline time of its ATen operator, to show which of them loses the time.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from examples.lab.kernels import gpu_operations
from examples.lab.timing import ops_per_call

aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default,
           aten.baddbmm.default}


# --8<-- [start:counter]
#: Ops that return their input's data under a new shape and launch no kernel, yet are
#: not marked as views: ``_unsafe_view`` is how a batched matmul hands back its result.
MOVES_NO_DATA = (aten.detach.default, aten._unsafe_view.default)


class Traffic(TorchDispatchMode):
    """Count, op by op, the bytes each eager kernel reads and writes and
    the flops of the matrix products."""

    def __init__(self):
        super().__init__()
        self.kernels: list[tuple[str, int, int]] = []  # (op, bytes, flops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func in MOVES_NO_DATA:
            return out  # views move no data
        tensors = [t for t in tree_flatten((args, kwargs, out))[0]
                   if isinstance(t, torch.Tensor)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        flops = 0
        if func in MATMULS:
            a, b = args[-2], args[-1]
            flops = 2 * a.numel() * b.shape[-1]
        self.kernels.append((str(func.overloadpacket), nbytes, flops))
        return out


def min_bytes(fn, *inputs) -> int:
    """What a perfectly fused kernel moves: read each input, write the
    output, once."""
    out = fn(*inputs)
    return sum(t.numel() * t.element_size() for t in (*inputs, out))


# --8<-- [end:counter]


# --8<-- [start:patterns]
def pointwise_chain(x):  # 3 ops
    return torch.relu(x * 2.0 + 1.0)


def gelu_tanh(x):  # GELU written out, as in many model files
    inner = 0.7978845608 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + torch.tanh(inner))


def layernorm_residual(x, residual, weight, bias):
    return F.layer_norm(x + residual, x.shape[-1:], weight, bias)


def linear_gelu(x, w, b):
    return F.gelu(x @ w + b)


def swiglu(gate, up):
    return F.silu(gate) * up


def softmax_by_hand(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


# --8<-- [end:patterns]


def inputs(name, quick, device, g):
    def r(*shape, dtype=torch.bfloat16):
        if device.type == "cpu":
            dtype = torch.float32
        return torch.randn(*shape, generator=g, device=device, dtype=dtype)

    rows, width = (64, 256) if quick else (16384, 8192)
    if name == "pointwise chain":
        return (r(rows * width, dtype=torch.float32),)
    if name == "GELU":
        return (r(rows, width),)
    if name == "LayerNorm + residual":
        return r(rows, width), r(rows, width), r(width), r(width)
    if name == "linear + GELU":
        tokens, d = (64, 128) if quick else (8192, 4096)
        return r(tokens, d), r(d, 4 * d) / d**0.5, r(4 * d)
    if name == "SwiGLU":
        return r(rows, width), r(rows, width)
    if name == "softmax":
        return (r(rows, width),)
    b, h, s, d = (1, 2, 64, 32) if quick else (4, 16, 4096, 128)
    return r(b, h, s, d), r(b, h, s, d), r(b, h, s, d)


PATTERNS = {
    "pointwise chain": pointwise_chain,
    "GELU": gelu_tanh,
    "LayerNorm + residual": layernorm_residual,
    "linear + GELU": linear_gelu,
    "SwiGLU": swiglu,
    "softmax": softmax_by_hand,
    "attention": attention,
}


# --8<-- [start:predict]
def roofline_time(nbytes, flops, bandwidth, rate):
    """Seconds for one kernel: the slower of moving its bytes and doing
    its flops (bandwidth in bytes/s, rate in flop/s)."""
    return max(nbytes / bandwidth, flops / rate)


def predicted_speedup(kernels, fused_bytes, bandwidth, rate):
    eager = sum(roofline_time(b, f, bandwidth, rate) for _, b, f in kernels)
    flops = sum(f for _, _, f in kernels)
    return eager / roofline_time(fused_bytes, flops, bandwidth, rate)


# --8<-- [end:predict]


def ends(t: torch.Tensor, count: int = 2**20) -> torch.Tensor:
    """The first and last ``count`` elements of ``t`` (all, if fewer)."""
    flat = t.reshape(-1)
    if flat.numel() <= 2 * count:
        return flat
    return torch.cat([flat[:count], flat[-count:]])


def eager_kernels(call, ops, bandwidth, rate, calls=5, width=80):
    """Each GPU operation of one eager call, in order, with its median duration
    over ``calls`` calls; where the call ran one GPU operation per ATen operator
    the byte counter saw (``ops``), that operator and its roofline time beside it.

    An observation for the reader, not a check: a profiler that fails is noted.
    """
    def many():
        for _ in range(calls):
            call()

    try:
        ran = gpu_operations(many)
    except Exception as exc:  # noqa: BLE001
        return f"profiler failed: {type(exc).__name__}: {exc}"[:200]
    per, left = divmod(len(ran), calls)
    if left or not per or any(ran[c * per + i].name != ran[i].name
                              for c in range(calls) for i in range(per)):
        return f"{len(ran)} GPU operations in {calls} calls: not the same every call"
    lines = []
    for i in range(per):
        us = statistics.median(ran[c * per + i].duration_ns for c in range(calls)) / 1e3
        line = f"{us:.0f} us, {ran[i].name[:width]}"
        if per == len(ops):
            op, nbytes, flops = ops[i]
            roof = roofline_time(nbytes, flops, bandwidth, rate) * 1e6
            line = f"{op}: {us:.0f} us, roofline {roof:.0f} us ({us / roof:.2f}x), {ran[i].name[:width]}"
        lines.append(line)
    return lines


def metric_of(lab, case, metric):
    """A figure this run has kept (the paired speedup, say)."""
    for row in lab.rows():
        if row.case == case and metric in row.metrics:
            return row.metrics[metric]
    raise KeyError(f"{metric} of {case} was not kept")


def measure(lab) -> None:
    g = torch.Generator(device=lab.device).manual_seed(0)
    # The two roofs: a copy (bytes read + written) of 512 MiB, the size of
    # the pointwise chain's input, and a GEMM. Neither is timed here: each
    # runs in the rounds of the patterns below, so that the clocks it runs
    # at are those the patterns run at.
    n = 2**18 if lab.quick else 2**27
    src = torch.randn(n, generator=g, device=lab.device)
    dst = torch.empty_like(src)
    copy_bytes = 2 * src.numel() * src.element_size()
    m = 256 if lab.quick else 8192
    dt = torch.bfloat16 if lab.cuda else torch.float32
    a = torch.randn(m, m, generator=g, device=lab.device).to(dt)
    roofs = {"copy": lambda: dst.copy_(src), "gemm": lambda: a @ a}

    for name, fn in PATTERNS.items():
        args = inputs(name, lab.quick, lab.device, g)
        with Traffic() as traffic:
            expected = fn(*args)
        fused_bytes = min_bytes(fn, *args)
        torch._dynamo.reset()
        compiled = torch.compile(fn)
        start = time.perf_counter()
        out = compiled(*args)
        lab.synchronize()
        compile_s = time.perf_counter() - start
        # The first and last elements of the output (the masked tail of a
        # block is where a kernel goes wrong): copying all of it to the host
        # in float64 took a second a pattern, the same test on a sample.
        lab.check(name, ends(out), ends(expected).float(), tolerance=2e-2)
        del out, expected
        case = {"pattern": name}
        eager_bytes = sum(b for _, b, _ in traffic.kernels)
        flops = sum(f for _, _, f in traffic.kernels)
        lab.value(case=case, metric="eager_kernels",
                  value=len(traffic.kernels), unit="")
        lab.value(case=case, metric="eager_bytes", value=eager_bytes / 1e6,
                  unit="MB")
        lab.value(case=case, metric="fused_bytes", value=fused_bytes / 1e6,
                  unit="MB")
        lab.value(case=case, metric="compile_time", value=compile_s,
                  unit="s")
        # --8<-- [start:kernel_time]
        # Eager, compiled and the roofs in alternating rounds, each sample the
        # summed durations of the GPU operations of one call (the kernel
        # timer): the copy in every pattern's rounds, the GEMM where the
        # eager kernels do matrix products (without flops the rate enters no
        # roofline). The speedup is the median of the paired ratios eager /
        # compiled of one round.
        eager_call, compiled_call = lambda: fn(*args), lambda: compiled(*args)
        used = ["copy", "gemm"] if flops else ["copy"]
        times = lab.compare_rows(
            {"eager": eager_call, "compiled": compiled_call,
             **{roof: roofs[roof] for roof in used}},
            {"eager": (case, "eager_kernel_time"),
             "compiled": (case, "compiled_kernel_time"),
             **{roof: (case, f"{roof}_kernel_time") for roof in used}},
            baseline="eager", ratios={"compiled": (case, "speedup", 1.0)},
            timer="kernel")
        # --8<-- [end:kernel_time]
        bandwidth = copy_bytes / (times["copy"].median / 1e6)
        lab.value(case=case, metric="copy_bandwidth", value=bandwidth / 1e9,
                  unit="GB/s")
        rate = math.inf  # no flops: any rate gives the same roofline
        if flops:
            rate = 2 * m**3 / (times["gemm"].median / 1e6)
            lab.value(case=case, metric="gemm_rate", value=rate / 1e12,
                      unit="TFLOP/s")
        predicted = predicted_speedup(traffic.kernels, fused_bytes,
                                      bandwidth, rate)
        lab.value(case=case, metric="predicted_speedup", unit="x",
                  value=predicted)
        fused_t = times["compiled"]
        if lab.cuda:
            lab.value(case=case, metric="compiled_kernels",
                      value=ops_per_call(compiled_call), unit="")
        speedup = metric_of(lab, case, "speedup").median
        lab.value(case=case, metric="vs_prediction", unit="x",
                  value=speedup / predicted)
        achieved = fused_bytes / (fused_t.median / 1e6)
        lab.value(case=case, metric="fused_bandwidth",
                  value=achieved / 1e9, unit="GB/s")
        lab.value(case=case, metric="fraction_of_copy",
                  value=achieved / bandwidth, unit="x")
        if lab.cuda and name == "attention":
            # Where eager attention's time goes: each kernel beside the
            # roofline time of its operator, at the roofs of these rounds.
            lab.note("eager attention kernels",
                     eager_kernels(eager_call, traffic.kernels, bandwidth,
                                   rate))
        # The trap, kept apart: events around one compiled call also time
        # the host's guards and launcher while the GPU waits for them.
        one = lab.time(lambda: compiled(*args), case=case,
                       metric="compiled_one_call")
        lab.value(case=case, metric="one_call_vs_kernel", unit="x",
                  value=one.median / fused_t.median)
        del args
    del src, dst, a


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
