"""The backends of scaled_dot_product_attention, timed side by side.

``F.scaled_dot_product_attention`` dispatches to one of several kernels:
FlashAttention, memory-efficient attention (xFormers' CUTLASS kernels),
cuDNN's fused attention, or the plain math of matmul, softmax, matmul. Each
is forced in turn with ``sdpa_kernel`` and checked against float64 math; a
backend that refuses the inputs says why. The profiler then names the kernel
the dispatcher chose when nothing is forced. The backends that ran and the
unforced call are then timed in interleaved rounds (``lab.compare``); each
forced backend's ``speedup`` is the unforced call's sample over its own. The
math backend, checked on every input, is timed on the first (``TIMED_MATH``).
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


def backend_of(kernels: str) -> str:
    """Which backend ran, from the names of the kernels (or ops) it launched."""
    names = kernels.lower()
    for backend, keys in KERNEL_NAMES.items():
        if any(key in names for key in keys):
            return backend
    return "math"


def dispatched(q, k, v, **kw) -> str:
    """Which backend the unforced call ran, from its ops' names (on the CPU)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA if q.is_cuda else ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        F.scaled_dot_product_attention(q, k, v, **kw)
    return backend_of(" ".join(e.key for e in prof.key_averages()))


#: The public switch of each backend.
SWITCHES = {
    "flash": torch.backends.cuda.enable_flash_sdp,
    "memory-efficient": torch.backends.cuda.enable_mem_efficient_sdp,
    "cuDNN": torch.backends.cuda.enable_cudnn_sdp,
    "math": torch.backends.cuda.enable_math_sdp,
}


def with_backends(allowed, q, k, v, kw):
    """One call of the attention with only ``allowed`` backends switched on.

    The timed variants switch the backends themselves, four flag setters, the
    same few microseconds of host work for each, the unforced one included;
    ``sdpa_kernel``, a context manager that reads and restores every flag,
    costs tens of microseconds on the host, too much to sit inside a 1 ms
    sample of one variant and not of another.
    """
    switches = [(switch, name in allowed) for name, switch in SWITCHES.items()]

    def call():
        for switch, on in switches:
            switch(on)
        return F.scaled_dot_product_attention(q, k, v, **kw)
    return call


#: Warm-up rounds before the interleaved samples: every backend has already
#: run once (its check), so these only bring the clocks up.
WARMUP = 5

#: The inputs on which the math backend is timed as well as checked. Its
#: 20-28 ms a call (the whole score matrix, written and read back) is most
#: of every round it is in: on the other three inputs, whose rows no figure
#: of the page quotes, its 65 rounds would be five of the topic's seconds to
#: say again that the unfused path is an order of magnitude behind.
TIMED_MATH = ("bf16, no mask",)


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
    math_timed = {label for label in shapes if label in TIMED_MATH}
    if not lab.cuda:
        shapes = {k.replace("bf16", "fp32"): (*v[:4], torch.float32, v[5])
                  for k, v in shapes.items()}
        math_timed = {label.replace("bf16", "fp32") for label in math_timed}
    saved = {name: flag() for name, flag in (
        ("flash", torch.backends.cuda.flash_sdp_enabled),
        ("memory-efficient", torch.backends.cuda.mem_efficient_sdp_enabled),
        ("cuDNN", torch.backends.cuda.cudnn_sdp_enabled),
        ("math", torch.backends.cuda.math_sdp_enabled))}
    try:
        for label, shape in shapes.items():
            measure_inputs(lab, label, *shape, time_math=label in math_timed)
    finally:
        for name, on in saved.items():
            SWITCHES[name](on)
    lab.note("torch", torch.__version__)
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    if order is not None:  # the order the dispatcher tries the backends in
        lab.note("priority order", [SDPBackend(int(i)).name for i in order()])


def measure_inputs(lab, label, b, h, n, d, dtype, mask, time_math=True) -> None:
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
    working = []
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
        if expected.is_cuda:  # one copy to the host for all the checks
            expected = expected.cpu()
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
        lab.check(f"{label}: {name}", out, expected, tolerance=tol)
        working.append(name)
    variants = {name: with_backends({name}, q, k, v, kw) for name in working
                if name != "math" or time_math}
    default = with_backends(set(BACKENDS), q, k, v, kw)
    if lab.cuda:  # one profiler session: the kernels, and the backend they belong to
        kernels = kernel_names(default)
        chosen = (backend_of(" ".join(kernels)) if isinstance(kernels, list)
                  else dispatched(q, k, v, **kw))
        lab.note(f"{label}: kernels of the default call", kernels)
    else:
        chosen = dispatched(q, k, v, **kw)
    lab.note(f"{label}: dispatcher chose", chosen)
    variants[f"default ({chosen})"] = default
    # Interleaved rounds; each forced backend's ``speedup`` is the unforced
    # call's sample over its own, in the same round.
    times = lab.compare(variants, case=case_of, key="backend", metric="time",
                        unit="ms", baseline=f"default ({chosen})",
                        warmup=WARMUP)
    # The last variant timed left only its own backend on; the next inputs'
    # float64 reference needs the dispatcher's full choice back.
    for switch in SWITCHES.values():
        switch(True)
    for name, t in times.items():
        _rate(lab, {**case_of, "backend": name}, t.median, b, h, n, d, mask)


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
