"""GPU memory, as the runner sees it: what a topic took, what it needs, what this GPU has.

A reader's GPU may have 8 GiB or 141. Each topic's need is measured by the runner itself
(the peak of the device memory in use while the topic ran, less what was in use before it,
sampled through NVML so that a topic's own processes count too) and kept in
``memory_needs.json`` beside this file: the largest peak of the book's GPU runs. Before a
topic starts, the runner compares its need with what this GPU can give it and, where it
cannot fit, skips it in one line instead of failing minutes later; a topic that still runs
out of memory fails in one line too, and the topics after it run.

The table is bookkeeping, not measuring code: a change to it stales no record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

GIB = 2**30
NEEDS_FILE = Path(__file__).with_name("memory_needs.json")
#: Kept free beside a topic's need: a peak sampled every few milliseconds can miss a
#: short-lived allocation (a profiler's or a rank's process starting and leaving).
MARGIN_GIB = 0.5


def entries(path: Path = NEEDS_FILE) -> dict[str, dict]:
    """Topic -> its entry of the committed table (``gib``, ``runs``, ``gpus``); {} if absent."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("topics", {})
    except (OSError, ValueError):
        return {}


def needs(path: Path = NEEDS_FILE) -> dict[str, float]:
    """Topic -> GiB of GPU memory it needs (per GPU), from the committed table; {} if absent."""
    return {topic: float(entry["gib"]) for topic, entry in entries(path).items()}


def gib(nbytes: float) -> str:
    """Bytes in GiB as a reader reads them.

    >>> gib(3.54 * 2**30), gib(80 * 2**30), gib(141.9 * 2**30), gib(0.04 * 2**30)
    ('3.5 GiB', '80.0 GiB', '142 GiB', '0.04 GiB')
    """
    value = nbytes / GIB
    if value >= 100:
        return f"{value:.0f} GiB"
    return f"{value:.1f} GiB" if value >= 0.1 else f"{value:.2f} GiB"


