"""The decode step split over GPUs: tensor parallelism, Megatron style.

Each GPU keeps a slice of every layer: its share of the query and key/value
heads (the q/k/v projection split by rows, the output projection by
columns), its share of the FFN (gate/up by rows, down by columns) and of the
vocabulary. Each layer then needs two all-reduces of one token's hidden
vector (8 KiB in bf16 at hidden 4096), after attention and after the FFN,
and the logits one all-gather: 65 collectives a token for 32 layers.

On the same machine and in the same run this example times one GPU with
the whole model and ``p`` GPUs with a slice each, both as CUDA graphs, and
the collectives alone (the same 65 graphed), so the gap between the ``p``-GPU
step and ``1/p`` of the one-GPU step can be laid next to the communication it
must contain. The ring model (Chapter 6) predicts one all-reduce from a
latency and a bandwidth that this run measures: 1 KiB graphed (latency) and
256 MiB (bandwidth). On the CPU, two gloo ranks run the tiny configuration
and check the split step against the whole one.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from examples.capstone.model import (
    LLAMA3_8B, TINY, Config, Decoder, Layer, StaticCache, Weights, layer_step, prefill,
    random_weights, rope_tables)
from examples.collectives.ring_allreduce import spawn
from examples.collectives.ring_model import ring_allreduce_seconds

#: Two GPUs at least (one collective needs two); the CPU path runs two gloo ranks.
MIN_GPUS = 2
PROMPT, STEPS = 512, 64
LOGIT_TOLERANCE = 5e-2  # bf16 over 32 layers: about 2 % from summation order alone


# --8<-- [start:shard]
def shard(w: Weights, rank: int, world: int) -> Weights:
    """This rank's slice: heads, FFN columns and vocabulary rows, 1/world each."""
    c = w.config
    hd = c.head_dim
    heads, kv, ffn, vocab = c.heads // world, c.kv_heads // world, c.ffn // world, c.vocab // world

    def rows(t, start, n):  # a contiguous copy: the full tensor can then be freed
        return t[start:start + n].contiguous()

    layers = []
    for lay in w.layers:
        q, k, v = lay.wqkv.split([c.heads * hd, c.kv_heads * hd, c.kv_heads * hd])
        wqkv = torch.cat([rows(q, rank * heads * hd, heads * hd), rows(k, rank * kv * hd, kv * hd),
                          rows(v, rank * kv * hd, kv * hd)])
        wo = lay.wo[:, rank * heads * hd:(rank + 1) * heads * hd].contiguous()
        gate, up = lay.w13.chunk(2)
        w13 = torch.cat([rows(gate, rank * ffn, ffn), rows(up, rank * ffn, ffn)])
        w2 = lay.w2[:, rank * ffn:(rank + 1) * ffn].contiguous()
        layers.append(Layer(lay.attn_norm, wqkv, wo, lay.ffn_norm, w13, w2))
    mine = replace(c, heads=heads, kv_heads=kv, ffn=ffn, vocab=vocab)
    return Weights(mine, w.embed, layers, w.norm, rows(w.output, rank * vocab, vocab))


def all_reduce(partial: torch.Tensor) -> torch.Tensor:
    """Sum the ranks' partial outputs (after the row-split matmuls)."""
    dist.all_reduce(partial)
    return partial


def gather_logits(local: torch.Tensor) -> torch.Tensor:
    """[batch, vocab/world] on each rank -> [batch, vocab] on every rank."""
    world = dist.get_world_size()
    out = local.new_empty(world, *local.shape)
    if local.is_cuda:
        dist.all_gather_into_tensor(out, local.contiguous())
    else:
        dist.all_gather(list(out.unbind(0)), local.contiguous())
    return out.permute(1, 0, 2).reshape(local.shape[0], -1)
# --8<-- [end:shard]


def _tp_layer(x, layer, keys, values, pos, cos, sin, config, linear):
    return layer_step(x, layer, keys, values, pos, cos, sin, config, linear, reduce=all_reduce)


