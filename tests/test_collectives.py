"""Chapter 6: the ring cost model, nccl-tests' bus bandwidth, the hand-written
ring against dist.all_reduce (gloo, 2 to 4 CPU processes), DDP's overlap."""
from __future__ import annotations

import json
import os
import types

import pytest
import torch

from examples.collectives import ring_allreduce as ring
from examples.collectives.ddp_overlap import overlap
from examples.collectives.ring_model import (
    bus_bandwidth,
    main,
    parse_bandwidth,
    parse_bytes,
    ring_allreduce_seconds,
)

MODEL = "examples.collectives.ring_model"


def test_worked_number(cli):
    proc = cli.run("-m", MODEL, "--gpus", "8", "--bytes", "1GB", "--bandwidth", "600GB/s")
    assert proc.returncode == 0, cli.explain(proc)
    assert "2.917 ms" in proc.stdout, cli.explain(proc)


def test_json_and_latency(cli):
    base = ["--gpus", "8", "--bytes", "1GB", "--bandwidth", "600GB/s"]
    plain = json.loads(cli.run("-m", MODEL, *base, "--json").stdout)
    slow = json.loads(cli.run("-m", MODEL, *base, "--latency", "5us", "--json").stdout)
    assert plain["seconds"] == pytest.approx(1.75 * 1e9 / 600e9)
    # 2(p-1) = 14 steps, each paying 5 µs
    assert slow["seconds"] - plain["seconds"] == pytest.approx(14 * 5e-6)


@pytest.mark.parametrize("text,value", [
    ("1GB", 1e9), ("1GiB", 2**30), ("512MiB", 2**29), ("4096", 4096), ("1.5kB", 1500),
])
def test_sizes(text, value):
    assert parse_bytes(text) == value


def test_bandwidth_units():
    assert parse_bandwidth("600GB/s") == 600e9
    assert parse_bandwidth("1GiB/s") == 2**30


@pytest.mark.parametrize("flag,value", [
    ("--gpus", "0"), ("--gpus", "two"), ("--bytes", "0"), ("--bytes", "-1GB"),
    ("--bytes", "1XB"), ("--bandwidth", "600GB"), ("--bandwidth", "0GB/s"),
    ("--latency", "-5us"), ("--latency", "5 parsecs"), ("--bytes", "inf"),
])
def test_bad_input_names_the_flag(flag, value, capsys):
    args = {"--gpus": "8", "--bytes": "1GB", "--bandwidth": "600GB/s", flag: value}
    with pytest.raises(SystemExit) as info:
        main([f"{k}={v}" for k, v in args.items()])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and flag in err, err


def test_model_shape():
    one = ring_allreduce_seconds(gpus=2, nbytes=1e9, bandwidth=1e11)
    assert one == pytest.approx(1e9 / 1e11)  # p = 2: 2(p-1)/p = 1
    assert ring_allreduce_seconds(gpus=1, nbytes=1e9, bandwidth=1e11) == 0
    # bandwidth term tends to 2 M / BW as p grows
    assert ring_allreduce_seconds(gpus=1000, nbytes=1e9, bandwidth=1e11) == pytest.approx(
        2 * 1e9 / 1e11, rel=1e-2)


def test_bus_bandwidth_factors():
    # nccl-tests doc/PERFORMANCE.md, "Summary"
    assert bus_bandwidth("all_reduce", gpus=4, algbw=1.0) == pytest.approx(1.5)
    for c in ("reduce_scatter", "all_gather", "all_to_all"):
        assert bus_bandwidth(c, gpus=4, algbw=1.0) == pytest.approx(0.75)
    for c in ("broadcast", "reduce"):
        assert bus_bandwidth(c, gpus=4, algbw=1.0) == 1.0


@pytest.fixture
def ranks_from_a_forkserver(monkeypatch):
    """The ranks ``ring.spawn`` starts in this process come from one fork server that has
    imported torch once, instead of a fresh interpreter each (``mp.spawn``'s start method:
    about 2.5 s of CPU a rank to import torch again, a minute of a 2-core CI over these
    tests). A rank is still a process of its own, forked from a server that has run nothing
    but those imports; what it runs is the example's ``_rank_main``, as under ``mp.spawn``.
    A forked rank leaves with ``os._exit``, not an interpreter's shutdown, so a test of what
    happens at a rank's exit (the teardown test below) keeps ``mp.spawn``; and the example's
    own command line, with ``mp.spawn`` as it is, runs in test_runs_on_cpu."""
    import multiprocessing

    multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "examples.collectives.ring_allreduce"])

    def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        return ring.mp.start_processes(fn, args=args, nprocs=nprocs, join=join, daemon=daemon,
                                       start_method="forkserver")

    monkeypatch.setattr(ring.mp, "spawn", spawn)