def _usage(device) -> tuple[int, int, int]:
    """Bytes on ``device``: free, in all, and held by this process's allocator (used or cached)."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return free, total, torch.cuda.memory_reserved(device)


def available(device, limit_gib: float | None = None, *, live_is_room: bool = False) -> float:
    """Bytes a topic starting now could have on ``device``: what is free, plus what this
    process's allocator has cached and would hand back; at most ``limit_gib`` (a smaller card's
    memory, for ``--memory-limit``) less what is in use beside this process's allocator. The
    tensors this process still holds (what earlier topics left) are no room, unless
    ``live_is_room``: the topic will use them (a set-up an earlier topic kept for it)."""
    import torch

    free, total, mine = _usage(device)
    live = 0 if live_is_room else torch.cuda.memory_allocated(device)
    room = free + mine - live
    if limit_gib is not None:
        room = min(room, limit_gib * GIB - (total - free - mine) - live)
    return max(room, 0)


def allocatable(device) -> int:
    """Bytes this process's allocator could still hand out on ``device`` now: its own cached
    blocks, plus what the GPU has free, within ``--memory-limit``'s cap where one is set
    (a topic that can park what it holds asks this before it builds more)."""
    import torch

    free, total, reserved = _usage(device)
    cached = reserved - torch.cuda.memory_allocated(device)
    # torch 2.8 and later say the cap they were given; before, only a cap of ours is set
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda _device: 1.0)(device)
    return max(cached + min(free, int(fraction * total) - reserved), 0)


def cap_allocator(device, limit_gib: float) -> None:
    """``--memory-limit``: this process's allocator may hold at most ``limit_gib`` less what the
    card holds beside it (this process's CUDA context, other processes), as on a card of that
    size. ValueError, in one line, where this GPU cannot act as one."""
    import torch

    free, total, mine = _usage(device)
    if limit_gib * GIB >= total:
        raise ValueError(f"--memory-limit {limit_gib:g}: this GPU has only {gib(total)}")
    beside = total - free - mine
    if limit_gib * GIB <= beside:
        raise ValueError(f"--memory-limit {limit_gib:g}: {gib(beside)} of this GPU is in use already")
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction((limit_gib * GIB - beside) / total, index)


def does_not_fit(need_gib: float | None, room: float, gpu: str) -> str | None:
    """The skip line for a topic that cannot fit, or None where it fits (or its need is unknown).

    >>> does_not_fit(31.2, 11.5 * 2**30, "NVIDIA GeForce RTX 4070")
    "took up to 31.7 GiB of GPU memory on the book's GPUs; NVIDIA GeForce RTX 4070 has 11.5 GiB free for it: skipped (its page shows the book's own runs)"
    >>> does_not_fit(31.2, 40 * 2**30, "NVIDIA A100") is None
    True
    """
    if need_gib is None or (need_gib + MARGIN_GIB) * GIB <= room:
        return None
    return (f"took up to {gib((need_gib + MARGIN_GIB) * GIB)} of GPU memory on the book's GPUs; "
            f"{gpu} has {gib(room)} free for it: skipped (its page shows the book's own runs)")


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA out-of-memory error: torch's own, or one a topic's process reported in text."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return "CUDA out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text \
        or "cudaErrorMemoryAllocation" in text


def out_of_memory_line(exc: BaseException, need_gib: float | None, room: float, gpu: str) -> str:
    """One line in the book's words for a topic that ran out of GPU memory.

    >>> class Fake(Exception): pass
    >>> out_of_memory_line(Fake("CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has ..."),
    ...                    31.2, 23.4 * 2**30, "NVIDIA GeForce RTX 4090")
    "ran out of GPU memory (asked for 1.96 GiB more): it took up to 31.7 GiB on the book's GPUs, NVIDIA GeForce RTX 4090 had 23.4 GiB free for it; run it on a GPU with more memory"
    """
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", str(exc))
    more = f" (asked for {asked.group(1)} more)" if asked else ""
    need = f"it took up to {gib((need_gib + MARGIN_GIB) * GIB)} on the book's GPUs, " if need_gib is not None else ""
    return (f"ran out of GPU memory{more}: {need}{gpu} had {gib(room)} free for it; "
            "run it on a GPU with more memory")


class PeakWatch:
    """The peak of device memory in use on the visible GPUs while the block runs, above what
    was in use before it less what this process's allocator held on that GPU (a topic may
    reuse that). Every process of the topic counts: NVML is read every few milliseconds by a
    watcher process (:func:`watch`), not a thread of this one, which would take the
    interpreter's lock from the very loops the topics time. A block the allocator holds for
    less than that interval can escape the watcher: this process's own allocator counts its
    peak itself (``max_memory_reserved``), and the larger of the two is the peak. ``peak`` is
    None where NVML cannot be read. The runner watches only when asked to report peaks
    (``wanted``)."""

    _watcher = None  # one watcher for the run, started at the first topic
    #: Seconds to wait for the watcher's answer: one that hangs (in NVML) costs a run no more.
    TIMEOUT = 10.0

    def __init__(self):
        self.peak = None

    @staticmethod
    def wanted() -> bool:
        """Peaks are measured only for ``LAB_MEMORY_PEAKS``, and by one process of a launched
        run (rank 0): every rank watching every GPU would read NVML thousands of times a second."""
        import os

        return bool(os.environ.get("LAB_MEMORY_PEAKS")) and os.environ.get("RANK", "0") == "0"

    @classmethod
    def _ask(cls, line: str) -> str | None:
        import atexit
        import select
        import subprocess
        import sys

        if cls._watcher is None:
            cls._watcher = subprocess.Popen(
                [sys.executable, "-m", "examples.lab.memory", "--watch", *_visible_uuids()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            atexit.register(cls._watcher.kill)
        if cls._watcher.poll() is not None:
            return None  # no NVML there: it left at once
        try:
            cls._watcher.stdin.write(line + "\n")
            cls._watcher.stdin.flush()
            ready, _, _ = select.select([cls._watcher.stdout], [], [], cls.TIMEOUT)
            return cls._watcher.stdout.readline().strip() or None if ready else None
        except OSError:
            return None

    def __enter__(self):
        import torch

        self._held = [torch.cuda.memory_reserved(i) for i in range(torch.cuda.device_count())]
        for i in range(len(self._held)):
            torch.cuda.reset_peak_memory_stats(i)
        self._on = self._ask("start") == "ok"
        return self

    def __exit__(self, *exc) -> None:
        if not self._on:
            return
        reply = self._ask("stop")
        try:
            grown = json.loads(reply)
        except (TypeError, ValueError):
            return
        import torch

        # The allocator's blocks held at the start on a GPU were free for the topic there,
        # and in use all along.
        watched = max(g + h for g, h in zip(grown, self._held, strict=True))
        counted = max(torch.cuda.max_memory_reserved(i) for i in range(len(self._held)))
        self.peak = max(watched, counted, 0)


def watch(uuids: list[str], interval: float = 0.004) -> None:
    """The watcher: "start" takes each GPU's memory in use and answers "ok"; "stop" answers
    each GPU's growth since, at its peak (JSON); between them it reads NVML every
    ``interval`` seconds. Leaves at once, silent, where NVML cannot be read."""
    import select
    import sys

    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByUUID(u) for u in uuids]
    except Exception:  # noqa: BLE001 - no NVML here: the runner reports no peaks
        return

    def used() -> list[int]:
        return [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]

    base = top = None
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], interval)
        if ready:
            command = sys.stdin.readline().strip()
            if command == "start":
                base = top = used()
                print("ok", flush=True)
            elif command == "stop" and base is not None:
                top = [max(t, u) for t, u in zip(top, used())]
                print(json.dumps([t - b for t, b in zip(top, base)]), flush=True)
                base = None
            elif not command:
                return  # the runner is gone
        elif base is not None:
            top = [max(t, u) for t, u in zip(top, used())]


def _visible_uuids() -> list[str]:
    """NVML's names (UUIDs) of the GPUs this process sees, in torch's order: indices would
    name other GPUs where CUDA_VISIBLE_DEVICES holds UUIDs or CUDA orders GPUs otherwise."""
    import torch

    uuids = []
    for i in range(torch.cuda.device_count()):
        text = str(torch.cuda.get_device_properties(i).uuid)
        uuids.append(text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
    return uuids


def table(lines: list[dict]) -> dict:
    """The needs table from the runner's peak lines (``LAB_MEMORY_PEAKS``): per topic, its
    largest peak over every run and GPU, rounded up to a tenth of a GiB. Where a topic ran
    under ``--memory-limit`` (a line with ``limit_gib``), only those runs count: a topic that
    parks what it can (Chapter 9's) takes less on a small card than on a large one, and what
    it needs is what it took there.

    >>> table([{"topic": "a.b", "peak_bytes": 1.23 * 2**30, "gpu": "NVIDIA H100"},
    ...        {"topic": "a.b", "peak_bytes": 1.31 * 2**30, "gpu": "NVIDIA H200"}])["topics"]
    {'a.b': {'gib': 1.4, 'runs': 2, 'gpus': ['NVIDIA H100', 'NVIDIA H200']}}
    >>> table([{"topic": "c.d", "peak_bytes": 30.2 * 2**30, "gpu": "NVIDIA H200"},
    ...        {"topic": "c.d", "peak_bytes": 20.5 * 2**30, "gpu": "NVIDIA H200", "limit_gib": 24}])["topics"]
    {'c.d': {'gib': 20.5, 'runs': 1, 'gpus': ['NVIDIA H200'], 'memory_limit_gib': 24}}
    """
    import math

    limited = {line["topic"] for line in lines if line.get("limit_gib") is not None}
    topics: dict[str, dict] = {}
    for line in lines:
        if line["topic"] in limited and line.get("limit_gib") is None:
            continue
        entry = topics.setdefault(line["topic"], {"gib": 0.0, "runs": 0, "gpus": []})
        entry["gib"] = max(entry["gib"], math.ceil(round(line["peak_bytes"] / GIB * 10, 6)) / 10)
        entry["runs"] += 1
        if line["gpu"] not in entry["gpus"]:
            entry["gpus"].append(line["gpu"])
        if line.get("limit_gib") is not None:
            entry["memory_limit_gib"] = max(entry.get("memory_limit_gib", 0), line["limit_gib"])
    return {"about": "GiB of GPU memory each topic took at its peak, per GPU, the largest of the "
                     "runs listed (under --memory-limit where a topic was run so; "
                     "examples/lab/memory.py); the runner skips a topic a GPU cannot fit",
            "topics": dict(sorted(topics.items()))}


def need_key(topic: str, model: str | None) -> str:
    """A topic's row in the needs table: Chapter 9's topics have one per Llama shape (``--model``).

    >>> need_key("capstone.decode", None), need_key("capstone.decode", "llama3.2-1b")
    ('capstone.decode', 'capstone.decode@llama3.2-1b')
    """
    return topic if model in (None, "llama3-8b") else f"{topic}@{model}"


def smaller_model_that_fits(topic: str, needs: dict[str, float], room: float) -> str | None:
    """For a topic with a choice of model that did not fit: the largest smaller shape that
    does, as the flag to run it with (the runner adds it to the skip line).

    >>> needs = {"t@llama3.2-3b": 9.6, "t@llama3.2-1b": 4.2}
    >>> smaller_model_that_fits("t", needs, 11.5 * 2**30)
    '; with --model llama3.2-3b it needs 10.1 GiB'
    >>> smaller_model_that_fits("t", needs, 3 * 2**30) is None
    True
    """
    for model in ("llama3.2-3b", "llama3.2-1b"):
        need = needs.get(need_key(topic, model))
        if need is not None and (need + MARGIN_GIB) * GIB <= room:
            return f"; with --model {model} it needs {gib((need + MARGIN_GIB) * GIB)}"
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m examples.lab.memory PEAKS.jsonl ...``: write the needs table."""
    import argparse
    import sys

    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--watch"]:  # the runner's watcher process (PeakWatch)
        watch(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m examples.lab.memory", description=main.__doc__)
    parser.add_argument("peaks", nargs="+", type=Path, help="files of the runner's LAB_MEMORY_PEAKS lines")
    parser.add_argument("--out", type=Path, default=NEEDS_FILE)
    args = parser.parse_args(argv)
    lines = []
    for path in args.peaks:
        try:
            lines += [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
        except (OSError, ValueError) as exc:
            print(f"python -m examples.lab.memory: error: {path}: {exc}", file=sys.stderr)
            return 2
    made = table(lines)
    args.out.write_text(json.dumps(made, indent=1) + "\n")
    print(f"wrote {args.out}: {len(made['topics'])} topics")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
