"""The decode step split over GPUs: tensor parallelism, Megatron style.

Each GPU keeps a slice of every layer: its share of the query and key/value
heads (the q/k/v projection split by rows, the output projection by
columns), its share of the FFN (gate/up by rows, down by columns) and of the
vocabulary. Each layer then needs two all-reduces of one token's hidden
vector (8 KiB in bf16 at hidden 4096), after attention and after the FFN,
and the logits one all-gather: 65 collectives a token for 32 layers.

On the same machine and in the same run this example times, as CUDA graphs
in alternating rounds (every speed-up is a median of paired ratios):

* two rungs of Chapter 9's ladder on one GPU with the whole model: the
  static step (``static+graph``) and the book's fused kernels
  (``book kernels+graph``, :mod:`examples.capstone.fused`);
* the same rungs on ``p`` GPUs with a slice each: the static step with
  NCCL's all-reduce (two GPUs only), the fused step with NCCL's all-reduce,
  and the fused step with a one-shot all-reduce in PyTorch's symmetric
  memory (every GPU reads its peers' partial sums over NVLink and adds them
  itself: one kernel, no ring, no multicast);
* the 65 collectives alone, each kind graphed,

so the gap between the ``p``-GPU step and ``1/p`` of the one-GPU step can be
laid next to the communication it must contain. ``p`` is 2, then 4 and 8
where the machine has them. The ring model (Chapter 6) predicts one
all-reduce from a latency and a bandwidth that this run measures: 1 KiB
graphed (latency) and 256 MiB (bandwidth). On the CPU, two gloo ranks run the
tiny configuration (the fused step as its PyTorch twins) and check each split
step against the whole one.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import torch
import torch.distributed as dist

from examples.capstone import fused
from examples.capstone.fused import FusedDecoder
from examples.capstone.model import (
    LLAMA3_8B, TINY, Config, Decoder, Layer, StaticCache, Weights, graphed, layer_step, prefill,
    random_weights, rope_tables)
from examples.collectives._launch import note as note_launch
from examples.collectives._launch import world_size
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


# --8<-- [start:one_shot]
class OneShotAllReduce:
    """Sum a small tensor over the ranks in one kernel, through symmetric memory.

    Every rank's buffer is mapped into every peer's address space (PyTorch's
    ``torch.distributed._symmetric_memory``, here without NVLink multicast).
    The kernel copies this rank's partial sum into its buffer, waits at a
    barrier of flags in that memory until every peer has done the same, then
    reads all ``p`` buffers over NVLink and adds them: one launch and one
    round of latency, where NCCL's ring takes 2(p - 1) steps.
    """

    def __init__(self, numel: int, dtype: torch.dtype, device: torch.device):
        import torch.distributed._symmetric_memory as symm_mem

        self.group = dist.group.WORLD.group_name
        self.buffer = symm_mem.empty(numel, dtype=dtype, device=device)
        symm_mem.rendezvous(self.buffer, self.group)  # collective: every rank maps every buffer
        # The copy in the same kernel where this PyTorch has it; else a copy first.
        self.copy_inside = hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out")

    def __call__(self, partial: torch.Tensor) -> torch.Tensor:
        flat, out = partial.view(-1), torch.empty_like(partial)
        if self.copy_inside:
            torch.ops.symm_mem.one_shot_all_reduce_copy_out(
                self.buffer, flat, "sum", self.group, out.view(-1))
        else:
            self.buffer.copy_(flat)
            torch.ops.symm_mem.one_shot_all_reduce_out(self.buffer, "sum", self.group, out.view(-1))
        return out
# --8<-- [end:one_shot]


# --8<-- [start:fused_split]
def fused_split_layer(x, layer: Layer, keys, values, pos, cos, sin, c: Config, reduce, first: bool):
    """The fused layer (six kernels) on this rank's slice, plus two all-reduces.

    ``c`` is the slice's configuration (its heads and FFN width). The residual
    is added by the first rank only, inside its product, so that the sum over
    the ranks is x + attention (then x + FFN) with no extra kernel.
    """
    q = fused.qkv_rope_store(x, layer.wqkv, layer.attn_norm, c.norm_eps, cos, sin, pos,
                             keys, values, c)
    attn = fused.attention(q, keys, values, pos, c)
    x = reduce(fused.matvec(attn, layer.wo, residual=x if first else None))
    ffn = fused.matvec(x, layer.w13, norm=layer.ffn_norm, eps=c.norm_eps, swiglu=True)
    return reduce(fused.matvec(ffn, layer.w2, residual=x if first else None))


class FusedSplitDecoder(Decoder):
    """:class:`~examples.capstone.model.Decoder` whose step is the fused one on a
    slice: ``reduce`` sums the ranks' partial outputs, the logits are gathered."""

    def __init__(self, w: Weights, cache: StaticCache, cos, sin, *, start: int, reduce):
        super().__init__(w, cache, cos, sin, start=start)
        self.reduce, self.first = reduce, dist.get_rank() == 0

    def advance(self) -> None:
        w, c = self.w, self.w.config
        x = w.embed[self.tokens]
        for i, layer in enumerate(w.layers):
            x = fused_split_layer(x, layer, self.cache.keys[i], self.cache.values[i], self.pos,
                                  self.cos, self.sin, c, self.reduce, self.first)
        self.logits = gather_logits(fused.matvec(x, w.output, norm=w.norm, eps=c.norm_eps))
        fused.argmax_next(self.logits, self.tokens, self.pos)