@pytest.mark.usefixtures("ranks_from_a_forkserver")
@pytest.mark.parametrize("world", [3, 4])
def test_hand_ring_matches_all_reduce_on_gloo(world):
    config = {"sizes": [4096], "link_bytes": 4096, "collective_bytes": 4096,
              "reps": 1, "inner": ring._inner}
    result = ring.spawn(ring.sweep, world, "gloo", config)
    for n in ring.CHECK_SIZES:
        for rank in range(world):
            saved = result["saved"][f"check-{n}-{rank}.pt"]
            torch.testing.assert_close(saved["mine"], saved["ref"])
    assert set(result["sweep"]) == {"dist.all_reduce|4096", "hand ring|4096"}


def test_overlap_of_a_made_up_trace():
    kernels = [
        {"name": "gemm", "start": 0.0, "dur": 10.0},
        {"name": "ncclDevKernel_AllReduce", "start": 5.0, "dur": 10.0},  # half hidden
        {"name": "gemm", "start": 12.0, "dur": 1.0},  # hides one more
        {"name": "ncclDevKernel_AllReduce", "start": 20.0, "dur": 2.0},  # exposed
    ]
    rows, share = overlap(kernels)
    assert [r["hidden"] for r in rows] == [6.0, 0.0]
    assert share == pytest.approx(6 / 12)


# -- collectives.nccl_latency: the eager ways on gloo (graphs need a GPU) --------
from examples.collectives import nccl_latency as lat  # noqa: E402


def test_nccl_latency_record_on_gloo(cli, tmp_path):
    """The example's command line (test_runs_on_cpu leaves it to this test): the record's sweep."""
    _, record = cli.quick_record("collectives.nccl_latency", tmp_path, timeout=300)
    sizes = lat.sizes(quick=True)
    sweep = {(r.case["method"], r.case["bytes"]): r.metrics
             for r in record.results if r.case["part"] == "sweep"}
    assert set(sweep) == {(m, n) for m in ("one call", "back to back") for n in sizes}
    for (method, _), metrics in sweep.items():
        assert set(metrics) == {"time", "algbw", "busbw", "vs_smallest"}
        t = metrics["time"]
        assert t.method == "host clock, max over 2 ranks per sample, interleaved rounds" and t.n == 5
        assert t.inner == (1 if method == "one call" else 8)
    # No graphs on the CPU: no graphed rows, no alpha, and a note that says so.
    assert not [r for r in record.results if r.case["part"] != "sweep"]
    assert "graphed" in record.notes
    assert len(record.checks) == 2 * len(sizes) and all(c.passed for c in record.checks)
    assert lat.TP_DECODE_BYTES in sizes and sizes[0] == 1024


@pytest.mark.usefixtures("ranks_from_a_forkserver")
def test_nccl_latency_three_ranks_sum_what_is_computed_locally():
    config = {"sizes": [1024, 4096], "calls": 3, "warmup": 0, "reps": 2, "seed": 1234}
    result = ring.spawn(lat.latency, 3, "gloo", config)
    for n in config["sizes"]:
        for i, which in enumerate((0, config["calls"] - 1)):
            want = lat.expected_sum(1234, 3, n, which)
            for rank in range(3):
                got = result["saved"][f"check-{n}-{rank}.pt"]["eager"][i].double()
                assert got.dtype == torch.float64 and got.shape == want.shape
                # bf16: p - 1 = 2 roundings of at most 2^-8 each
                assert (got - want).norm() / want.norm() <= 2 * 2**-8
    times = result["saved"]["times-2.pt"]
    assert set(times) == {f"{m}|{n}" for m in ("one call", "back to back")
                          for n in config["sizes"]}
    assert all(len(v) == 2 and min(v) > 0 for v in times.values())


