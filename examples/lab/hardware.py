"""What a topic needs of the machine beyond memory and GPU count: an architecture feature or a tool.

A reader's GPU may be an Ampere laptop card or a Hopper board. A topic that needs a feature its
GPU lacks (FP8 tensor cores from compute capability 8.9, Hopper's ``wgmma`` at 9.0) or a tool the
machine lacks (Nsight Compute) is skipped by the runner before it starts, in one line that names
the feature, the capability it needs and the one found, instead of failing after minutes of set-up
in a compiler's or a library's words. A ROCm build of torch answers ``torch.cuda.is_available()``
too; the runner refuses to measure on it, in one line that says what of the book applies there.

The table is the runner's bookkeeping, not measuring code: a change here stales no record (the
topics themselves still refuse what they cannot do, for a run that is not the runner's).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    """An architecture feature, in the book's words, and the compute capability that brings it."""

    name: str
    capability: tuple[int, int]


#: FP8 matrix products (``torch._scaled_mm``): Ada (8.9) and Hopper (9.0) tensor cores.
FP8 = Feature("FP8 tensor cores (torch._scaled_mm)", (8, 9))
#: Hopper's asynchronous warpgroup MMA, which stack.mma_paths sets beside mma.sync.
WGMMA = Feature("Hopper's wgmma instructions", (9, 0))

#: Topic -> the architecture feature it cannot run without.
FEATURES: dict[str, Feature] = {
    "ecosystem.fp8_gemm": FP8,
    "ecosystem.fp8_training": FP8,
    "stack.mma_paths": WGMMA,
}


def _ncu() -> str | None:
    from examples.measuring.ncu_capture import find_ncu  # the topic's own search, not a copy of it

    try:
        find_ncu()
    except RuntimeError as exc:
        return f"{exc}: install it, or put ncu on the PATH"
    return None


#: Topic -> a check of a tool it needs: None where the tool is there, else why not, in one line.
TOOLS: dict[str, Callable[[], str | None]] = {"measuring.ncu_capture": _ncu, "measuring.ncu_sections": _ncu}


def capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def missing_feature(topic: str, capability: tuple[int, int], gpu: str) -> str | None:
    """Why ``topic`` cannot run on a GPU of ``capability`` (named ``gpu``), in one line; None if it can."""
    feature = FEATURES.get(topic)
    if feature is None or tuple(capability) >= feature.capability:
        return None
    return (f"needs {feature.name}, compute capability {capability_text(feature.capability)} or later; "
            f"{gpu} is {capability_text(capability)}: skipped (its page shows the book's own runs)")


def missing_tool(topic: str) -> str | None:
    """Why ``topic`` cannot run for want of a tool on this machine, in one line; None if it can."""
    check = TOOLS.get(topic)
    return check() if check else None


def missing(topic: str, device, gpu: str) -> str | None:
    """Why this GPU (an architecture feature) or machine (a tool) cannot run ``topic``, in one
    line; None if it can, and on the CPU, where no topic of these tables runs its GPU path."""
    if device.type != "cuda":
        return None
    import torch

    return missing_feature(topic, torch.cuda.get_device_capability(device), gpu) or missing_tool(topic)


def rocm_refusal(hip_version: str) -> str:
    """The one line a ROCm build of torch gets from ``lab run`` on its GPU."""
    return (f"this torch is a ROCm build (HIP {hip_version}): the lab measures NVIDIA GPUs (CUDA, cuBLAS, "
            "CUDA Graphs, NCCL, Nsight), so its GPU figures would not be the book's; on AMD the chapters on the "
            "dispatcher, torch.compile and the models (roofline, ring, speed of light) apply as they stand, and "
            "`--device cpu` runs every topic's CPU path")