# --8<-- [end:fused_split]


#: The variants a run times: (rung, GPUs: "one" or "split", all-reduce or None).
STATIC, FUSED = "static+graph", "book kernels+graph"
NCCL, ONE_SHOT = "NCCL", "one-shot, symmetric memory"


def _generate(decoder: Decoder, first, steps: int) -> None:
    """``steps`` tokens from the same first token: the graph's replays, or eager."""
    decoder.reset(first)
    decoder.generate(steps)


def _one_shot(cfg: Config, device, dtype) -> tuple[OneShotAllReduce | None, str | None]:
    """The one-shot all-reduce, or why this machine has none (noted, not fatal)."""
    if device.type != "cuda":
        return None, "no symmetric memory on the CPU (gloo)"
    try:
        reducer = OneShotAllReduce(cfg.hidden, dtype, device)
        probe = torch.full((1, cfg.hidden), float(dist.get_rank() + 1), device=device, dtype=dtype)
        total = reducer(probe)
        expected = dist.get_world_size() * (dist.get_world_size() + 1) / 2
        if not torch.all(total == expected):
            return None, f"one-shot all-reduce summed to {total.flatten()[0].item()}, not {expected}"
        return reducer, None
    except (RuntimeError, AttributeError, ImportError) as exc:  # no symmetric memory here
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


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

    # p GPUs, a slice each, its cache this rank's KV heads of the same prompt. The
    # whole model (16 GB at full size) and the slice stay in memory together, so
    # that they are timed in the same rounds. Decoders of one model share a cache:
    # each writes a position before it reads it, and they never run at once.
    mine = shard(w, rank, world)
    kv = cfg.kv_heads // world
    tp_cache = StaticCache([k[:, rank * kv:(rank + 1) * kv].contiguous() for k in cache.keys],
                           [v[:, rank * kv:(rank + 1) * kv].contiguous() for v in cache.values])
    out["weights_gib"] = sum(t.nbytes for lay in mine.layers for t in lay) / 2**30
    one_shot, why_not = _one_shot(cfg, device, dtype)
    out["one_shot"] = why_not or ("copy inside the kernel" if one_shot.copy_inside
                                  else "copy, then the kernel")

    library = NCCL if cuda else "gloo"  # whose all-reduce dist.all_reduce runs

    def nccl_reduce(t):
        dist.all_reduce(t)
        return t

    decoders = {(STATIC, 1, None): Decoder(w, cache, cos, sin, start=prompt_len),
                (FUSED, 1, None): FusedDecoder(w, cache, cos, sin, start=prompt_len),
                (FUSED, world, library): FusedSplitDecoder(mine, tp_cache, cos, sin, start=prompt_len,
                                                        reduce=nccl_reduce)}
    if world == 2:  # the unfused rung split: the chapter's first measurement
        decoders[(STATIC, world, library)] = Decoder(mine, tp_cache, cos, sin, start=prompt_len,
                                                  layer_fn=_tp_layer, head=gather_logits)
    if one_shot is not None:
        decoders[(FUSED, world, ONE_SHOT)] = FusedSplitDecoder(
            mine, tp_cache, cos, sin, start=prompt_len, reduce=one_shot)
    checks = {}
    for key, dec in decoders.items():
        dec.reset(first)
        dec.advance()
        checks["|".join(map(str, key))] = dec.logits.float().cpu()
    if rank == 0:  # compared with lab.check by the parent process
        torch.save(checks, os.path.join(config["out"], "check.pt"))

    variants = {"|".join(map(str, key)): (lambda d=dec: _generate(d, first, steps))
                for key, dec in decoders.items()}
    if cuda:
        for dec in decoders.values():
            dec.capture()
        variants["collectives|NCCL"] = _token_collectives(cfg, device, dtype, nccl_reduce)
        if one_shot is not None:
            variants[f"collectives|{ONE_SHOT}"] = _token_collectives(cfg, device, dtype, one_shot)
    # The variants in alternating rounds (A B C, C B A, ...), every rank
    # leaving a barrier before each sample: sample i of each comes from
    # round i, so every speed-up is a ratio of paired samples.
    samples = measure_rounds(variants, device=device, warmup=2, repetitions=reps,
                             before=lined_up())
    out["step_ms"] = {name: [s * 1e3 / steps for s in times] for name, times in samples.items()
                      if not name.startswith("collectives")}
    out["comm_ms"] = {name.split("|")[1]: [s * 1e3 for s in times] for name, times in samples.items()
                      if name.startswith("collectives")}
    if cuda:
        out.update(_ring_inputs(cfg, device, dtype, reps, one_shot))
    return out