def test_nccl_latency_inputs_are_reproducible_and_distinct():
    a = lat.rank_input(7, 0, 1024, 0)
    assert a.dtype == torch.bfloat16 and a.numel() == 512
    assert torch.equal(a, lat.rank_input(7, 0, 1024, 0))
    for other in (lat.rank_input(7, 1, 1024, 0), lat.rank_input(7, 0, 1024, 63),
                  lat.rank_input(8, 0, 1024, 0), lat.rank_input(7, 0, 2048, 0)[:512]):
        assert not torch.equal(a, other)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ring_alpha_inverts_the_models_latency_term(gpus):
    t = 8e-6  # a latency-bound all-reduce: the bandwidth term is ~0
    alpha = lat.ring_alpha(t, gpus)
    assert ring_allreduce_seconds(gpus=gpus, nbytes=0, bandwidth=1e9,
                                  latency=alpha) == pytest.approx(t)


# -- timing in ranks: examples.lab.timing.measure_rounds ------------------------
from examples.lab.timing import measure_rounds, round_order  # noqa: E402


def test_measure_rounds_order_before_and_pairing():
    seen = []
    fns = {name: (lambda name=name: seen.append(("call", name))) for name in "ABC"}
    samples = measure_rounds(fns, device=torch.device("cpu"), warmup=1, repetitions=3,
                             inner=2, before=lambda name: seen.append(("before", name)))
    assert {k: len(v) for k, v in samples.items()} == {"A": 3, "B": 3, "C": 3}
    assert all(t > 0 for v in samples.values() for t in v)
    # A warm-up round: before(name), then one call; every sample: before(name) once,
    # then `inner` calls; rounds in round_order.
    expected = [step for name in round_order("ABC", 0) for step in (("before", name), ("call", name))]
    for r in range(3):
        for name in round_order("ABC", r):
            expected += [("before", name), ("call", name), ("call", name)]
    assert seen == expected


def _ddp_left_in_a_cycle(config, device):
    """A DDP model dropped by `del` (it is in a reference cycle): when it is finally
    collected, say whether the process group still existed."""
    import gc
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from examples.collectives.ddp_overlap import make_model, train_step

    gc.disable()  # as when no automatic collection happens to come before exit
    model = DDP(make_model(8, 1, device))
    train_step(model, torch.randn(4, 8), True)
    path = f"{config['keep']}/collected-{dist.get_rank()}.json"

    def collected(path=path):
        with open(path, "w") as f:
            json.dump(dist.is_initialized(), f)

    weakref.finalize(model, collected)
    del model
    return {}


def _teardown_setting(config, device):
    return {"teardown": os.environ.get("TEARDOWN_CUPTI")}


@pytest.mark.usefixtures("ranks_from_a_forkserver")
def test_spawned_ranks_leave_cupti_as_torch_does_and_the_lab_tears_it_down():
    """The lab's process detaches CUPTI after each profiler session (examples.lab.kernels); a
    rank it spawns lives for one group only and keeps torch's default, which the profiler
    studies of ddp_overlap and ddp_probe describe (a process's first trace starts CUPTI)."""
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    assert ring.spawn(_teardown_setting, 2, "gloo", {})["teardown"] == "0"


def test_rank_teardown_frees_ddp_before_the_process_group():  # spawned: its ranks exit as an interpreter does
    """The gloo teardown crash: a DDP model in a reference cycle kept the process group
    alive until interpreter exit. _rank_main collects it while the group still exists."""
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as keep:
        ring.spawn(_ddp_left_in_a_cycle, 2, "gloo", {"keep": keep})
        for rank in (0, 1):
            assert json.loads(pathlib.Path(keep, f"collected-{rank}.json").read_text()) is True


# -- NCCL's TUNING log: what it chose and what it modelled ---------------------
from examples.collectives import _nccl_log as nccl_log  # noqa: E402