def _events_ms(fn, reps: int, warmup: int = 2) -> list[float]:
    """Per-sample milliseconds of ``fn`` (CUDA events; a host clock on the CPU)."""
    out = []
    for i in range(warmup + reps):
        if torch.cuda.is_available() and dist.get_backend() == "nccl":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            out.append(ms)
    return out


def _generate(decoder: Decoder, first, step, steps: int) -> None:
    decoder.reset(first)
    for _ in range(steps):
        step()


def _graphed(fn, calls: int):
    """``calls`` of ``fn`` captured as one CUDA graph (after eager warm-up)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def worker(config: dict, device: torch.device) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    full = cuda and not config["quick"]
    cfg = LLAMA3_8B if full else TINY
    dtype = torch.bfloat16 if cuda else torch.float32
    prompt_len, steps = (PROMPT, STEPS) if full else (16, 4)
    max_len = prompt_len + steps
    reps = 8 if full else 3
    out: dict = {"world": world}

    w = random_weights(cfg, device, dtype)  # the same seed on every rank: the same model
    cos, sin = rope_tables(cfg, max_len + 1, device)
    g = torch.Generator(device="cpu").manual_seed(1)
    prompt = torch.randint(0, cfg.vocab, (1, prompt_len), generator=g).to(device)
    cache = StaticCache.empty(cfg, 1, max_len, device, dtype)
    first = prefill(w, prompt, cache, cos, sin).argmax(-1)

    # One GPU, the whole model (every rank at once, on its own GPU).
    whole = Decoder(w, cache, cos, sin, start=prompt_len)
    whole.reset(first)
    whole.advance()
    reference = whole.logits.float().cpu()
    if cuda:
        whole.capture()
    step = whole.graph.replay if cuda else whole.advance
    out["one_gpu_ms"] = [ms / steps for ms in _events_ms(lambda: _generate(whole, first, step, steps), reps)]
    del whole

    # p GPUs, a slice each. Its cache holds this rank's KV heads of the same prompt.
    mine = shard(w, rank, world)
    kv = cfg.kv_heads // world
    tp_cache = StaticCache([k[:, rank * kv:(rank + 1) * kv].contiguous() for k in cache.keys],
                           [v[:, rank * kv:(rank + 1) * kv].contiguous() for v in cache.values])
    del w, cache
    if cuda:
        torch.cuda.empty_cache()  # the whole model's 16 GB go back
    split = Decoder(mine, tp_cache, cos, sin, start=prompt_len, layer_fn=_tp_layer, head=gather_logits)
    split.reset(first)
    split.advance()
    logits = split.logits.float().cpu()
    if rank == 0:  # compared with lab.check by the parent process
        torch.save({"split": logits, "whole": reference}, os.path.join(config["out"], "check.pt"))
    if cuda:
        split.capture()
    step = split.graph.replay if cuda else split.advance
    out["tp_ms"] = [ms / steps for ms in _events_ms(lambda: _generate(split, first, step, steps), reps)]
    out["weights_gib"] = sum(t.nbytes for lay in mine.layers for t in lay) / 2**30
    if cuda:
        out.update(_communication(cfg, device, dtype, reps))
    return out


def _communication(cfg: Config, device, dtype, reps: int) -> dict:
    """The token's collectives alone, graphed; and the ring model's two inputs."""
    world = dist.get_world_size()
    hidden = torch.randn(1, cfg.hidden, device=device, dtype=dtype)
    local = torch.randn(1, cfg.vocab // world, device=device, dtype=dtype)
    per_token = _graphed(lambda: ([dist.all_reduce(hidden) for _ in range(2 * cfg.layers)],
                                  gather_logits(local)), 1)
    out = {"comm_ms": _events_ms(per_token.replay, reps)}
    tiny = torch.zeros(512, device=device, dtype=dtype)  # 1 KiB: latency only
    calls = 100
    small = _graphed(lambda: dist.all_reduce(tiny), calls)
    out["latency_1kib_us"] = [ms * 1e3 / calls for ms in _events_ms(small.replay, reps)]
    one = _graphed(lambda: dist.all_reduce(hidden), calls)
    out["allreduce_8kib_us"] = [ms * 1e3 / calls for ms in _events_ms(one.replay, reps)]
    big = torch.zeros(128 << 20, device=device, dtype=dtype)  # 256 MiB: bandwidth
    dist.all_reduce(big)
    out["allreduce_256mib_ms"] = _events_ms(lambda: dist.all_reduce(big), reps)
    return out


# --8<-- [start:predict]
def predicted_allreduce_us(nbytes: int, gpus: int, latency_1kib_us: float,
                           big_bytes: int, big_ms: float) -> float:
    """The ring model, fed by this run: a 1 KiB all-reduce is 2(p-1) latencies;
    a 256 MiB one is (nearly) all bandwidth."""
    latency = latency_1kib_us * 1e-6 / (2 * (gpus - 1))
    bandwidth = 2 * (gpus - 1) / gpus * big_bytes / (big_ms * 1e-3)  # per link
    return ring_allreduce_seconds(gpus=gpus, nbytes=nbytes, bandwidth=bandwidth,
                                  latency=latency) * 1e6
# --8<-- [end:predict]


def measure(lab) -> None:
    world = torch.cuda.device_count() if lab.cuda else 2
    if lab.cuda and world < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {world}")
    world = 2  # the split this chapter explains (the ring model takes any p)
    r = spawn(worker, world, "nccl" if lab.cuda else "gloo", {"quick": lab.quick})
    saved = r["saved"]["check.pt"]
    lab.check(f"{world}-GPU step equals one GPU's", saved["split"], saved["whole"],
              tolerance=LOGIT_TOLERANCE)
    method = "cuda_event on rank 0, 64 graphed tokens / 64" if lab.cuda else "host clock on rank 0"
    one = lab.keep_samples(r["one_gpu_ms"], case={"gpus": 1, "part": "step"}, metric="ms_per_token",
                           unit="ms", method=method, warmup=2)
    tp = lab.keep_samples(r["tp_ms"], case={"gpus": world, "part": "step"}, metric="ms_per_token",
                          unit="ms", method=method, warmup=2)
    lab.value(case={"gpus": world, "part": "step"}, metric="speedup", value=one.median / tp.median, unit="x")
    lab.value(case={"gpus": world, "part": "step"}, metric="weights_per_gpu", value=r["weights_gib"], unit="GiB")
    if not lab.cuda:
        return
    comm = lab.keep_samples(r["comm_ms"], case={"gpus": world, "part": "collectives"}, metric="ms_per_token",
                            unit="ms", method="cuda_event on rank 0, 64 all-reduces + 1 all-gather graphed",
                            warmup=2)
    overhead = tp.median - one.median / world  # what splitting did not remove
    lab.value(case={"gpus": world, "part": "step"}, metric="over_ideal", value=overhead, unit="ms")
    lab.value(case={"gpus": world, "part": "step"}, metric="comm_share_of_gap",
              value=comm.median / overhead if overhead > 0 else 0.0, unit="x")
    lat = lab.keep_samples(r["latency_1kib_us"], case={"gpus": world, "part": "all-reduce 1 KiB"},
                           metric="time", unit="us", method="cuda_event on rank 0, 100 graphed / 100", warmup=2)
    big = lab.keep_samples(r["allreduce_256mib_ms"], case={"gpus": world, "part": "all-reduce 256 MiB"},
                           metric="time", unit="ms", method="cuda_event on rank 0, one call", warmup=3)
    hid = lab.keep_samples(r["allreduce_8kib_us"], case={"gpus": world, "part": "all-reduce 8 KiB"},
                           metric="time", unit="us", method="cuda_event on rank 0, 100 graphed / 100", warmup=2)
    predicted = predicted_allreduce_us(8192, world, lat.median, 256 << 20, big.median)
    lab.value(case={"gpus": world, "part": "all-reduce 8 KiB"}, metric="predicted", value=predicted, unit="us")
    lab.value(case={"gpus": world, "part": "all-reduce 8 KiB"}, metric="measured_over_model",
              value=hid.median / predicted, unit="x")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