def _token_collectives(cfg: Config, device, dtype, reduce):
    """A token's collectives alone, as one CUDA graph: 2 all-reduces a layer
    (``reduce``), one all-gather of the logits."""
    world = dist.get_world_size()
    hidden = torch.randn(1, cfg.hidden, device=device, dtype=dtype)
    local = torch.randn(1, cfg.vocab // world, device=device, dtype=dtype)
    return graphed([lambda: reduce(hidden)] * (2 * cfg.layers)
                   + [lambda: gather_logits(local)]).replay


def _ring_inputs(cfg: Config, device, dtype, reps: int, one_shot) -> dict:
    """The ring model's two inputs (1 KiB graphed: latency; 256 MiB: bandwidth) and the
    8 KiB all-reduce it predicts (NCCL's, and the one-shot one where there is one),
    timed in the same rounds."""
    calls = 100
    tiny = torch.zeros(512, device=device, dtype=dtype)  # 1 KiB: latency only
    hidden = torch.randn(1, cfg.hidden, device=device, dtype=dtype)  # 8 KiB
    big = torch.zeros(128 << 20, device=device, dtype=dtype)  # 256 MiB: bandwidth
    dist.all_reduce(big)
    runs = {"1 KiB": graphed([lambda: dist.all_reduce(tiny)] * calls).replay,
            "8 KiB": graphed([lambda: dist.all_reduce(hidden)] * calls).replay,
            "256 MiB": lambda: dist.all_reduce(big)}
    if one_shot is not None:
        runs["8 KiB one-shot"] = graphed([lambda: one_shot(hidden)] * calls).replay
    samples = measure_rounds(runs, device=device, warmup=2, repetitions=reps, before=lined_up())
    out = {"latency_1kib_us": [s * 1e6 / calls for s in samples["1 KiB"]],
           "allreduce_8kib_us": [s * 1e6 / calls for s in samples["8 KiB"]],
           "allreduce_256mib_ms": [s * 1e3 for s in samples["256 MiB"]]}
    if one_shot is not None:
        out["one_shot_8kib_us"] = [s * 1e6 / calls for s in samples["8 KiB one-shot"]]
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


def gpu_counts(available: int) -> list[int]:
    """The splits to time: 2, then 4 and 8 where the machine has them (a slice
    must hold whole key/value heads: 8 of them in Llama 3 8B)."""
    return [p for p in (2, 4, 8) if p <= available]


def measure(lab) -> None:
    available = world_size(torch.cuda.device_count() if lab.cuda else 2)
    if lab.cuda and available < MIN_GPUS:  # the runner skips this topic before it gets here
        raise RuntimeError(f"needs {MIN_GPUS} GPUs, this machine has {available}")
    for world in gpu_counts(available):
        r = spawn(worker, world, "nccl" if lab.cuda else "gloo", {"quick": lab.quick})
        _keep(lab, world, r)
    note_launch(lab)


def _keep(lab, world: int, r: dict) -> None:
    checks = r["saved"]["check.pt"]
    whole = checks[f"{STATIC}|1|None"]
    for name, logits in checks.items():
        rung, gpus, reduce = name.split("|")
        if gpus == "1" and rung == STATIC:
            continue
        what = f"{rung} on one GPU" if gpus == "1" else f"{rung} on {gpus} GPUs, {reduce} all-reduce"
        lab.check(f"{what} equals the static step on one GPU", logits, whole,
                  tolerance=LOGIT_TOLERANCE)
    clock, steps = ("cuda_event", f"{r['steps']} graphed") if lab.cuda else ("host clock", r["steps"])
    method = f"{clock} on rank 0, {steps} tokens / {r['steps']}, interleaved rounds"
    kept, one_gpu = {}, {}
    for name, samples in r["step_ms"].items():
        rung, gpus, reduce = name.split("|")
        case = {"gpus": int(gpus), "part": "step", "rung": rung}
        if reduce != "None":
            case["all_reduce"] = reduce
        else:
            one_gpu[rung] = samples
            if world != 2:  # the one-GPU steps are kept once, from the two-GPU run
                continue
        kept[name] = lab.keep_samples(samples, case=case, metric="ms_per_token", unit="ms",
                                      method=method, warmup=2)
    comm = {}
    if lab.cuda:
        for reduce, samples in r["comm_ms"].items():
            comm[reduce] = lab.keep_samples(
                samples, case={"gpus": world, "part": "collectives", "all_reduce": reduce},
                metric="ms_per_token", unit="ms", warmup=2,
                method=f"cuda_event on rank 0, {2 * LLAMA3_8B.layers} all-reduces + 1 all-gather "
                       "graphed, interleaved rounds with the steps")
    for name, samples in r["step_ms"].items():
        rung, gpus, reduce = name.split("|")
        if reduce == "None":
            continue
        case = {"gpus": world, "part": "step", "rung": rung, "all_reduce": reduce}
        # Sample i of both ran in round i: the speed-up is the median of paired ratios.
        lab.keep_samples([a / b for a, b in zip(one_gpu[rung], samples, strict=True)], case=case,
                         metric="speedup", unit="x",
                         method=f"paired ratio 1 GPU / {world} GPUs, same rung, {method}")
        lab.value(case=case, metric="weights_per_gpu", value=r["weights_gib"], unit="GiB")
        if reduce not in comm:
            continue
        one = sorted(one_gpu[rung])[len(one_gpu[rung]) // 2]
        overhead = kept[name].median - one / world  # what splitting did not remove
        lab.value(case=case, metric="over_ideal", value=overhead, unit="ms")
        lab.value(case=case, metric="comm_share_of_gap",
                  value=comm[reduce].median / overhead if overhead > 0 else 0.0, unit="x")
    lab.note(f"one-shot all-reduce, {world} GPUs", r["one_shot"])
    if not lab.cuda:
        return
    _keep_allreduces(lab, world, r)


def _keep_allreduces(lab, world: int, r: dict) -> None:
    graphed_method = "cuda_event on rank 0, 100 graphed / 100, interleaved rounds"
    lat = lab.keep_samples(r["latency_1kib_us"], case={"gpus": world, "part": "all-reduce 1 KiB"},
                           metric="time", unit="us", method=graphed_method, warmup=2)
    big = lab.keep_samples(r["allreduce_256mib_ms"], case={"gpus": world, "part": "all-reduce 256 MiB"},
                           metric="time", unit="ms", method="cuda_event on rank 0, one call, interleaved rounds",
                           warmup=2)
    small = {"gpus": world, "part": "all-reduce 8 KiB"}
    hid = lab.keep_samples(r["allreduce_8kib_us"], case={**small, "all_reduce": NCCL},
                           metric="time", unit="us", method=graphed_method, warmup=2)
    predicted = predicted_allreduce_us(8192, world, lat.median, 256 << 20, big.median)
    lab.value(case={**small, "all_reduce": NCCL}, metric="predicted", value=predicted, unit="us")
    lab.value(case={**small, "all_reduce": NCCL}, metric="measured_over_model",
              value=hid.median / predicted, unit="x")
    if "one_shot_8kib_us" in r:
        lab.keep_samples(r["one_shot_8kib_us"], case={**small, "all_reduce": ONE_SHOT},
                         metric="time", unit="us", method=graphed_method, warmup=2)
        lab.keep_samples([a / b for a, b in zip(r["allreduce_8kib_us"], r["one_shot_8kib_us"], strict=True)],
                         case={**small, "all_reduce": ONE_SHOT}, metric="speedup", unit="x",
                         method=f"paired ratio NCCL / one-shot, {graphed_method}")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
