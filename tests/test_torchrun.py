"""Chapter 6 under torchrun: two "nodes" of two CPU ranks each on this machine (gloo, a c10d
rendezvous), the same examples and workers as the one-command spawn path, rank 0's records
validated; and a launcher's bad environment as one line, never a traceback."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from examples.collectives import _launch
from examples.collectives._launch import Launch, LaunchError, from_environment

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")
LAUNCHER_VARIABLES = (*_launch.REQUIRED, "TORCHELASTIC_RUN_ID", "GROUP_RANK", "LOCAL_WORLD_SIZE")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_launcher(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in LAUNCHER_VARIABLES}


def test_two_nodes_of_two_cpu_ranks_under_torchrun(cli, tmp_path):
    """Two torchrun agents (--nnodes 2, node ranks 0 and 1) on localhost, each starting two gloo
    ranks, run the ring check and quick sweep and the latency sweep through the lab runner; the
    rank 0 of the four (on whichever node the rendezvous made it) writes both records."""
    from examples.lab.records import load_records

    out = tmp_path / "records"
    endpoint = f"127.0.0.1:{_free_port()}"
    env = _no_launcher(cli.cpu_env())
    procs = [subprocess.Popen(
        [str(TORCHRUN), "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "book-ci",
         "-m", "examples.lab", "run", "collectives.ring_allreduce", "collectives.nccl_latency",
         "--device", "cpu", "--quick", "--out", str(out)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        stdin=subprocess.DEVNULL, start_new_session=True) for node in (0, 1)]
    began, outputs = time.monotonic(), []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(1, 240 - (time.monotonic() - began)))[0])
    except subprocess.TimeoutExpired:
        for proc in procs:  # the agents this test started, and their ranks
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("torchrun ran past 240 s\n" + "\n".join(p.communicate()[0] for p in procs))
    said = "\n".join(f"--- node {i}\n{text}" for i, text in enumerate(outputs))
    assert [p.returncode for p in procs] == [0, 0], said
    # torchrun's own agents may log a traceback at their exit barrier when the agent that hosts
    # the rendezvous store leaves first (a race in torch.distributed.elastic, after every rank
    # has exited 0): not the book's code. A traceback from a rank, the runner or the example fails.
    ours = "\n".join(line for line in said.splitlines() if "torch/distributed/elastic/" not in line)
    assert "Traceback" not in ours, said

    checked = cli.run("-m", "examples.lab", "validate", out)
    assert checked.returncode == 0 and "2 records valid" in checked.stdout, cli.explain(checked)
    records = {r.topic: r for r in load_records(out)}
    assert set(records) == {"collectives.ring_allreduce", "collectives.nccl_latency"}
    launch = {"launcher": "torchrun", "backend": "gloo", "nodes": 2, "ranks": 4}
    for record in records.values():
        assert record.run.quick and record.machine.device == "cpu"
        assert record.checks and all(c.passed for c in record.checks), record.checks
        assert {k: record.notes["launch"][k] for k in launch} == launch
        per_node = record.notes["launch"]["per node"]
        assert len(per_node) == 2 and set(per_node.values()) == {"2 x CPU"}
        assert {r.case["gpus"] for r in record.results} == {4}

    ring = records["collectives.ring_allreduce"]
    from examples.collectives.ring_allreduce import CHECK_SIZES

    # Every rank's hand ring, on both nodes, came back to rank 0 and was checked there.
    assert len(ring.checks) == len(CHECK_SIZES) * 4
    assert {c.name.rsplit("rank ", 1)[1] for c in ring.checks} == {"0", "1", "2", "3"}
    sweep = {(r.case["impl"], r.case["bytes"]) for r in ring.results if r.case["part"] == "sweep"}
    assert ("hand ring", 1 << 20) in sweep and ("dist.all_reduce", 1 << 10) in sweep
    # The four ranks summed what rank 0's seed makes: the followers ran rank 0's config.
    latency = records["collectives.nccl_latency"]
    assert any("4 ranks vs the sum computed locally" in c.name for c in latency.checks)


# -- the launcher's environment --------------------------------------------------------------

FULL = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}


def test_no_launcher_is_the_spawn_path():
    assert from_environment({}) is None
    assert from_environment({"MASTER_ADDR": "node0", "MASTER_PORT": "29500"}) is None  # a cluster's defaults
    assert from_environment(FULL) == Launch(rank=1, world=4, local_rank=1)


@pytest.mark.parametrize("change,words", [
    ({"LOCAL_RANK": None}, "LOCAL_RANK missing"),
    ({"MASTER_PORT": ""}, "MASTER_PORT missing"),
    ({"RANK": "one"}, "RANK='one' is not a whole number"),
    ({"RANK": "4"}, "RANK=4 does not fit WORLD_SIZE=4"),
    ({"LOCAL_RANK": "2"}, "LOCAL_RANK=2 does not fit RANK=1"),
    ({"WORLD_SIZE": "0", "RANK": "0", "LOCAL_RANK": "0"}, "WORLD_SIZE=0"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
])
def test_a_bad_environment_is_one_line(change, words):
    env = {k: v for k, v in {**FULL, **change}.items() if v is not None}
    with pytest.raises(LaunchError) as caught:
        from_environment(env)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_group_larger_than_the_launch_is_refused(monkeypatch):
    with pytest.raises(LaunchError, match="group of 8 ranks; the launcher started 4"):
        _launch.check_world(8, Launch(rank=0, world=4, local_rank=0))
    _launch.check_world(2, Launch(rank=0, world=4, local_rank=0))  # a smaller group: ranks 0 and 1
    for k, v in {**FULL, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(LaunchError, match="at least 2 ranks; the launcher started 1"):
        _launch.world_size(2)
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("RANK", "9")
    assert _launch.world_size(2) == 16


def test_a_log_nccl_cannot_start_mid_process_is_refused_in_one_line(monkeypatch):
    """Under torchrun a rank outlives its calls; NCCL reads NCCL_DEBUG once per process, so a
    call that logs differently needs ncclResetDebugInit, or a one-line refusal."""
    monkeypatch.setattr(_launch, "_AT_START", {k: None for k in (*_launch.NCCL_READ_ONCE,
                                                                 *_launch.NCCL_FIXED_PER_PROCESS)})
    tuning = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING", "NCCL_DEBUG_FILE": "/tmp/x.%p"}
    with pytest.raises(LaunchError) as caught:
        _launch.check_nccl_can_change(tuning, can_reset=False)
    words = str(caught.value)
    assert "NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=TUNING" in words and "\n" not in words
    _launch.check_nccl_can_change(tuning, can_reset=True)
    # What each communicator reads again needs nothing: a protocol, an algorithm.
    _launch.check_nccl_can_change({"NCCL_PROTO": "LL", "NCCL_ALGO": "Tree"}, can_reset=False)
    # A CTA cap NCCL keeps from the process's start: refused, whatever the log can do.
    with pytest.raises(LaunchError, match="NCCL_MAX_CTAS=2, but under torchrun NCCL keeps the NCCL_MAX_CTAS "
                                          r"this process started with \(unset\)"):
        _launch.check_nccl_can_change({"NCCL_MAX_CTAS": "2"}, can_reset=True)


def test_a_follower_whose_call_fails_says_so_and_ends_the_launch(monkeypatch, capsys):
    """A follower that waited for the next call after its own failed would leave rank 0 blocked
    in the failed call's collectives until NCCL's timeout: it says why in one line and exits,
    which makes torchrun stop every rank."""
    import pickle

    from examples.collectives import _launch

    calls = iter([pickle.dumps((None, 2, "gloo", {}, {})), b"done"])
    monkeypatch.setattr(_launch, "_wait", lambda store, key: next(calls))

    def broken(*args):
        raise RuntimeError("Connection closed by peer\ngloo: the peer went away")

    class Left(Exception):
        pass

    def leave(status):
        raise Left(status)

    monkeypatch.setattr(_launch, "_run", broken)
    monkeypatch.setattr(_launch, "_leave", leave)
    monkeypatch.setitem(_launch._state, "calls", 0)
    with pytest.raises(Left) as left:
        _launch._follow(_launch.Launch(rank=1, world=2, local_rank=1), None, None)
    assert left.value.args == (1,)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rank 1, call 1: RuntimeError: gloo: the peer went away; this rank leaves, "
                   "and torchrun ends the others"]


def test_a_process_without_nccl_reports_it_cannot_reset_its_log():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch loads NCCL")  # CI's CPU torch has none
    assert _launch._reset_debug_function() is None
    assert _launch.nccl_reads_debug_again() is False


@pytest.mark.parametrize("env,words", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, "a launcher's environment is incomplete: RANK, WORLD_SIZE set"),
    ({**FULL, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}, "a collective needs at least 2 ranks"),
])
def test_the_example_says_a_bad_launch_in_one_line(cli, env, words):
    proc = cli.run("-m", "examples.collectives.ring_allreduce", "--device", "cpu", "--quick",
                   env=_no_launcher(cli.cpu_env()) | env)
    line = cli.one_line_error(proc, status=1)
    assert line.startswith("python -m examples.collectives.ring_allreduce: LaunchError: ") and words in line, line


# -- the Slurm script ----------------------------------------------------------------------------

SBATCH = REPO / "examples" / "collectives" / "slurm_collectives.sbatch"


def test_the_sbatch_script_starts_one_torchrun_per_node(tmp_path):
    """With stand-ins for srun, scontrol and nvidia-smi: the command srun is given, for two nodes
    of eight GPUs. The one task per node gets all the node's CPUs (it starts every rank of the
    node; bound to one CPU, they would all share it), and without SLURM_GPUS_ON_NODE a node's
    GPUs are counted by index, not by the lines of ``nvidia-smi -L`` (which lists MIG slices too)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    said = tmp_path / "srun.args"
    # srun runs the one command it is given on the first node (the GPU count); the launch is recorded.
    (bin_ / "srun").write_text('#!/bin/sh\nif [ "$1" = --nodes=1 ]; then shift 2; exec "$@"; fi\n'
                               f'printf "%s\\n" "$@" >> {said}\n')
    (bin_ / "scontrol").write_text('#!/bin/sh\nprintf "gpu-a\\ngpu-b\\n"\n')
    (bin_ / "nvidia-smi").write_text('#!/bin/sh\nif [ "$1" = -L ]; then printf "GPU 0\\n  MIG 0\\n  MIG 1\\nGPU 1\\n"; '
                                     'else printf "0\\n1\\n"; fi\n')
    for stub in bin_.iterdir():
        stub.chmod(0o755)
    python = tmp_path / "python"  # the validate step after srun: a stand-in too
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "SLURM_NNODES": "2", "SLURM_JOB_ID": "77",
           "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64",
           "PYTHON": str(python)}
    proc = subprocess.run(["bash", str(SBATCH), "collectives.ring_allreduce"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    args = said.read_text().splitlines()
    assert args[:4] == ["--ntasks-per-node=1", "--cpus-per-task=64", "--kill-on-bad-exit=1", str(python)]
    line = " ".join(args)
    assert ("-m torch.distributed.run --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d "
            "--rdzv-endpoint gpu-a:29500 --rdzv-id 77 -m examples.lab run collectives.ring_allreduce "
            "--device cuda --out records-slurm-77") in line, line
    assert "2 node(s) x 8 rank(s)" in proc.stdout
    said.unlink()
    counted = subprocess.run(["bash", str(SBATCH)], cwd=REPO, capture_output=True, text=True, timeout=30,
                             env={k: v for k, v in env.items() if k != "SLURM_GPUS_ON_NODE"})
    assert counted.returncode == 0, counted.stderr
    assert "--nproc-per-node 2 " in " ".join(said.read_text().splitlines()) + " ", "two GPUs, not four lines"
    unset = subprocess.run(["bash", str(SBATCH)], cwd=REPO, env={"PATH": env["PATH"]},
                           capture_output=True, text=True, timeout=30)
    assert unset.returncode != 0 and "run this script with sbatch" in unset.stderr


# -- on GPUs: the two launchers, one record ------------------------------------
GPU_PAIR = Path(__file__).resolve().parent / "fixtures" / "torchrun-vs-spawn"


def test_torchrun_on_one_node_reproduced_the_spawn_paths_record():
    """What a two-GPU machine showed (2 x H200, 2026-11-27, code of 8d2e8f4): the ring topic run by
    the lab's one command and by ``torchrun --nproc-per-node 2`` on the same machine. Both records
    load (the schema's checks), measured the same code, passed the same correctness checks, and
    hold the same cases with the same metrics; only the launch note tells them apart."""
    from examples.lab.records import parse_record

    spawned, launched = (parse_record((GPU_PAIR / f"{name}.json").read_text(), name) for name in ("spawn", "torchrun"))
    assert spawned.topic == launched.topic == "collectives.ring_allreduce"
    assert spawned.source_sha256 == launched.source_sha256
    assert spawned.machine.gpu_count == launched.machine.gpu_count == 2

    def cases(record):
        return {tuple(sorted(row.case.items())): sorted(row.metrics) for row in record.results}

    assert cases(spawned) == cases(launched) and len(cases(launched)) == 66
    assert [c.name for c in spawned.checks] == [c.name for c in launched.checks]
    assert "launch" not in spawned.notes
    assert launched.notes["launch"]["launcher"] == "torchrun"
    assert launched.notes["launch"]["ranks"] == 2 and launched.notes["launch"]["nodes"] == 1