# Rank 0's lines as NCCL 2.28.9 wrote them on two H200s (the ddp_probe record's
# notes), with the prefix NCCL_DEBUG_FILE lines carry.
_PREFIX = "host:4242:4242 [0] NCCL INFO "
TUNING_LOG = [_PREFIX + line for line in (
    "  Algorithm   |                            Tree                  |"
    "                            Ring                  |                   CollNetDirect                  |",
    "  Protocol    |             LL |          LL128 |         Simple |             LL |"
    "          LL128 |         Simple |             LL |          LL128 |         Simple |",
    " Max NThreads |            512 |            640 |            512 |            512 |"
    "            640 |            512 |            512 |            640 |            512 |",
    "    AllReduce |     8.0/  61.1 |    16.5/ 180.6 |    16.4/ 232.2 |     7.8/ 141.0 |"
    "    17.8/ 331.2 |    15.2/ 360.0 |     0.8/   0.0 |     0.8/   0.0 |    39.2/   0.0 |",
    "AllReduce: 4 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}",
    "AllReduce: 33554432 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..23}",
    "AllReduce: 65536 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..7}",
    "AllGather: 536870912 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}",
)] + ["host:4242:4250 [0] NCCL INFO Channel 00/24 : 0 1", "unrelated program output"]


def test_parse_choices_of_real_lines():
    choices = nccl_log.parse_choices(TUNING_LOG)
    assert choices["AllReduce", 33554432] == {"algo": "RING", "proto": "SIMPLE", "channels": 24}
    assert choices["AllReduce", 65536] == {"algo": "RING", "proto": "LL", "channels": 8}
    assert len(choices) == 4
    # The timed size is the largest: the 4-byte all-reduce is a barrier.
    assert nccl_log.choice_for(choices, "all_reduce") == (
        33554432, {"algo": "RING", "proto": "SIMPLE", "channels": 24})
    assert nccl_log.choice_for(choices, "all_gather")[1]["channels"] == 16
    assert nccl_log.choice_for(choices, "reduce_scatter") is None
    # A line without the channel range (older NCCL) still names the choice.
    old = nccl_log.parse_choices(["AllReduce: 1024 Bytes -> Algo TREE proto LL"])
    assert old["AllReduce", 1024] == {"algo": "TREE", "proto": "LL", "channels": None}


def test_parse_cost_table_of_real_lines():
    table = nccl_log.parse_cost_table(TUNING_LOG)
    row = table["AllReduce"]
    assert set(table) == {"AllReduce"}  # "Max NThreads" is no collective
    assert row["Ring", "LL"] == (7.8, 141.0) and row["Tree", "LL"] == (8.0, 61.1)
    assert row["Ring", "Simple"] == (15.2, 360.0) and row["CollNetDirect", "Simple"] == (39.2, 0.0)
    assert len(row) == 9
    # Only what NCCL can run here (bandwidth > 0) is a modelled latency.
    modelled = lat.nccl_modelled_latency(TUNING_LOG)
    assert modelled["Ring/LL"] == 7.8 and "CollNetDirect/LL" not in modelled


