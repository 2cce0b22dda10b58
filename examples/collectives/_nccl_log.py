"""What NCCL chose, read from its own log (``NCCL_DEBUG_SUBSYS=TUNING``).

With ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`` rank 0 writes, when its
communicator starts, the tuner's cost table (``src/graph/tuning.cc``: a
latency in microseconds and a bandwidth for every algorithm and protocol,
one row per collective), and, for every collective it enqueues, one line
with the algorithm, protocol and channels it picked (``src/enqueue.cc``)::

    AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}

The lines are written on every call, so a process whose calls are timed
must not log them: :func:`nccl_choices` asks in a separate pair of
processes, started for nothing else. NCCL reads its variables once per
process, so the logging has to be set before the process group exists.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

# --8<-- [start:choice]
#: One line per enqueued collective (enqueue.cc).
CHOICE = re.compile(
    r"(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?")


def payload(line: str) -> str:
    """The message of an NCCL log line, without host, pid and tid."""
    return line.split(" NCCL INFO ", 1)[-1].rstrip()


def parse_choices(lines: list[str]) -> dict[tuple[str, int], dict]:
    """(collective, bytes) -> {"algo", "proto", "channels"}, from the log.

    The last line for a (collective, bytes) wins: NCCL may change its mind
    for the same size only when something else changed (it does not here).
    ``channels`` is None for a line without the channel range (older NCCL).
    """
    out = {}
    for line in lines:
        m = CHOICE.search(payload(line))
        if not m:
            continue
        func, nbytes, algo, proto, lo, hi = m.groups()
        out[func, int(nbytes)] = {
            "algo": algo, "proto": proto,
            "channels": None if lo is None else int(hi) - int(lo) + 1}
    return out


# --8<-- [end:choice]


def parse_cost_table(lines: list[str]) -> dict[str, dict[tuple[str, str], tuple[float, float]]]:
    """The tuner's table: collective -> (algo, proto) -> (latency us, bw).

    tuning.cc prints it in blocks: an "Algorithm |" line naming one
    algorithm per three columns, a "Protocol |" line naming each column,
    a "Max NThreads |" line, then one "<Collective> | lat/bw | ..." row per
    collective. Each row is read against the block's header lines.
    """
    table: dict[str, dict] = {}
    algos: list[str] = []
    protos: list[str] = []
    for line in lines:
        cells = [c.strip() for c in payload(line).split("|")]
        if len(cells) < 2:
            continue
        head, rest = cells[0], [c for c in cells[1:] if c]
        if head == "Algorithm":
            algos = rest
        elif head == "Protocol":
            protos = rest
        elif head and algos and protos and all("/" in c for c in rest) and rest:
            per = len(protos) // len(algos)
            for i, cell in enumerate(rest[: len(protos)]):
                lat, bw = (float(v) for v in cell.split("/"))
                table.setdefault(head, {})[algos[i // per], protos[i]] = (lat, bw)
    return table


@contextlib.contextmanager
def environment(settings: dict[str, str | None]):
    """These variables (``None``: unset) for the processes started inside;
    the caller's own come back after. NCCL reads its variables when a
    process creates its communicator, so they are set around the spawn."""
    saved = {k: os.environ.get(k) for k in settings}

    def put(values: dict[str, str | None]) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    put(settings)
    try:
        yield
    finally:
        put(saved)


def tuning_log(folder: str, *, connections: bool = False):
    """NCCL_DEBUG=INFO, TUNING only (and INIT with ``connections``: the
    channels' connections, :func:`parse_interconnect`), into files in
    ``folder``, for the processes started inside (:func:`environment`)."""
    return environment({"NCCL_DEBUG": "INFO",
                        "NCCL_DEBUG_SUBSYS": "TUNING,INIT" if connections else "TUNING",
                        "NCCL_DEBUG_FILE": f"{folder}/nccl.%h.%p.log"})


# --8<-- [start:interconnect]
#: One line per channel's connection, written once as the communicator
#: connects (NCCL's transports, INIT subsystem), e.g.
#: ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM`` (NVLink or PCIe peer to peer),
#: ``Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA`` (the network),
#: ``Channel 00 : 0[0] -> 1[1] via SHM/direct/direct`` (through host memory).
CONNECTION = re.compile(
    r"Channel \d+(?:/\d+)? : (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\]"
    r"(?: \[(send|receive)\])? via (\S+)")


def parse_interconnect(lines: list[str], rank: int = 0) -> dict[str, int]:
    """How many channel connections ``rank`` made over each transport, named by its
    path without device numbers (``P2P/CUMEM``, ``P2P/CUMEM/read``,
    ``NET/IB/GDRDMA``: the network card reads GPU memory directly, GPUDirect RDMA;
    ``SHM/direct/direct``). A rank logs its own connections: a send names it first,
    a receive last. Counting one rank's makes the figure the same whether the logs
    read are every rank's on this machine (the lab's one command) or rank 0's alone
    (torchrun, where each node keeps its own)."""
    counts: dict[str, int] = {}
    for line in lines:
        m = CONNECTION.search(payload(line))
        if m:
            source, destination, side, path = m.groups()
            if int(destination if side == "receive" else source) != rank:
                continue
            kind = "/".join(part for part in path.split("/") if not part.isdigit())
            counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def describe_interconnect(counts: dict[str, int]) -> str:
    """The record's note: each transport with its connections, or why none."""
    if not counts:
        return "no connection line in NCCL's INIT log"
    return ", ".join(f"{kind} ({n} connection{'s' if n != 1 else ''})" for kind, n in counts.items())


