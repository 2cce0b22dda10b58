"""Inside PyTorch's caching allocator: size classes, segments, fragmentation, streams.

Every figure is read from the allocator itself (``torch.cuda.memory_stats``,
``torch.cuda.memory_snapshot``, ``torch.cuda.memory._record_memory_history``),
not timed: exact bytes and counts, the same in every run of one PyTorch.

* **Rounding and pools**: each request's block and the segment it was cut
  from, against the rule computed here from the constants of
  ``c10/cuda/CUDACachingAllocator.cpp`` (:func:`predicted_block`,
  :func:`predicted_segment`).
* **A growing batch**: eight tensors of 30 MiB, freed, then eight of 32 MiB
  (the case the source's note on expandable segments describes): what the
  cache holds that the new requests cannot use, with the default segments and
  with ``expandable_segments:True``.
* **Streams**: a block freed on one stream is not handed to another, and a
  block another stream still reads is handed out again at once unless
  ``record_stream`` says so.

The allocator's settings are read once, when it starts, and the lab runs many
topics in one process whose cache holds their leftovers; so every part runs in
a fresh child process (as ``dispatch.allocator`` does for its uncached way),
one with the default settings and one with expandable segments, started
together. The children cost a few seconds, most of it importing torch, and
hold under 1 GiB of GPU memory each.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REQUIRES_CUDA = True

MiB = 1 << 20
# --8<-- [start:rule]
# The constants of c10/cuda/CUDACachingAllocator.cpp (kLargeBuffer sits in the same
# file, before the others; c10/core/AllocatorConfig.h repeats most of them).
kMinBlockSize = 512          # every block is a multiple of 512 B
kSmallSize = 1 * MiB         # requests up to this size go to the small pool
kSmallBuffer = 2 * MiB       # ... whose segments are 2 MiB
kLargeBuffer = 20 * MiB      # larger requests under kMinLargeAlloc share a 20 MiB segment
kMinLargeAlloc = 10 * MiB    # from here up, a segment of the request's own size
kRoundLarge = 2 * MiB        # ... rounded up to 2 MiB


def predicted_block(request: int) -> int:
    """The block a request gets (``round_size``, with no ``roundup_power2_divisions`` set)."""
    return max(kMinBlockSize, -(-request // kMinBlockSize) * kMinBlockSize)


def predicted_segment(request: int) -> int:
    """The segment cut for it when no cached block fits (``get_allocation_size``)."""
    if request <= kSmallSize:
        return kSmallBuffer
    if request < kMinLargeAlloc:
        return kLargeBuffer
    return -(-request // kRoundLarge) * kRoundLarge
# --8<-- [end:rule]


#: Requests in bytes, each named as a reader writes it.
REQUESTS = {"1 B": 1, "511 B": 511, "513 B": 513, "1 MiB": MiB,
            "1 MiB + 1 B": MiB + 1, "10 MiB + 1 B": 10 * MiB + 1}
#: The growing batch: COUNT tensors of BEFORE MiB, freed, then COUNT of AFTER MiB.
COUNT, BEFORE, AFTER = 8, 30, 32
#: The streams part: a 64 MiB tensor (its own segment), and how long the side stream
#: sleeps before it reads it (GPU cycles: some 20 ms at 2 GHz, thousands of times the
#: host's few microseconds to free the tensor and fill another).
STREAM_MiB, SLEEP_CYCLES = 64, 40_000_000
#: The two children: their name in the records, and their PYTORCH_CUDA_ALLOC_CONF.
ALLOCATORS = {"default": None, "expandable segments": "expandable_segments:True"}


# -- the children ------------------------------------------------------------------------

def _segments() -> list[dict]:
    return torch.cuda.memory_snapshot()


def _block_at(address: int) -> tuple[dict, dict]:
    """The block that starts at ``address`` and the segment that holds it."""
    for segment in _segments():
        for block in segment["blocks"]:
            if block["address"] == address:
                return block, segment
    raise RuntimeError(f"no block of the snapshot starts at {address:#x}")


def _rounding() -> dict:
    """Each request alone, from an emptied cache: its block and its segment."""
    found = {}
    for name, request in REQUESTS.items():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = {s["address"] for s in _segments()}
        x = torch.empty(request, dtype=torch.uint8, device="cuda")
        block, segment = _block_at(x.data_ptr())
        found[name] = {"request": request, "block": block["size"], "segment": segment["total_size"],
                       "pool": segment["segment_type"], "new_segment": segment["address"] not in before}
        del x
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return found


def _new_memory_events(trace_length: int) -> tuple[int, int]:
    """Segments the allocator got from CUDA since the trace was ``trace_length`` long
    (``segment_alloc``: a cudaMalloc; ``segment_map``: pages mapped into an expandable
    segment), and the trace's length now."""
    trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
    fresh = trace[trace_length:]
    return sum(e["action"] in ("segment_alloc", "segment_map") for e in fresh), len(trace)


