"""The decode step split over GPUs: tensor parallelism, Megatron style.

Each GPU keeps a slice of every layer: its share of the query and key/value
heads (the q/k/v projection split by rows, the output projection by
columns), its share of the FFN (gate/up by rows, down by columns) and of the
vocabulary. Each layer then needs two all-reduces of one token's hidden
vector (8 KiB in bf16 at hidden 4096), after attention and after the FFN,
and the logits one all-gather: 65 collectives a token for 32 layers.

On the same machine and in the same run this example times one GPU with
the whole model and ``p`` GPUs with a slice each, both as CUDA graphs, and
the collectives alone (the same 65 graphed), the three in alternating rounds
(the speed-up is a median of paired ratios), so the gap between the ``p``-GPU
step and ``1/p`` of the one-GPU step can be laid next to the communication it
must contain. The ring model (Chapter 6) predicts one all-reduce from a
latency and a bandwidth that this run measures: 1 KiB graphed (latency) and
256 MiB (bandwidth). On the CPU, two gloo ranks run the tiny configuration
and check the split step against the whole one.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import torch
import torch.distributed as dist

from examples.capstone.model import (
    LLAMA3_8B, TINY, Config, Decoder, Layer, StaticCache, Weights, graphed, layer_step, prefill,
    random_weights, rope_tables)
from examples.collectives.ring_allreduce import lined_up, spawn
from examples.collectives.ring_model import ring_allreduce_seconds
from examples.lab.timing import measure_rounds

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


def _generate(decoder: Decoder, first, steps: int) -> None:
    """``steps`` tokens from the same first token: the graph's replays, or eager."""
    decoder.reset(first)
    decoder.generate(steps)


def worker(config: dict, device: torch.device) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    full = cuda and not config["quick"]
    cfg = LLAMA3_8B if full else TINY
    dtype = torch.bfloat16 if cuda else torch.float32
    prompt_len, steps = (PROMPT, STEPS) if full else (16, 4)
    max_len = prompt_len + steps
    reps = 8 if full else 3
    out: dict = {"world": world, "steps": steps}

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

    # p GPUs, a slice each. Its cache holds this rank's KV heads of the same prompt.
    # Both stay in memory (16 GB and 8 GB of weights at full size), so that they
    # can be timed in the same rounds.
    mine = shard(w, rank, world)
    kv = cfg.kv_heads // world
    tp_cache = StaticCache([k[:, rank * kv:(rank + 1) * kv].contiguous() for k in cache.keys],
                           [v[:, rank * kv:(rank + 1) * kv].contiguous() for v in cache.values])
    split = Decoder(mine, tp_cache, cos, sin, start=prompt_len, layer_fn=_tp_layer, head=gather_logits)
    split.reset(first)
    split.advance()
    logits = split.logits.float().cpu()
    if rank == 0:  # compared with lab.check by the parent process
        torch.save({"split": logits, "whole": reference}, os.path.join(config["out"], "check.pt"))
    out["weights_gib"] = sum(t.nbytes for lay in mine.layers for t in lay) / 2**30

    variants = {"one GPU": lambda: _generate(whole, first, steps),
                "split": lambda: _generate(split, first, steps)}
    if cuda:
        whole.capture()
        split.capture()
        variants["collectives"] = _token_collectives(cfg, device, dtype)
    # The variants in alternating rounds (A B C, C B A, ...), every rank
    # leaving a barrier before each sample: sample i of each comes from
    # round i, so the speed-up is a ratio of paired samples.
    samples = measure_rounds(variants, device=device, warmup=2, repetitions=reps,
                             before=lined_up())
    out["one_gpu_ms"] = [s * 1e3 / steps for s in samples["one GPU"]]
    out["tp_ms"] = [s * 1e3 / steps for s in samples["split"]]
    if cuda:
        out["comm_ms"] = [s * 1e3 for s in samples["collectives"]]
        out.update(_ring_inputs(cfg, device, dtype, reps))
    return out