def test_tuning_log_sets_and_restores_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.delenv("NCCL_DEBUG_SUBSYS", raising=False)
    with nccl_log.tuning_log(str(tmp_path)):
        assert os.environ["NCCL_DEBUG"] == "INFO"
        assert os.environ["NCCL_DEBUG_SUBSYS"] == "TUNING"
        assert os.environ["NCCL_DEBUG_FILE"].startswith(str(tmp_path))
    with nccl_log.tuning_log(str(tmp_path), connections=True):  # the channels' connections too
        assert os.environ["NCCL_DEBUG_SUBSYS"] == "TUNING,INIT"
    assert os.environ["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_SUBSYS" not in os.environ


#: Connection lines as NCCL writes them (INIT): NVLink peer to peer, the network with a [send] or
#: [receive] tag, an older NCCL's channel without its sub-index, and a line that is no connection.
CONNECTION_LOG = [
    "vm:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "vm:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "vm:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
    "vm:1:2 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "vm:1:2 [0] NCCL INFO Channel 11 : 0[39000] -> 1[57000] via SHM/direct/direct",
    "vm:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    # rank 1's own lines, in the same folder when one command started both ranks
    "vm:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM",
    "vm:1:3 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/IB/0/GDRDMA",
]


def test_the_interconnect_is_read_from_the_connection_lines():
    counts = nccl_log.parse_interconnect(CONNECTION_LOG)
    # The network's path keeps GDRDMA (GPUDirect RDMA), not the card's number.
    assert counts == {"NET/IB/GDRDMA": 2, "P2P/CUMEM": 1, "P2P/CUMEM/read": 1, "SHM/direct/direct": 1}
    assert nccl_log.describe_interconnect(counts) == (
        "NET/IB/GDRDMA (2 connections), P2P/CUMEM (1 connection), P2P/CUMEM/read (1 connection), "
        "SHM/direct/direct (1 connection)")
    assert nccl_log.describe_interconnect(nccl_log.parse_interconnect(TUNING_LOG)) == (
        "no connection line in NCCL's INIT log")
    # Rank 0's count is the same from every rank's logs (one command) as from its own (torchrun).
    own = [line for line in CONNECTION_LOG if " [0] " in line]
    assert nccl_log.parse_interconnect(own) == counts
    assert nccl_log.parse_interconnect(CONNECTION_LOG, rank=1) == {"NET/IB/GDRDMA": 1, "P2P/CUMEM": 1}


def test_nccl_choices_asks_for_the_connections_too(monkeypatch):
    """The side processes that log NCCL's choices log its connections as well: the ring topic's
    record names the interconnect from them."""
    seen = {}
    monkeypatch.setattr(ring, "spawn",
                        lambda worker, world, backend, config: seen.update(subsys=os.environ.get("NCCL_DEBUG_SUBSYS")))
    nccl_log.nccl_choices(2, [("all_reduce", 4096)])
    assert seen == {"subsys": "TUNING,INIT"}


def test_the_ring_topic_notes_the_interconnect_beside_the_choices(monkeypatch):
    notes, values = {}, []
    lab = types.SimpleNamespace(note=notes.__setitem__, value=lambda **kw: values.append(kw))
    monkeypatch.setattr(nccl_log, "nccl_choices", lambda world, calls: CONNECTION_LOG + TUNING_LOG)
    ring._keep_choices(lab, 2, 33554432, ["all_reduce", "all_to_all"])
    assert notes["interconnect NCCL chose (INIT log)"].startswith("NET/IB/GDRDMA (2 connections)")
    assert notes["NCCL's choice per collective (TUNING log)"]["all_reduce"].startswith("RING/SIMPLE, 24 channel")
    assert [v["value"] for v in values] == [24]


# -- t = beta + 2(p-1) alpha ----------------------------------------------------
def test_fit_latency_separates_the_call_from_the_steps():
    # NCCL 2.28's own model for a ring/LL all-reduce on NVLink (tuning.cc):
    # 6.6 us per call, 0.6 us per step.
    model = {p: 6.6 + 2 * (p - 1) * 0.6 for p in (2, 4, 8)}
    beta, alpha = lat.fit_latency({p: model[p] for p in (2, 4)})
    assert (beta, alpha) == (pytest.approx(6.6), pytest.approx(0.6))
    beta, alpha = lat.fit_latency(model)
    assert (beta, alpha) == (pytest.approx(6.6), pytest.approx(0.6))
    # The bound of one p charges the call to the steps: at p = 2 it is
    # beta / 2 + alpha, far above alpha.
    assert lat.ring_alpha(model[2], 2) == pytest.approx(3.3 + 0.6)
    # Least squares: a noisy third point moves the fit, not an exact one.
    beta, alpha = lat.fit_latency({2: 7.8, 4: 10.2, 8: 16.0})
    assert 0.6 < alpha < 0.8 and 5.5 < beta < 6.6
    with pytest.raises(ValueError, match="two values of p"):
        lat.fit_latency({2: 7.8})


@pytest.mark.parametrize("gpus,worlds", [(2, [2]), (3, [2, 3]), (4, [2, 4]), (8, [2, 4, 8])])
def test_fit_worlds(gpus, worlds):
    assert lat.fit_worlds(gpus) == worlds


# -- collectives.ddp_overlap: every rank, and NCCL's share of the SMs ------------
from examples.collectives import ddp_overlap as ddp  # noqa: E402


def test_slowest_rank_per_sample_keeps_rounds_paired():
    """One helper for every multi-rank timing (ring, latency, DDP, probe): sample i is
    the slowest rank's sample i, and DDP's steps take it per variant of a spawned run."""
    from examples.collectives.ring_allreduce import slowest_rank

    assert slowest_rank([[1.0, 5.0, 2.0], [2.0, 4.0, 1.0]]) == [2.0, 5.0, 2.0]
    with pytest.raises(ValueError):  # a rank with a sample missing is an error
        slowest_rank([[1.0, 2.0], [1.0]])
    run = {"saved": {"steps-0.pt": {"A": [1.0, 5.0, 2.0], "B": [3.0, 1.0, 1.0]},
                     "steps-1.pt": {"A": [2.0, 4.0, 1.0], "B": [1.0, 2.0, 4.0]}}}
    assert ddp.steps_of(run, 2) == {"A": [2.0, 5.0, 2.0], "B": [3.0, 2.0, 4.0]}


def _k(name, start, dur):
    return {"name": name, "start": start, "dur": dur}


def test_gemm_contention_pairs_the_same_gemms():
    # With communication: the 2nd and 3rd GEMM overlap an all-reduce and run
    # 1.5x and 1.2x longer; the 1st does not overlap and runs as without.
    with_comm = [_k("nvjet_tst_128x256", 0, 10), _k("elementwise", 10, 1),
                 _k("nvjet_tst_128x256", 11, 15), _k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 12, 20),
                 _k("sm90_xmma_gemm_bf16", 27, 12)]
    without = [_k("nvjet_tst_128x256", 0, 10), _k("elementwise", 10, 1),
               _k("nvjet_tst_128x256", 11, 10), _k("sm90_xmma_gemm_bf16", 21, 10)]
    got = ddp.gemm_contention(with_comm, without)
    assert got["alone"] == [1.0]
    assert got["overlapped"] == [pytest.approx(1.5), pytest.approx(1.2)]
    # A kernel that ends exactly where the all-reduce starts did not overlap it.
    touching = [_k("nvjet", 0, 12), _k("ncclDevKernel_AllReduce", 12, 5)]
    assert ddp.gemm_contention(touching, [_k("nvjet", 0, 12)]) == {"overlapped": [], "alone": [1.0]}
    # Different GEMM sequences cannot be paired: nothing, rather than a wrong pairing.
    assert ddp.gemm_contention(with_comm, without[:2]) == {"overlapped": [], "alone": []}


