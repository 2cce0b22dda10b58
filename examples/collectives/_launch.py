"""One code path, two launchers: the book's own spawn on one machine, or torchrun.

:func:`examples.collectives.ring_allreduce.spawn` runs a worker on ``world``
ranks and hands rank 0's result back to the example's ``measure``. Without a
launcher it starts the ranks itself (``mp.spawn`` on 127.0.0.1: one command,
one machine). Started by ``torchrun`` (``--nproc-per-node N`` on one node, or
``--nnodes M --rdzv-backend c10d --rdzv-endpoint HOST:PORT`` on several), a
process is one rank: its ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` come from
the launcher, its GPU is ``cuda:LOCAL_RANK``, and it joins through the
launcher's store (the ``env://`` rendezvous: ``MASTER_ADDR``, ``MASTER_PORT``).

Rank 0 runs the example as it runs alone. Each ``spawn`` it calls is published
in the store (the worker, the ranks, the backend, the config, the NCCL
variables the examples set), and the other ranks, which reach ``spawn`` too,
follow: they run each published call as one rank of it, with rank 0's config
(its random seeds included), then wait for the next, until rank 0's process
ends; they keep no figure and write nothing. A follower whose call fails says why
in one line and exits, so that torchrun stops the job at once rather than leave
rank 0 waiting in that call's collectives until NCCL's timeout. So the worker functions are the
same under both launchers, and only rank 0 keeps figures and writes the record.
Each call gets a fresh process group under its own prefix of the store (a
smaller group, such as a fit over 2, 4, ... GPUs, runs on ranks 0 to q-1; the
others wait), and the files its ranks save reach rank 0 through the group,
since ranks on several nodes share no folder.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import pickle
import socket
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

#: What torchrun sets in every rank it starts (torch.distributed.run's documentation).
REQUIRED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: Any of these set: a launcher started this process as one rank. (MASTER_ADDR and
#: MASTER_PORT alone are not enough: some clusters export them to every job.)
MARKERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
#: The NCCL variables the examples set around a spawn (a protocol, an algorithm, a cap
#: on CTAs, the TUNING log): rank 0 sends them with each call, the followers set them.
NCCL_SET_BY_EXAMPLES = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_MAX_CTAS", "NCCL_DEBUG",
                        "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
#: Of those, the ones NCCL reads once per process (src/debug.cc's ncclDebugInit), where each
#: new communicator reads NCCL_PROTO, NCCL_ALGO and NCCL_MAX_CTAS again (src/graph/tuning.cc,
#: src/init.cc). A spawned rank is fresh for every call; a launched one is not.
NCCL_READ_ONCE = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
#: Read once per process with no way to read it again: under torchrun on 2 H200s (NCCL
#: 2.28.9), NCCL_MAX_CTAS=2 set for a later call left the overlapped GEMMs as slow as with
#: no cap (1.50x alone), where fresh spawned processes with it gave 1.02x.
NCCL_FIXED_PER_PROCESS = ("NCCL_MAX_CTAS",)
#: What this process had when it started, so what its NCCL reads unless told to read again.
_AT_START = {k: os.environ.get(k) for k in (*NCCL_READ_ONCE, *NCCL_FIXED_PER_PROCESS)}


class LaunchError(RuntimeError):
    """The launcher's environment, or a call, that cannot run: said in one line."""


@dataclass(frozen=True)
class Launch:
    rank: int
    world: int
    local_rank: int