def _state(trace_length: int) -> tuple[dict, int]:
    stats = torch.cuda.memory_stats()
    events, trace_length = _new_memory_events(trace_length)
    return {"allocated": stats["allocated_bytes.all.current"], "reserved": stats["reserved_bytes.all.current"],
            "segments": len(_segments()), "new_memory_events": events}, trace_length


def _segment_map() -> list[str]:
    """The snapshot in words: a line per segment, its blocks in address order."""
    lines = []
    for segment in sorted(_segments(), key=lambda s: s["address"]):
        blocks = ", ".join(f"{b['size'] / MiB:g} {'in use' if b['state'] == 'active_allocated' else 'free'}"
                           for b in sorted(segment["blocks"], key=lambda b: b["address"]))
        kind = "expandable " if segment.get("is_expandable") else ""
        lines.append(f"{kind}segment of {segment['total_size'] / MiB:g} MiB: {blocks} (MiB)")
    return lines


# --8<-- [start:growing]
def growing_batch() -> dict:
    """COUNT tensors of BEFORE MiB, all freed, then COUNT of AFTER MiB: a batch that grew."""
    torch.cuda.memory._record_memory_history("all", context=None, stacks="python", max_entries=100_000)
    _, length = _new_memory_events(0)
    stages = {}
    held = [torch.empty(BEFORE * MiB, dtype=torch.uint8, device="cuda") for _ in range(COUNT)]
    stages[f"{COUNT} × {BEFORE} MiB held"], length = _state(length)
    del held
    stages[f"all {COUNT} freed"], length = _state(length)
    held = [torch.empty(AFTER * MiB, dtype=torch.uint8, device="cuda") for _ in range(COUNT)]
    stages[f"{COUNT} × {AFTER} MiB held"], length = _state(length)
    segment_map = _segment_map()
    torch.cuda.empty_cache()  # releases what no tensor holds: a cudaFree per free segment
    stages["after empty_cache()"], length = _state(length)
    torch.cuda.memory._record_memory_history(None)
    del held
    return {"stages": stages, "segment_map": segment_map}
# --8<-- [end:growing]


