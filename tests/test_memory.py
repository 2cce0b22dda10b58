"""The runner's GPU memory table: made from its own peak lines, read back, bad input in one line."""

from __future__ import annotations

import json

from examples.lab import memory


def test_the_table_made_from_peak_lines_reads_back_as_needs(tmp_path):
    peaks = tmp_path / "peaks.jsonl"
    peaks.write_text("\n".join(json.dumps(line) for line in [
        {"topic": "capstone.decode", "peak_bytes": 30.01 * 2**30, "gpu": "NVIDIA H100 80GB HBM3"},
        {"topic": "capstone.decode", "peak_bytes": 31.2 * 2**30, "gpu": "NVIDIA H200"},
        {"topic": "stack.roofline", "peak_bytes": 2.0 * 2**30, "gpu": "NVIDIA H200"}]) + "\n")
    out = tmp_path / "needs.json"
    assert memory.main([str(peaks), "--out", str(out)]) == 0
    assert memory.needs(out) == {"capstone.decode": 31.2, "stack.roofline": 2.0}  # the largest run, in tenths
    assert memory.needs(tmp_path / "absent.json") == {}


def test_a_broken_peaks_file_is_one_line_and_status_2(tmp_path, capsys):
    bad = tmp_path / "peaks.jsonl"
    bad.write_text("{not json\n")
    assert memory.main([str(bad), "--out", str(tmp_path / "needs.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m examples.lab.memory: error: ") and "\n" not in err
    assert not (tmp_path / "needs.json").exists()


def test_every_topic_in_the_committed_table_is_a_topic():
    from examples.lab.registry import measured_topics

    from examples.lab.__main__ import MODEL_CHOICES

    rows = [key.split("@") for key in memory.needs()]  # Chapter 9's rows: topic@model
    assert {row[0] for row in rows} <= set(measured_topics())
    assert {row[1] for row in rows if len(row) == 2} <= set(MODEL_CHOICES[1:])


def test_a_memory_limit_counts_what_the_card_holds_beside_the_allocator(monkeypatch):
    import pytest
    import torch

    capped = []
    monkeypatch.setattr(memory, "_usage", lambda device: (70 * 2**30, 80 * 2**30, 2 * 2**30))  # free, total, held
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: capped.append((f, i)))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 0)
    memory.cap_allocator(torch.device("cuda"), 24)
    assert capped == [((24 - 8) / 80, 0)]  # in use beside the allocator: 80 - 70 - 2 = 8 GiB
    assert memory.available(torch.device("cuda"), 24) == 16 * 2**30
    # Tensors an earlier topic left alive are no room; a set-up kept for this topic is its room.
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 1.5 * 2**30)
    assert memory.available(torch.device("cuda"), 24) == 14.5 * 2**30
    assert memory.available(torch.device("cuda")) == 70.5 * 2**30  # 70 free + 0.5 cached
    assert memory.available(torch.device("cuda"), 24, live_is_room=True) == 16 * 2**30
    with pytest.raises(ValueError, match=r"^--memory-limit 80: this GPU has only 80\.0 GiB$"):
        memory.cap_allocator(torch.device("cuda"), 80)
    with pytest.raises(ValueError, match=r"^--memory-limit 8: 8\.0 GiB of this GPU is in use already$"):
        memory.cap_allocator(torch.device("cuda"), 8)
    assert len(capped) == 1


def test_what_a_topic_may_still_allocate_stays_within_the_cap(monkeypatch):
    """Chapter 9 asks before it builds a second set of weights: its allocator's cached
    blocks plus the GPU's free memory, but never past --memory-limit's cap."""
    import torch

    gib = 2**30
    monkeypatch.setattr(memory, "_usage", lambda device: (100 * gib, 141 * gib, 20 * gib))  # free, total, reserved
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 18 * gib)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device: 1.0)
    assert memory.allocatable(torch.device("cuda")) == 102 * gib  # 2 cached + 100 free
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device: 23 / 141)
    assert memory.allocatable(torch.device("cuda")) == 5 * gib  # 2 cached + (23 - 20) under the cap


def test_a_peak_is_the_larger_of_the_watched_and_the_allocator_counted(monkeypatch):
    """The watcher reads NVML every few milliseconds and can miss a brief block; the
    allocator's own peak catches it. Held blocks count as in use all along."""
    import torch

    gib = 2**30
    reserved = {0: 2 * gib, 1: 0}
    peaks = {0: 9 * gib, 1: 1 * gib}  # what max_memory_reserved answers at the end
    resets = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: reserved[i])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", resets.append)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda i: peaks[i])
    for watched, expected in (([5 * gib, 0], 9 * gib), ([8 * gib, 3 * gib], 10 * gib)):
        answers = iter(["ok", json.dumps(watched)])
        monkeypatch.setattr(memory.PeakWatch, "_ask", classmethod(lambda cls, line: next(answers)))
        with memory.PeakWatch() as watch:
            pass
        assert watch.peak == expected  # max(watched + held, counted)
    assert resets == [0, 1, 0, 1]


def test_between_topics_the_runner_frees_the_compiled_graphs_pools(monkeypatch):
    """torch.compile's "reduce-overhead" graphs keep a memory pool for the process: the runner
    resets them before each topic, then empties the allocator's cache."""
    import torch
    import torch._inductor.cudagraph_trees as trees

    from examples.lab import __main__ as runner

    done = []
    monkeypatch.setattr(trees, "reset_cudagraph_trees", lambda: done.append("graphs"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: done.append("cache"))
    runner._free_memory(torch.device("cuda"))
    assert done == ["graphs", "cache"]