def test_environment_sets_and_restores(monkeypatch):
    monkeypatch.delenv("NCCL_MAX_CTAS", raising=False)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    with nccl_log.environment({"NCCL_MAX_CTAS": "2", "NCCL_DEBUG": "INFO", "NCCL_ALGO": None}):
        assert os.environ["NCCL_MAX_CTAS"] == "2" and os.environ["NCCL_DEBUG"] == "INFO"
        assert "NCCL_ALGO" not in os.environ  # None: unset for the processes inside
    assert "NCCL_MAX_CTAS" not in os.environ and os.environ["NCCL_DEBUG"] == "WARN"
    assert os.environ["NCCL_ALGO"] == "Tree"
    assert ddp.SETTINGS["default"] == {} and ddp.SETTINGS["NCCL_MAX_CTAS=2"] == {"NCCL_MAX_CTAS": "2"}


def test_ddp_overlap_record_on_gloo(cli, tmp_path):
    """The example's command line (test_runs_on_cpu leaves it to this test): the record's steps and contention."""
    _, record = cli.quick_record("collectives.ddp_overlap", tmp_path, timeout=300)
    steps = {r.case["variant"]: r.metrics for r in record.results if "variant" in r.case}
    assert set(steps) == set(ddp.VARIANTS)
    for metrics in steps.values():
        assert metrics["step"].method == "host clock, max over 2 ranks per sample, interleaved rounds"
        assert metrics["step"].n == 5
    assert steps["one bucket"]["vs_default"].n == 5  # paired, round by round
    contention = [r for r in record.results if r.case.get("part") == "contention"]
    # gloo: NCCL's settings mean nothing, so the default only; no traces on the CPU.
    assert [(r.case["nccl"], set(r.metrics)) for r in contention] == [("default", {"comm_cost"})]
    assert contention[0].metrics["comm_cost"].n == 5


# -- collectives.ddp_host: DDP's host work on one rank ----------------------------------------
from examples.collectives import ddp_host  # noqa: E402


