"""How many kernels does one transformer layer launch per generated token?

A Llama-style decoder layer (RMSNorm, attention with rotary embeddings and a
KV cache, a SwiGLU MLP) written in plain PyTorch runs one decode step: one
new token at batch size 1. The profiler counts the CUDA kernels of the step
and the op logger counts the ATen ops that reached a backend; both are divided
by the number of layers. On a CPU only the ATen ops are counted.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from examples.dispatch.op_logger import log_ops


# --8<-- [start:layer]
class DecoderLayer(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, context: int, device, dtype):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.heads, self.dim = heads, hidden // heads
        self.norm1 = torch.nn.RMSNorm(hidden, **kw)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False, **kw)
        self.out = torch.nn.Linear(hidden, hidden, bias=False, **kw)
        self.norm2 = torch.nn.RMSNorm(hidden, **kw)
        self.gate_up = torch.nn.Linear(hidden, 8 * hidden, bias=False, **kw)
        self.down = torch.nn.Linear(4 * hidden, hidden, bias=False, **kw)
        shape = (1, heads, context, self.dim)
        self.k_cache = torch.randn(shape, **kw)
        self.v_cache = torch.randn(shape, **kw)

    def rotate(self, t, pos: int):  # rotary position embedding
        half = self.dim // 2
        freq = 10000.0 ** (-torch.arange(half, device=t.device) / half)
        angle = pos * freq
        cos, sin = angle.cos().to(t.dtype), angle.sin().to(t.dtype)
        a, b = t[..., :half], t[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, x, pos: int):  # x: (1, 1, hidden), one token
        q, k, v = self.qkv(self.norm1(x)).view(
            1, 1, 3, self.heads, self.dim).unbind(2)
        q, k = self.rotate(q, pos), self.rotate(k, pos)
        self.k_cache[:, :, pos] = k[:, 0]  # append to the KV cache
        self.v_cache[:, :, pos] = v[:, 0]
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), self.k_cache[:, :, : pos + 1],
            self.v_cache[:, :, : pos + 1])
        x = x + self.out(attn.transpose(1, 2).reshape(x.shape))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


# --8<-- [end:layer]


def count_kernels(fn) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    hidden, heads, context, layers = (256, 4, 64, 2) if lab.quick else (
        2048, 16, 1024, 4)
    model = [DecoderLayer(hidden, heads, context, lab.device, dtype)
             for _ in range(layers)]
    x = torch.randn(1, 1, hidden, device=lab.device, dtype=dtype)
    pos = context // 2

    @torch.inference_mode()
    def step():
        h = x
        for layer in model:
            h = layer(h, pos)
        return h

    # Correct first: the cached attention equals attention over the prefix.
    with torch.inference_mode():
        layer = model[0]
        q = torch.randn(1, heads, 1, hidden // heads, device=lab.device,
                        dtype=dtype)
        got = F.scaled_dot_product_attention(
            q, layer.k_cache[:, :, : pos + 1], layer.v_cache[:, :, : pos + 1])
        kk = layer.k_cache[:, :, : pos + 1].double()
        w = torch.softmax(q.double() @ kk.transpose(-1, -2)
                          / (hidden // heads) ** 0.5, dim=-1)
        lab.check("attention over the cache", got,
                  w @ layer.v_cache[:, :, : pos + 1].double(), tolerance=2e-2)
    step()
    lab.synchronize()
    case = {"hidden": hidden, "layers": layers}
    ops = log_ops(step)
    lab.value(case=case, metric="aten_ops_per_layer", value=len(ops) / layers,
              unit="")
    if lab.cuda:
        lab.value(case=case, metric="kernels_per_layer",
                  value=count_kernels(step) / layers, unit="")
    names: dict[str, int] = {}
    for name in ops[: len(ops) // layers]:
        names[name] = names.get(name, 0) + 1
    lab.note("ATen ops of one layer",
             ", ".join(f"{n} x{c}" for n, c in names.items()))
    lab.time(step, case=case, metric="step", unit="us")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
