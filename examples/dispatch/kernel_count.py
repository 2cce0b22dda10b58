"""How many kernels does one transformer layer launch per generated token?

A Llama-style decoder layer (RMSNorm, attention with rotary embeddings and a
KV cache, a SwiGLU MLP) written in plain PyTorch runs one decode step: one
new token at batch size 1. The profiler counts the CUDA kernels of the step
and the host's waits for the GPU during it; the op logger counts ATen ops; all
are divided by the number of layers. On a CPU only the ATen ops are counted.

What a ``TorchDispatchMode`` sees depends on the grad mode, and the two counts
say why. The mode runs at the ``Python`` key, below ``Autograd``. Under
``no_grad`` the tensors' ``Autograd`` key is still visited, and a
CompositeImplicitAutograd op (``linear``, ``rms_norm``, SDPA) decomposes
there, above the mode: the mode sees the ops that reach a backend kernel.
``inference_mode`` takes ``Autograd`` and ``ADInplaceOrView`` out of the
thread's keys, so the first kernel reached is the mode's: it sees each call as
written, and the composite decomposes below it, unseen.
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


#: Runtime calls that block the host until the GPU has done something.
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "cudaMemcpy")


def count_kernels(fn) -> tuple[int, int]:
    """The GPU operations ``fn`` queues, and the host's waits for the GPU in it."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("the step"):
            fn()
        torch.cuda.synchronize()  # so the last kernels are recorded; outside "the step"
    events = prof.events()
    # The annotation is mirrored on the GPU's timeline: not an operation.
    kernels = sum(1 for e in events if e.device_type == DeviceType.CUDA
                  and e.name != "the step")
    step = next(e for e in events if e.name == "the step"
                and e.device_type == DeviceType.CPU)
    # CUPTI may suffix runtime calls with a version: cudaMemcpy_v3020
    waits = sum(1 for e in events if e.device_type == DeviceType.CPU
                and e.name.split("_v")[0] in WAITS
                and step.time_range.start <= e.time_range.start <= step.time_range.end)
    return kernels, waits


def measure(lab) -> None:
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    hidden, heads, context, layers = (256, 4, 64, 2) if lab.quick else (
        2048, 16, 1024, 4)
    model = [DecoderLayer(hidden, heads, context, lab.device, dtype)
             for _ in range(layers)]
    x = torch.randn(1, 1, hidden, device=lab.device, dtype=dtype)
    pos = context // 2

    def forward():
        h = x
        for layer in model:
            h = layer(h, pos)
        return h

    step = torch.inference_mode()(forward)  # how a decode loop runs it

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
    # --8<-- [start:counted]
    # The same step logged in both grad modes (see the docstring): under
    # no_grad the ops that reach a backend kernel, under inference_mode the
    # calls as written, composites whole.
    counted = {"no_grad": torch.no_grad()(forward), "inference_mode": step}
    for grad_mode, fn in counted.items():
        ops = log_ops(fn)
        lab.value(case={**case, "grad_mode": grad_mode},
                  metric="aten_ops_per_layer", value=len(ops) / layers, unit="")
        # --8<-- [end:counted]
        names: dict[str, int] = {}
        for name in ops[: len(ops) // layers]:
            names[name] = names.get(name, 0) + 1
        lab.note(f"ATen ops of one layer, seen by a dispatch mode under {grad_mode}",
                 ", ".join(f"{n} x{c}" for n, c in names.items()))
    if lab.cuda:
        kernels, waits = count_kernels(step)
        lab.value(case=case, metric="kernels_per_layer", value=kernels / layers,
                  unit="")
        # Eager is not "dispatch, kernel, sync" per op: the launches are
        # asynchronous, and one step of them makes the host wait this often.
        lab.value(case=case, metric="host_waits_per_step", value=waits, unit="")
    lab.time(step, case=case, metric="step", unit="us")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