def from_environment(env=os.environ) -> Launch | None:
    """This process's place under a launcher, or ``None`` when no launcher started it.

    >>> from_environment({}) is None
    True
    >>> from_environment({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
    ...                   "MASTER_ADDR": "node0", "MASTER_PORT": "29500"})
    Launch(rank=1, world=4, local_rank=1)
    >>> from_environment({"RANK": "0", "WORLD_SIZE": "2"})
    Traceback (most recent call last):
    ...
    examples.collectives._launch.LaunchError: a launcher's environment is incomplete: RANK, WORLD_SIZE set; LOCAL_RANK, MASTER_ADDR, MASTER_PORT missing (start the example with torchrun, or unset them to spawn the ranks on this machine)
    """
    if not any(k in env for k in MARKERS):
        return None
    missing = [k for k in REQUIRED if not env.get(k, "").strip()]
    if missing:
        given = [k for k in (*REQUIRED, "TORCHELASTIC_RUN_ID") if env.get(k, "").strip()]
        raise LaunchError(
            f"a launcher's environment is incomplete: {', '.join(given) or 'nothing'} set; "
            f"{', '.join(missing)} missing (start the example with torchrun, or unset them "
            "to spawn the ranks on this machine)")
    n = {k: _whole(env, k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    if n["WORLD_SIZE"] < 1:
        raise LaunchError(f"WORLD_SIZE={n['WORLD_SIZE']}: a launcher starts at least one rank")
    if not 0 <= n["RANK"] < n["WORLD_SIZE"]:
        raise LaunchError(f"RANK={n['RANK']} does not fit WORLD_SIZE={n['WORLD_SIZE']} "
                          "(ranks are 0 to WORLD_SIZE-1)")
    if not 0 <= n["LOCAL_RANK"] <= n["RANK"]:
        raise LaunchError(f"LOCAL_RANK={n['LOCAL_RANK']} does not fit RANK={n['RANK']} "
                          "(a node's ranks are numbered from 0)")
    if not 0 < n["MASTER_PORT"] < 65536:
        raise LaunchError(f"MASTER_PORT={n['MASTER_PORT']} is not a TCP port")
    return Launch(rank=n["RANK"], world=n["WORLD_SIZE"], local_rank=n["LOCAL_RANK"])


def _whole(env, key: str) -> int:
    text = env[key].strip()
    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"{key}={text!r} is not a whole number") from None


def world_size(default: int) -> int:
    """The ranks a topic runs on: the launcher's ``WORLD_SIZE`` under torchrun (every
    node's GPUs), else ``default`` (this machine's GPUs, or two CPU ranks)."""
    launch = from_environment()
    if launch is None:
        return default
    if launch.world < 2:
        raise LaunchError(f"a collective needs at least 2 ranks; the launcher started {launch.world} "
                          "(torchrun --nproc-per-node N, on each of --nnodes M)")
    return launch.world


def read_results(folder: str | Path) -> dict:
    """What rank 0's worker returned, with every rank's saved tensors under ``"saved"``."""
    result = json.loads(Path(folder, "rank0.json").read_text())
    result["saved"] = {f.name: torch.load(f) for f in Path(folder).glob("*.pt")}
    return result


# -- the ranks of one call: their files and where they ran ------------------------------

def gather_to_rank0(folder: str | Path) -> None:
    """Each rank's saved files (``*.pt``) into rank 0's ``folder``, through the process
    group, and where every rank ran into its ``ranks.json``: ranks on several nodes
    share no folder. Called by every rank of the group, after its worker."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = {"files": {f.name: f.read_bytes() for f in Path(folder).glob("*.pt")},
            "where": where_this_rank_runs()}
    everyone = [None] * world if rank == 0 else None
    # Over gloo, not the call's own NCCL: a forced setting such as NCCL_ALGO=Tree has no
    # all-gather, which gather_object uses, and the files are a few MiB at most.
    over_host = dist.new_group(backend="gloo")
    dist.gather_object(mine, everyone, dst=0, group=over_host)
    dist.destroy_process_group(over_host)
    if rank != 0:
        return
    for theirs in everyone[1:]:
        for name, data in theirs["files"].items():
            path = Path(folder, name)
            if not path.exists():  # a name every rank writes: rank 0's, as under spawn
                path.write_bytes(data)
    Path(folder, "ranks.json").write_text(json.dumps([e["where"] for e in everyone]))


def where_this_rank_runs() -> dict:
    """Host, node (torchrun's GROUP_RANK), local rank and GPU of this rank."""
    device = torch.cuda.current_device() if dist.get_backend() == "nccl" else None
    return {"host": socket.gethostname(), "node": os.environ.get("GROUP_RANK"),
            "local_rank": int(os.environ.get("LOCAL_RANK", dist.get_rank())),
            "gpu": torch.cuda.get_device_name(device) if device is not None else None}


def describe(ranks: list[dict], backend: str) -> dict:
    """The record's word on the machine of a launched run: nodes, ranks, each node's GPUs.

    >>> describe([{"host": "a", "node": "0", "local_rank": 0, "gpu": "H100"},
    ...           {"host": "a", "node": "0", "local_rank": 1, "gpu": "H100"},
    ...           {"host": "b", "node": "1", "local_rank": 0, "gpu": "H100"},
    ...           {"host": "b", "node": "1", "local_rank": 1, "gpu": "H100"}], "nccl")
    {'launcher': 'torchrun', 'backend': 'nccl', 'nodes': 2, 'ranks': 4, 'per node': {'node 0 (a)': '2 x H100', 'node 1 (b)': '2 x H100'}}
    """
    nodes: dict[str, list[dict]] = {}
    for r in ranks:
        key = f"node {r['node']} ({r['host']})" if r["node"] is not None else r["host"]
        nodes.setdefault(key, []).append(r)
    per_node = {}
    for key, there in nodes.items():
        gpus = [r["gpu"] or "CPU" for r in sorted(there, key=lambda r: r["local_rank"])]
        kinds = list(dict.fromkeys(gpus))
        per_node[key] = ", ".join(f"{gpus.count(k)} x {k}" for k in kinds)
    return {"launcher": "torchrun", "backend": backend, "nodes": len(nodes), "ranks": len(ranks),
            "per node": per_node}


# -- rank 0 leads, the other ranks follow ---------------------------------------------------

_state: dict = {"store": None, "calls": 0, "ranks": None, "backend": None}


def _store(launch: Launch) -> dist.Store:
    """The launcher's store (the env:// rendezvous), once per process, under the book's prefix."""
    if _state["store"] is None:
        store, _, _ = next(dist.rendezvous("env://", rank=launch.rank, world_size=launch.world))
        _state["store"] = dist.PrefixStore("python-to-silicon/", store)
        if launch.rank == 0:  # the followers' last call: "done" when rank 0's process ends
            atexit.register(_done)
    return _state["store"]


def _done() -> None:
    try:
        _state["store"].set(f"call/{_state['calls'] + 1}", b"done")
    except Exception:  # noqa: BLE001 - the launcher is gone: so are the followers
        pass


def check_world(world: int, launch: Launch) -> None:
    if world > launch.world:
        raise LaunchError(f"this topic runs a group of {world} ranks; the launcher started "
                          f"{launch.world} (torchrun --nnodes M --nproc-per-node N: M x N ranks)")


def as_one_rank(launch: Launch, rank_main, worker, world: int, backend: str, config: dict) -> dict:
    """``spawn`` under a launcher: rank 0 runs this call and returns its result; any other
    rank follows rank 0's calls from here on and leaves the process when rank 0's ends."""
    check_world(world, launch)  # every rank computed the same world: every rank says so
    nccl = {k: os.environ.get(k) for k in NCCL_SET_BY_EXAMPLES}
    if backend == "nccl":
        check_nccl_can_change(nccl, _reset_debug_function() is not None)
    store = _store(launch)
    if launch.rank != 0:
        _follow(launch, store, rank_main)  # never returns
    _state["calls"] += 1
    n = _state["calls"]
    store.set(f"call/{n}", pickle.dumps((worker, world, backend, config, nccl)))
    result = _run(launch, store, n, rank_main, worker, world, backend, config)
    _state["backend"] = backend
    return result


def _run(launch, store, n, rank_main, worker, world, backend, config) -> dict | None:
    if backend == "nccl":
        nccl_reads_debug_again()
    with tempfile.TemporaryDirectory() as tmp:
        config = {**config, "backend": backend, "out": tmp, "local_rank": launch.local_rank,
                  "init": dist.PrefixStore(f"group/{n}/", store), "gather": True}
        rank_main(launch.rank, world, worker, config)
        if launch.rank != 0:
            return None
        result = read_results(tmp)
        _state["ranks"] = json.loads(Path(tmp, "ranks.json").read_text())
        return result


# -- NCCL's log, per call -------------------------------------------------------------------

def check_nccl_can_change(nccl: dict, can_reset: bool) -> None:
    """A call that logs differently from how this process started needs NCCL to read its
    NCCL_DEBUG variables again; say so in one line where this NCCL cannot. A variable NCCL
    never reads again (``NCCL_FIXED_PER_PROCESS``) cannot change at all: say so too.

    >>> check_nccl_can_change({"NCCL_PROTO": "LL", **_AT_START}, can_reset=False)
    >>> check_nccl_can_change({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"}, can_reset=True)
    """
    fixed = {k: nccl.get(k) for k in NCCL_FIXED_PER_PROCESS if nccl.get(k) != _AT_START[k]}
    if fixed:
        k, v = next(iter(fixed.items()))
        raise LaunchError(
            f"this measurement asks NCCL for {k}={v}, but under torchrun NCCL keeps the {k} "
            f"this process started with ({_AT_START[k] or 'unset'}); run the topic with "
            "`python -m examples.lab run`, which starts fresh processes for each setting")
    wanted = {k: nccl.get(k) for k in NCCL_READ_ONCE}
    if wanted == {k: _AT_START[k] for k in NCCL_READ_ONCE} or can_reset:
        return
    asked = ", ".join(f"{k}={v}" for k, v in wanted.items() if v is not None) or "no NCCL log"
    raise LaunchError(
        f"this measurement asks NCCL for {asked}, but under torchrun NCCL reads its NCCL_DEBUG "
        "variables once per process and this NCCL cannot be told to read them again "
        "(ncclResetDebugInit: NCCL 2.24 or later); run the topic with `python -m examples.lab run`")


def nccl_reads_debug_again() -> bool:
    """Have NCCL read NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE again at its next
    log line, as a fresh process would (NCCL's ``ncclResetDebugInit``, exported since 2.24).
    False where this process's NCCL has no such function (or no NCCL is loaded)."""
    reset = _reset_debug_function()
    if reset is None:
        return False
    reset()
    return True


def _reset_debug_function():
    """``ncclResetDebugInit`` of the NCCL torch loaded: linked into the process, or the
    ``libnccl`` shared library it mapped (pip's CUDA wheels ship one)."""
    candidates = [None]  # the process's global symbols
    try:
        with open("/proc/self/maps") as maps:
            candidates += sorted({line.split()[-1] for line in maps if "libnccl" in line})
    except OSError:
        pass
    for library in candidates:
        try:
            return getattr(ctypes.CDLL(library), "ncclResetDebugInit")
        except (OSError, AttributeError):
            continue
    return None


def _follow(launch: Launch, store, rank_main) -> None:
    """Run rank 0's calls as rank ``launch.rank``, each with the NCCL variables rank 0 had."""
    from examples.collectives._nccl_log import environment

    while True:
        _state["calls"] += 1
        n = _state["calls"]
        call = _wait(store, f"call/{n}")
        if call == b"done":
            raise SystemExit(0)  # rank 0 has finished: no record here, nothing to print
        worker, world, backend, config, nccl = pickle.loads(call)
        if launch.rank >= world:
            continue  # a smaller group: ranks 0 to world-1
        with tempfile.TemporaryDirectory() as logs:
            if nccl.get("NCCL_DEBUG_FILE"):  # rank 0's folder is not on this node
                nccl = {**nccl, "NCCL_DEBUG_FILE": f"{logs}/nccl.%h.%p.log"}
            try:
                with environment(nccl):
                    _run(launch, store, n, rank_main, worker, world, backend, config)
            except Exception as exc:  # noqa: BLE001 - one line, then the whole launch ends
                text = str(exc).strip().splitlines()
                print(f"rank {launch.rank}, call {n}: {type(exc).__name__}: {text[-1] if text else ''}; "
                      "this rank leaves, and torchrun ends the others", file=sys.stderr, flush=True)
                # Waiting for the next call would leave rank 0 blocked in this one's collectives
                # until NCCL's timeout (a Slurm job hung for minutes); a rank that exits makes
                # torchrun stop every rank of the job at once. No clean-up: the group is broken.
                _leave(1)


def _leave(status: int) -> None:
    """End this process now, without Python's clean-up (a broken group's teardown can block)."""
    sys.stderr.flush()
    os._exit(status)


def _wait(store, key: str) -> bytes:
    while True:  # rank 0 may keep figures for minutes between calls: wait in slices
        try:
            store.wait([key], timedelta(minutes=5))
            return store.get(key)
        except dist.DistStoreError as exc:
            if "timeout" not in str(exc).lower():
                raise


def note(lab) -> None:
    """Under a launcher, the record says where the ranks of the last call ran."""
    if from_environment() is not None and _state["ranks"]:
        lab.note("launch", describe(_state["ranks"], _state["backend"]))