# --8<-- [start:streams]
def freed_while_in_use(record: bool) -> dict:
    """Free a tensor that a side stream is still to read, then fill a new one of its size."""
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    x = torch.ones(STREAM_MiB * MiB // 4, device="cuda")
    side.wait_stream(main)                 # the side stream sees x filled
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)    # busy long after the host has moved on
        out = x * 2                        # reads x, later
    if record:
        x.record_stream(side)              # x's block waits for the side stream's work
    address, segments = x.data_ptr(), torch.cuda.memory_stats()["segment.all.allocated"]
    del x
    waiting = sum(b["state"] == "active_pending_free" for s in _segments() for b in s["blocks"])
    z = torch.zeros(STREAM_MiB * MiB // 4, device="cuda")  # main stream: does it get x's block?
    found = {"reused": z.data_ptr() == address, "awaiting_free": waiting,
             "side_busy": not side.query(),  # the side stream's read still to come
             "new_segments": torch.cuda.memory_stats()["segment.all.allocated"] - segments}
    torch.cuda.synchronize()
    found["wrong"] = (out != 2).float().mean().item()  # zeros read where x's ones were
    w = torch.empty_like(z)                # the side stream is done: x's block is free now
    found["reused_after_sync"] = w.data_ptr() == address
    return found
# --8<-- [end:streams]


def freed_on_another_stream() -> dict:
    """A block freed on the side stream, asked for again on the main stream."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = torch.empty(STREAM_MiB * MiB, dtype=torch.uint8, device="cuda")
    address, segments = y.data_ptr(), torch.cuda.memory_stats()["segment.all.allocated"]
    del y
    torch.cuda.synchronize()
    z = torch.empty(STREAM_MiB * MiB, dtype=torch.uint8, device="cuda")
    return {"reused": z.data_ptr() == address,
            "new_segments": torch.cuda.memory_stats()["segment.all.allocated"] - segments}


def _warm_streams() -> None:
    """Each kernel the stream parts launch, run once first: a kernel's first launch loads its
    module (CUDA's lazy loading), which can wait for the GPU, and so for the side stream's
    sleep, closing the window the parts need open (seen on an H200: no wrong value then)."""
    side = torch.cuda.Stream()
    x = torch.ones(1024, device="cuda")
    with torch.cuda.stream(side):
        torch.cuda._sleep(1)
        (x * 2).sum()
    torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()


def _streams() -> dict:
    _warm_streams()
    found = {}
    for name, part in (("freed without record_stream", lambda: freed_while_in_use(False)),
                       ("freed after record_stream", lambda: freed_while_in_use(True)),
                       ("freed on the side stream", freed_on_another_stream)):
        found[name] = part()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return found


def child() -> None:
    """In a fresh process, the allocator set by the environment: print the findings as JSON."""
    torch.cuda.init()
    found = {"settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "torch": torch.__version__}
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") is None:  # the default allocator: every part
        found["rounding"] = _rounding()
        found["streams"] = _streams()
    found["growing"] = growing_batch()
    print(json.dumps(found))


def _start(settings: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    if settings is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = settings
    code = "from examples.dispatch.allocator_internals import child; child()"
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=Path(__file__).resolve().parents[2],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(name: str, proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"the {name} child ran past 300 s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the {name} child failed: {stderr.strip().splitlines()[-1:]}")
    return json.loads(stdout.strip().splitlines()[-1])


# -- the record ------------------------------------------------------------------------

def measure(lab) -> None:
    children = {name: _start(settings) for name, settings in ALLOCATORS.items()}
    try:
        found = {name: _wait(name, proc) for name, proc in children.items()}
    finally:
        for proc in children.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    default = found["default"]
    lab.note("torch in the children", default["torch"])
    _keep_rounding(lab, default["rounding"])
    for allocator, of_child in found.items():
        _keep_growing(lab, allocator, of_child["growing"])
    _keep_streams(lab, default["streams"])


def _keep_rounding(lab, rounding: dict) -> None:
    observed, predicted = [], []
    for name, r in rounding.items():
        request = r["request"]
        block, segment = predicted_block(request), predicted_segment(request)
        observed += [r["block"], r["segment"]]
        predicted += [block, segment]
        case = {"part": "rounding", "request": name, "pool": r["pool"]}
        lab.value(case=case, metric="block", value=r["block"] / 1024, unit="KiB")
        lab.value(case=case, metric="padding", value=r["block"] - request, unit="B")
        lab.value(case=case, metric="segment", value=r["segment"] / MiB, unit="MiB")
        lab.value(case=case, metric="block_vs_rule", value=r["block"] / block, unit="x")
        lab.value(case=case, metric="segment_vs_rule", value=r["segment"] / segment, unit="x")
        if not r["new_segment"]:
            raise RuntimeError(f"the request of {name} was cut from a segment cached before it")
    lab.check("blocks and segments against round_size and get_allocation_size",
              torch.tensor(observed, dtype=torch.float64), torch.tensor(predicted, dtype=torch.float64),
              tolerance=0.0)


def _keep_growing(lab, allocator: str, growing: dict) -> None:
    for stage, s in growing["stages"].items():
        case = {"part": "growing batch", "allocator": allocator, "stage": stage}
        lab.value(case=case, metric="allocated", value=s["allocated"] / MiB, unit="MiB")
        lab.value(case=case, metric="reserved", value=s["reserved"] / MiB, unit="MiB")
        lab.value(case=case, metric="idle", value=(s["reserved"] - s["allocated"]) / MiB, unit="MiB")
        lab.value(case=case, metric="segments", value=s["segments"], unit="")
        lab.value(case=case, metric="new_memory_events", value=s["new_memory_events"], unit="")
    lab.note(f"segment map with {COUNT} × {AFTER} MiB held ({allocator})", growing["segment_map"])


def _keep_streams(lab, streams: dict) -> None:
    for way, s in streams.items():
        case = {"part": "streams", "way": way}
        lab.value(case=case, metric="reused", value=float(s["reused"]), unit="")
        lab.value(case=case, metric="new_segments", value=s["new_segments"], unit="")
        if "wrong" in s:
            lab.value(case=case, metric="wrong_share", value=s["wrong"], unit="")
            lab.value(case=case, metric="awaiting_free", value=s["awaiting_free"], unit="")
            lab.value(case=case, metric="side_busy", value=float(s["side_busy"]), unit="")
        if way == "freed after record_stream":  # without it, z holds x's block by then
            lab.value(case=case, metric="reused_after_sync", value=float(s["reused_after_sync"]), unit="")
    # With record_stream the side stream must have read x's ones, every one of them.
    right = 1 - streams["freed after record_stream"]["wrong"]
    lab.check("the side stream's output, x freed after record_stream",
              torch.tensor([right], dtype=torch.float64), torch.ones(1, dtype=torch.float64), tolerance=0.0)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