def test_ddp_host_record_on_gloo(cli, tmp_path):
    """The example's command line (test_runs_on_cpu leaves it to this test): both clocks for every
    variant, the same samples; the hook's time only where a Python hook ran; no host-over-GPU
    ratio on the CPU, where both clocks time the same work."""
    _, record = cli.quick_record("collectives.ddp_host", tmp_path, timeout=300)
    rows = {r.case["variant"]: r.metrics for r in record.results}
    assert set(rows) == set(ddp_host.VARIANTS)
    for name, metrics in rows.items():
        assert metrics["step"].n == metrics["host"].n == 5
        assert metrics["free_step"].n == 2 and "back to back" in metrics["free_step"].method
        assert metrics["host"].median <= metrics["step"].median  # enqueued before it finished
        assert "host_share" not in metrics
        python_hook = ddp_host.VARIANTS[name][2]
        assert ("hook" in metrics) == python_hook
        if python_hook:
            assert metrics["buckets"].median >= 1
            assert metrics["hook"].n == 5 * metrics["buckets"].median


def test_ddp_host_step_notes_one_host_time_per_step():
    """host_timed_step notes one host time per step (through no_sync when not communicating) and
    leaves the gradients zeroed for the next step; the record's pairing of host and GPU samples
    is checked on the command line's record above."""
    host: list[float] = []
    model = torch.nn.Linear(4, 4)

    class Plain:  # stands in for DDP: no_sync and the call are all the step uses
        def __call__(self, x):
            return model(x)

        def no_sync(self):
            import contextlib
            return contextlib.nullcontext()

        def zero_grad(self, set_to_none=False):
            model.zero_grad(set_to_none=set_to_none)

    for _ in range(4):
        ddp_host.host_timed_step(Plain(), torch.randn(2, 4), False, host)
    assert len(host) == 4 and all(h > 0 for h in host)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


# -- collectives.ddp_levers: compression, bucket views, a static graph ------------------------
from examples.collectives import ddp_levers as levers  # noqa: E402


def test_ddp_levers_record_on_gloo(cli, tmp_path):
    """The example's command line (test_runs_on_cpu leaves it to this test): every lever against
    plain DDP, its bytes, and its gradients checked first."""
    _, record = cli.quick_record("collectives.ddp_levers", tmp_path, timeout=300)
    rows = {r.case["variant"]: r.metrics for r in record.results}
    assert set(rows) == set(levers.VARIANTS)
    for name, metrics in rows.items():
        assert metrics["step"].method == "host clock, max over 2 ranks per sample, interleaved rounds"
        assert metrics["step"].n == 5
        if name != levers.PLAIN:
            assert metrics["vs_plain"].n == 5  # paired, round by round
        assert "peak_memory" not in metrics  # CUDA's allocator only
    plain = rows[levers.PLAIN]["all_reduced"].median
    # One all-reduce per bucket, every gradient once: fp32, or bf16 through the hook.
    params = 4 * (256 * 256 + 256)
    assert plain == pytest.approx(4 * params / 2**20)
    for name, (compress, _, _) in levers.VARIANTS.items():
        assert rows[name]["all_reduced"].median == pytest.approx(plain / 2 if compress else plain)
        assert rows[name]["buckets"].median == rows[levers.PLAIN]["buckets"].median
        if name != levers.PLAIN:  # bit for bit, or within bf16's rounding (and not zero)
            error = rows[name]["grad_error"].median
            assert (1e-4 < error < levers.BF16_TOLERANCE) if compress else error == 0
    checks = {c.name: c for c in record.checks}
    assert len(checks) == 2 * (len(levers.VARIANTS) - 1) and all(c.passed for c in checks.values())
    assert all(c.tolerance == (levers.BF16_TOLERANCE if "compress" in n or "all three" in n else 0.0)
               for n, c in checks.items())


def test_all_reduce_bytes_counts_what_each_call_hands_the_backend(monkeypatch):
    calls = []
    monkeypatch.setattr(levers.dist, "all_reduce", lambda t, *a, **k: calls.append(t.dtype))
    sent = []
    with levers.all_reduce_bytes(sent):
        levers.dist.all_reduce(torch.zeros(10))
        levers.dist.all_reduce(torch.zeros(6, dtype=torch.bfloat16), async_op=True)
    levers.dist.all_reduce(torch.zeros(3))  # after the block: not counted
    assert sent == [40, 12] and calls == [torch.float32, torch.bfloat16, torch.float32]
    big = torch.randn(3 << 23, dtype=torch.float64).float()  # more than one chunk
    assert levers.relative_error(big, big) == 0
    assert levers.relative_error(big * 1.5, big) == pytest.approx(0.5, rel=1e-6)


