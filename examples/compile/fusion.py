"""Fusion: bytes an eager chain moves, bytes the fused kernel moves, speedups.

Each pattern is written as plain PyTorch ops. Run eagerly, every op is its own
kernel that reads its inputs from memory and writes its output back; the
byte counter below adds these up op by op. Compiled by Inductor, the chain
becomes as few kernels as it can, which ideally read the inputs once and
write the output once. With the copy bandwidth and the GEMM rate measured in
the same run, a roofline time per kernel gives the predicted speedup; the
measured speedup is eager time over compiled time.
"""

from __future__ import annotations

import math
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default,
           aten.baddbmm.default}


# --8<-- [start:counter]
class Traffic(TorchDispatchMode):
    """Count, op by op, the bytes each eager kernel reads and writes and
    the flops of the matrix products."""

    def __init__(self):
        super().__init__()
        self.kernels: list[tuple[str, int, int]] = []  # (op, bytes, flops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func in (aten.detach.default,):
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


def measure(lab) -> None:
    g = torch.Generator(device=lab.device).manual_seed(0)
    # The two roofs, measured now: a copy (bytes read + written) and a GEMM.
    n = 2**18 if lab.quick else 2**28
    src = torch.randn(n, generator=g, device=lab.device)
    dst = torch.empty_like(src)
    copy = lab.time(lambda: dst.copy_(src), case={"pattern": "copy"})
    bandwidth = 2 * 4 * n / (copy.median / 1e6)
    lab.value(case={"pattern": "copy"}, metric="bandwidth",
              value=bandwidth / 1e9, unit="GB/s")
    del src, dst
    m = 256 if lab.quick else 8192
    dt = torch.bfloat16 if lab.cuda else torch.float32
    a = torch.randn(m, m, generator=g, device=lab.device).to(dt)
    gemm = lab.time(lambda: a @ a, case={"pattern": "gemm"})
    rate = 2 * m**3 / (gemm.median / 1e6)
    lab.value(case={"pattern": "gemm"}, metric="rate", value=rate / 1e12,
              unit="TFLOP/s")
    del a

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
        lab.check(name, out, expected.float(), tolerance=2e-2)
        del out, expected
        case = {"pattern": name}
        eager_bytes = sum(b for _, b, _ in traffic.kernels)
        lab.value(case=case, metric="eager_kernels",
                  value=len(traffic.kernels), unit="")
        lab.value(case=case, metric="eager_bytes", value=eager_bytes / 1e6,
                  unit="MB")
        lab.value(case=case, metric="fused_bytes", value=fused_bytes / 1e6,
                  unit="MB")
        lab.value(case=case, metric="predicted_speedup", unit="x",
                  value=predicted_speedup(traffic.kernels, fused_bytes,
                                          bandwidth, rate))
        lab.value(case=case, metric="compile_time", value=compile_s,
                  unit="s")
        # Ten calls back to back per sample: the GPU's time per call, with the
        # guards and launcher of one compiled call hidden behind the kernels
        # (events around a single call would time the host, Chapter 8).
        eager_t = lab.time(lambda: fn(*args), case=case, metric="eager",
                           inner=10)
        fused_t = lab.time(lambda: compiled(*args), case=case,
                           metric="compiled", inner=10)
        lab.value(case=case, metric="speedup", unit="x",
                  value=eager_t.median / fused_t.median)
        achieved = fused_bytes / (fused_t.median / 1e6)
        lab.value(case=case, metric="fused_bandwidth",
                  value=achieved / 1e9, unit="GB/s")
        lab.value(case=case, metric="fraction_of_copy",
                  value=achieved / bandwidth, unit="x")
        del args


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
