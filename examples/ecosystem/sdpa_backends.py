"""The backends of scaled_dot_product_attention, timed side by side.

``F.scaled_dot_product_attention`` dispatches to one of several kernels:
FlashAttention, memory-efficient attention (xFormers' CUTLASS kernels),
cuDNN's fused attention, or the plain math of matmul, softmax, matmul. Each
is forced in turn with ``sdpa_kernel`` and checked against float64 math; a
backend that refuses the inputs says why. The profiler then names the kernel
the dispatcher chose when nothing is forced.
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from examples.lab.kernels import kernel_names

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "memory-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cuDNN": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}

#: Substrings of kernel names, in the order they are tried (cuDNN first:
#: its fused attention kernels have "flash" in their names too).
KERNEL_NAMES = {
    "cuDNN": ("cudnn",),
    "flash": ("flash",),
    "memory-efficient": ("fmha", "efficient", "mem_eff"),
}


def dispatched(q, k, v, **kw) -> str:
    """Which backend the unforced call ran, from its kernels' names."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA if q.is_cuda else ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        F.scaled_dot_product_attention(q, k, v, **kw)
    names = " ".join(e.key for e in prof.key_averages()).lower()
    for backend, keys in KERNEL_NAMES.items():
        if any(key in names for key in keys):
            return backend
    return "math"


def measure(lab) -> None:
    if lab.quick:
        shapes = {"bf16, no mask": (1, 2, 256, 64, torch.float32, False)}
    else:
        shapes = {
            "bf16, no mask": (4, 16, 4096, 128, torch.bfloat16, False),
            "bf16, causal": (4, 16, 4096, 128, torch.bfloat16, True),
            "bf16, boolean mask": (4, 16, 4096, 128, torch.bfloat16, "mask"),
            "fp32, no mask": (4, 16, 4096, 128, torch.float32, False),
        }
    if not lab.cuda:
        shapes = {k.replace("bf16", "fp32"): (*v[:4], torch.float32, v[5])
                  for k, v in shapes.items()}
    for label, (b, h, n, d, dtype, mask) in shapes.items():
        case_of = {"inputs": label, "seq": n, "head_dim": d}
        # --8<-- [start:backends]
        q, k, v = (torch.randn(b, h, n, d, device=lab.device, dtype=dtype)
                   for _ in range(3))
        kw = {"is_causal": True} if mask is True else {}
        if mask == "mask":
            kw["attn_mask"] = torch.rand(n, n, device=lab.device) > 0.1
        # The float64 reference runs where the inputs are: on a GPU it takes
        # milliseconds, on the host's cores tens of seconds.
        expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
        for name, backend in BACKENDS.items():
            caught = warnings.catch_warnings(record=True)
            with sdpa_kernel(backend), caught as w:
                warnings.simplefilter("always")  # reasons come as warnings
                try:
                    out = F.scaled_dot_product_attention(q, k, v, **kw)
                except RuntimeError as exc:  # this backend cannot run these
                    lab.note(f"{label}: {name} refused", _why(exc, w))
                    continue
                # --8<-- [end:backends]
                tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
                lab.check(f"{label}: {name}", out, expected, tolerance=tol)
                t = lab.time(lambda: F.scaled_dot_product_attention(q, k, v, **kw),
                             case={**case_of, "backend": name}, metric="time",
                             unit="ms")
                _rate(lab, {**case_of, "backend": name}, t.median, b, h, n, d, mask)
        chosen = dispatched(q, k, v, **kw)
        lab.note(f"{label}: dispatcher chose", chosen)
        if lab.cuda:
            lab.note(f"{label}: kernels of the default call",
                     kernel_names(lambda: F.scaled_dot_product_attention(q, k, v, **kw)))
        t = lab.time(lambda: F.scaled_dot_product_attention(q, k, v, **kw),
                     case={**case_of, "backend": f"default ({chosen})"},
                     metric="time", unit="ms")
        _rate(lab, {**case_of, "backend": f"default ({chosen})"}, t.median, b, h, n, d, mask)
    lab.note("torch", torch.__version__)
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    if order is not None:  # the order the dispatcher tries the backends in
        lab.note("priority order", [SDPBackend(int(i)).name for i in order()])


# --8<-- [start:rate]
def attention_flops(b: int, h: int, n: int, d: int, causal: bool) -> float:
    """Q K^T and P V, 2 n^2 d FLOPs each per head; causal attention needs half
    (the convention of the FlashAttention papers, which the rate is compared with)."""
    return 4 * b * h * n * n * d / (2 if causal else 1)
# --8<-- [end:rate]


def _rate(lab, case, ms: float, b, h, n, d, mask) -> None:
    lab.value(case=case, metric="rate", unit="TFLOP/s",
              value=attention_flops(b, h, n, d, mask is True) / (ms * 1e-3) / 1e12)


def _why(exc: BaseException, caught) -> str:
    """The backend's own reason (a warning) rather than the generic error."""
    reasons = []
    for w in caught:
        text = str(w.message).split("(Triggered internally")[0].strip()
        if text and "viable backend" not in text and not text.endswith(":"):
            reasons.append(text.splitlines()[0][:200])
    return "; ".join(dict.fromkeys(reasons)) or str(exc).splitlines()[0]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