def test_a_refused_setting_is_one_line_from_the_ranks_own_message():
    exc = RuntimeError("process 1 terminated with exit code 1\n...\nncclInvalidUsage: bad NCCL_MAX_CTAS")
    assert nccl_log.refusal(exc) == "RuntimeError: ncclInvalidUsage: bad NCCL_MAX_CTAS"
    assert nccl_log.refusal(ValueError("")) == "ValueError: ?"
    assert len(nccl_log.refusal(RuntimeError("x" * 1000))) == 300


# -- the two-level (hierarchical) all-reduce across nodes ------------------------------------
from examples.collectives.ring_model import (  # noqa: E402
    faster_by_size,
    flat_ring_seconds,
    hierarchical_allreduce_seconds,
)

NDR = dict(nodes=2, gpus_per_node=8, intra_bandwidth=450e9, inter_bandwidth=50e9)


def test_hierarchical_model_worked_numbers():
    # 2 x 8 GPUs, NVLink 450 GB/s each way, one 400 Gb/s NIC (50 GB/s) per GPU, 1 GB:
    # inside: 2 (7/8) 1e9 / 450e9 = 3.889 ms; across: 2 (1/2) (1e9/8) / 50e9 = 2.5 ms.
    assert hierarchical_allreduce_seconds(nbytes=1e9, **NDR) == pytest.approx(14 / 8 / 450 + 1 / 400)
    # Eight flat rings, one per NIC, 1/8 of the message each: 2 (15/16) (1e9/8) / 50e9 = 4.69 ms.
    assert flat_ring_seconds(nbytes=1e9, **NDR) == pytest.approx(2 * 15 / 16 / 8 / 50)
    assert flat_ring_seconds(nbytes=1e9, **NDR, rings=1) == pytest.approx(2 * 15 / 16 / 50)  # one ring
    assert faster_by_size(**NDR) == [(0.0, "flat rings")]  # fewer bytes at network pace per NIC
    lat = dict(intra_latency=2e-6, inter_latency=5e-6)
    # Both cross the network 2(n-1) = 2 times (NCCL's nInterSteps); the two-level one takes 14
    # NVLink steps, the flat rings' 30 steps leave 28 on NVLink: the two-level one starts ahead
    # by 28 us and the flat rings overtake it at 28 us / 1.70 ps per byte, about 16.5 MB.
    assert hierarchical_allreduce_seconds(nbytes=0, **NDR, **lat) == pytest.approx(14 * 2e-6 + 2 * 5e-6)
    assert flat_ring_seconds(nbytes=0, **NDR, **lat) == pytest.approx(28 * 2e-6 + 2 * 5e-6)
    assert flat_ring_seconds(nbytes=0, nodes=4, gpus_per_node=8, intra_bandwidth=1, inter_bandwidth=1,
                             **lat) == pytest.approx((62 - 6) * 2e-6 + 6 * 5e-6)  # 4 nodes: 6 network steps
    [(_, first), (cross, second)] = faster_by_size(**NDR, **lat)
    assert (first, second) == ("two-level", "flat rings")
    assert cross == pytest.approx(28e-6 / (14 / 8 / 450e9 + 1 / 400e9 - 2 * 15 / 16 / 8 / 50e9))
    for m in (cross * 0.9, cross * 1.1):
        h = hierarchical_allreduce_seconds(nbytes=m, **NDR, **lat)
        f = flat_ring_seconds(nbytes=m, **NDR, **lat)
        assert (h < f) == (m < cross)


def test_hierarchical_model_edges():
    one_gpu_per_node = dict(NDR, gpus_per_node=1)  # no NVLink phase: the flat ring itself
    assert hierarchical_allreduce_seconds(nbytes=1e9, **one_gpu_per_node, call=1e-5) == pytest.approx(
        flat_ring_seconds(nbytes=1e9, **one_gpu_per_node, call=1e-5))
    one_node = dict(NDR, nodes=1)  # no network phase: the node's ring over NVLink, in two calls
    assert hierarchical_allreduce_seconds(nbytes=1e9, **one_node) == pytest.approx(
        ring_allreduce_seconds(gpus=8, nbytes=1e9, bandwidth=450e9))
    assert faster_by_size(**one_node, call=1e-5) == [(0.0, "flat rings")]  # never slower: one call fewer
    assert flat_ring_seconds(nbytes=1e9, **dict(NDR, nodes=1, gpus_per_node=1)) == 0