# --8<-- [end:interconnect]


def refusal(exc: Exception) -> str:
    """A setting NCCL refused, in one line: a spawn's error ends with the
    rank's own message, so its last line says why."""
    text = str(exc).strip() or "?"
    return f"{type(exc).__name__}: {text.splitlines()[-1]}"[:300]


def read_logs(folder: str | Path) -> list[str]:
    return [line for f in sorted(Path(folder).glob("nccl.*.log"))
            for line in f.read_text(errors="replace").splitlines()]


def _call(config: dict, device: torch.device) -> dict:
    """One rank: each requested collective twice, untimed (see nccl_choices)."""
    p = dist.get_world_size()
    for name, nbytes in config["calls"]:
        full = torch.zeros(max(p, nbytes // 4), device=device)
        part = torch.zeros(full.numel() // p, device=device)
        out = torch.empty(part.numel() * p, device=device)
        fn = {"all_reduce": lambda: dist.all_reduce(full),
              "all_gather": lambda: dist.all_gather_into_tensor(out, part),
              "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, out),
              "broadcast": lambda: dist.broadcast(full, src=0),
              "reduce": lambda: dist.reduce(full, dst=0)}[name]
        for _ in range(2):
            fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return {}


def nccl_choices(world: int, calls: list[tuple[str, int]]) -> list[str]:
    """Rank 0's TUNING lines for these (collective, total fp32 bytes) calls,
    and its channels' connections (INIT), made in a fresh group of ``world``
    GPU processes that time nothing."""
    from examples.collectives.ring_allreduce import spawn

    with tempfile.TemporaryDirectory() as logs:
        with tuning_log(logs, connections=True):
            spawn(_call, world, "nccl", {"calls": calls})
        return read_logs(logs)


#: NCCL's names in the log for the book's collective names.
NCCL_NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather",
              "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast",
              "reduce": "Reduce"}


def choice_for(choices: dict, collective: str) -> tuple[int, dict] | None:
    """The choice logged for the largest message of ``collective`` (the
    timed size: the barriers between samples are 1-element all-reduces)."""
    name = NCCL_NAMES.get(collective, collective)
    sizes = [n for (f, n) in choices if f == name]
    return (max(sizes), choices[name, max(sizes)]) if sizes else None
