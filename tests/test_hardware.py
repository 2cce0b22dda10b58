"""What a topic needs of the machine beyond memory (examples/lab/hardware.py), decided on CPU with the GPU's answers substituted."""
from __future__ import annotations

import pytest
import torch

from examples.lab import hardware
from examples.lab.registry import measured_topics

AMPERE, ADA, HOPPER, BLACKWELL = (8, 6), (8, 9), (9, 0), (10, 0)


@pytest.mark.parametrize("topic", ["ecosystem.fp8_gemm", "ecosystem.fp8_training"])
def test_fp8_topics_skip_below_ada_in_one_line_naming_the_feature_and_both_capabilities(topic):
    line = hardware.missing_feature(topic, AMPERE, "NVIDIA GeForce RTX 3090")
    assert line == ("needs FP8 tensor cores (torch._scaled_mm), compute capability 8.9 or later; "
                    "NVIDIA GeForce RTX 3090 is 8.6: skipped (its page shows the book's own runs)")
    assert "\n" not in line
    for capability in (ADA, HOPPER, BLACKWELL):
        assert hardware.missing_feature(topic, capability, "a newer GPU") is None


def test_wgmma_needs_hopper_and_a_topic_without_a_feature_runs_anywhere():
    line = hardware.missing_feature("stack.mma_paths", ADA, "NVIDIA L4")
    assert line.startswith("needs Hopper's wgmma instructions, compute capability 9.0 or later; NVIDIA L4 is 8.9")
    assert hardware.missing_feature("stack.mma_paths", HOPPER, "NVIDIA H100 80GB HBM3") is None
    assert hardware.missing_feature("stack.roofline", (7, 0), "Tesla V100") is None


def test_every_topic_the_tables_name_is_a_measured_topic():
    topics = set(measured_topics())
    assert set(hardware.FEATURES) <= topics and set(hardware.TOOLS) <= topics


def test_a_missing_ncu_is_one_line_and_a_found_one_is_none(monkeypatch):
    from examples.measuring import ncu_capture

    def absent():
        raise RuntimeError("Nsight Compute (ncu) is not installed on this machine")

    monkeypatch.setattr(ncu_capture, "find_ncu", absent)
    assert hardware.missing_tool("measuring.ncu_capture") == (
        "Nsight Compute (ncu) is not installed on this machine: install it, or put ncu on the PATH")
    monkeypatch.setattr(ncu_capture, "find_ncu", lambda: "/opt/nvidia/nsight-compute/2025.3/ncu")
    assert hardware.missing_tool("measuring.ncu_capture") is None
    assert hardware.missing_tool("stack.roofline") is None


def test_the_gpu_is_asked_its_capability_and_the_cpu_nothing(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or AMPERE)
    gpu = torch.device("cuda", 0)
    line = hardware.missing("ecosystem.fp8_gemm", gpu, "NVIDIA RTX A2000")
    assert line.startswith("needs FP8 tensor cores") and "NVIDIA RTX A2000 is 8.6" in line and asked == [gpu]
    assert hardware.missing("stack.roofline", gpu, "NVIDIA RTX A2000") is None
    assert hardware.missing("ecosystem.fp8_gemm", torch.device("cpu"), "CPU") is None
    assert asked == [gpu, gpu]


ROCM = ("import sys, torch; torch.version.hip = '6.2.41133'; torch.cuda.is_available = lambda: True; "
        "from examples.lab.__main__ import main; sys.exit(main(sys.argv[1:]))")


def test_a_rocm_torch_is_refused_in_one_line_that_says_what_applies(cli, tmp_path):
    proc = cli.run("-c", ROCM, "run", "--quick", "dispatch.dispatch_keys", "--out", tmp_path / "out")
    line = cli.one_line_error(proc, status=2)
    assert "ROCm build (HIP 6.2.41133)" in line and "--device cpu" in line and "torch.compile" in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.json"))
    # On its CPU the same torch runs the topic as any other.
    proc = cli.run("-c", ROCM, "run", "--quick", "--device", "cpu", "dispatch.dispatch_keys", "--out", tmp_path / "cpu")
    assert proc.returncode == 0, cli.explain(proc)
    assert list((tmp_path / "cpu").rglob("dispatch.dispatch_keys/*.json"))