def _token_collectives(cfg: Config, device, dtype):
    """The token's collectives alone, as one CUDA graph: 2 all-reduces a layer, one all-gather."""
    world = dist.get_world_size()
    hidden = torch.randn(1, cfg.hidden, device=device, dtype=dtype)
    local = torch.randn(1, cfg.vocab // world, device=device, dtype=dtype)
    return graphed([lambda: dist.all_reduce(hidden)] * (2 * cfg.layers)
                   + [lambda: gather_logits(local)]).replay


def _ring_inputs(cfg: Config, device, dtype, reps: int) -> dict:
    """The ring model's two inputs (1 KiB graphed: latency; 256 MiB: bandwidth) and the
    8 KiB all-reduce it predicts, timed in the same rounds."""
    calls = 100
    tiny = torch.zeros(512, device=device, dtype=dtype)  # 1 KiB: latency only
    hidden = torch.randn(1, cfg.hidden, device=device, dtype=dtype)  # 8 KiB
    big = torch.zeros(128 << 20, device=device, dtype=dtype)  # 256 MiB: bandwidth
    dist.all_reduce(big)
    samples = measure_rounds(
        {"1 KiB": graphed([lambda: dist.all_reduce(tiny)] * calls).replay,
         "8 KiB": graphed([lambda: dist.all_reduce(hidden)] * calls).replay,
         "256 MiB": lambda: dist.all_reduce(big)},
        device=device, warmup=2, repetitions=reps, before=lined_up())
    return {"latency_1kib_us": [s * 1e6 / calls for s in samples["1 KiB"]],
            "allreduce_8kib_us": [s * 1e6 / calls for s in samples["8 KiB"]],
            "allreduce_256mib_ms": [s * 1e3 for s in samples["256 MiB"]]}


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
    clock, steps = ("cuda_event", f"{r['steps']} graphed") if lab.cuda else ("host clock", r["steps"])
    method = f"{clock} on rank 0, {steps} tokens / {r['steps']}, interleaved rounds"
    step = {"gpus": world, "part": "step"}
    one = lab.keep_samples(r["one_gpu_ms"], case={"gpus": 1, "part": "step"}, metric="ms_per_token",
                           unit="ms", method=method, warmup=2)
    tp = lab.keep_samples(r["tp_ms"], case=step, metric="ms_per_token", unit="ms", method=method, warmup=2)
    # Sample i of both ran in round i: the speed-up is the median of paired ratios, with their spread.
    lab.keep_samples([a / b for a, b in zip(r["one_gpu_ms"], r["tp_ms"], strict=True)], case=step,
                     metric="speedup", unit="x", method=f"paired ratio 1 GPU / {world} GPUs, {method}")
    lab.value(case=step, metric="weights_per_gpu", value=r["weights_gib"], unit="GiB")
    if not lab.cuda:
        return
    comm = lab.keep_samples(r["comm_ms"], case={"gpus": world, "part": "collectives"}, metric="ms_per_token",
                            unit="ms", method="cuda_event on rank 0, 64 all-reduces + 1 all-gather graphed, "
                            "interleaved rounds with the steps", warmup=2)
    overhead = tp.median - one.median / world  # what splitting did not remove
    lab.value(case=step, metric="over_ideal", value=overhead, unit="ms")
    lab.value(case=step, metric="comm_share_of_gap",
              value=comm.median / overhead if overhead > 0 else 0.0, unit="x")
    lat = lab.keep_samples(r["latency_1kib_us"], case={"gpus": world, "part": "all-reduce 1 KiB"},
                           metric="time", unit="us", method="cuda_event on rank 0, 100 graphed / 100, interleaved rounds",
                           warmup=2)
    big = lab.keep_samples(r["allreduce_256mib_ms"], case={"gpus": world, "part": "all-reduce 256 MiB"},
                           metric="time", unit="ms", method="cuda_event on rank 0, one call, interleaved rounds",
                           warmup=2)
    hid = lab.keep_samples(r["allreduce_8kib_us"], case={"gpus": world, "part": "all-reduce 8 KiB"},
                           metric="time", unit="us", method="cuda_event on rank 0, 100 graphed / 100, interleaved rounds",
                           warmup=2)
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
