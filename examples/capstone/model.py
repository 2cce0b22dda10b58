"""A Llama-3-8B-shaped decoder with random weights, written for decoding.

The shapes are Llama 3 8B's (32 layers, hidden 4096, FFN 14336, 32 query heads
sharing 8 key/value heads, vocabulary 128256, bf16); the weights are random,
so nothing is downloaded and the tokens mean nothing, but every byte a real
token step reads is read. ``TINY`` is the same code at a size the CPU runs in
CI.

Two ways to write the step live here, side by side:

* :func:`naive_step`, the way a first version is usually written: separate
  q/k/v projections, a cache that grows by ``torch.cat``, the rotary tables
  rebuilt each token, ``.item()`` to get the next token;
* :func:`static_step`, with a preallocated (static) KV cache written in place
  at a position held on the GPU, fused projections and no host sync: the
  step a CUDA graph can capture and ``torch.compile`` can fuse.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn.functional as F


# --8<-- [start:config]
@dataclass(frozen=True)
class Config:
    layers: int = 32
    hidden: int = 4096
    ffn: int = 14336
    heads: int = 32
    kv_heads: int = 8
    vocab: int = 128256
    head_dim: int = 128
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    #: the output head is the embedding matrix (Llama 3.2 1B and 3B): one matrix fewer to hold,
    #: the same bytes a step reads (the head reads all of it, the embedding one row)
    tied: bool = False

    @property
    def qkv_rows(self) -> int:  # q, k and v projections stacked
        return (self.heads + 2 * self.kv_heads) * self.head_dim


LLAMA3_8B = Config()
# --8<-- [end:config]
#: Smaller Llama shapes for smaller GPUs (``--model``), from the ``config.json`` of
#: meta-llama/Llama-3.2-3B and meta-llama/Llama-3.2-1B on the Hugging Face Hub.
LLAMA32_3B = Config(layers=28, hidden=3072, ffn=8192, heads=24, kv_heads=8, tied=True)
LLAMA32_1B = Config(layers=16, hidden=2048, ffn=8192, heads=32, kv_heads=8, head_dim=64, tied=True)
#: The same code at a size two CPU cores run in a second.
TINY = Config(layers=2, hidden=64, ffn=160, heads=4, kv_heads=2, vocab=512, head_dim=16)


class Layer(NamedTuple):
    """One decoder layer's weights; projections stored fused, [out, in]."""

    attn_norm: torch.Tensor  # [hidden]
    wqkv: torch.Tensor  # [qkv_rows, hidden]
    wo: torch.Tensor  # [hidden, heads * head_dim]
    ffn_norm: torch.Tensor  # [hidden]
    w13: torch.Tensor  # [2 * ffn, hidden]: gate (w1) over up (w3)
    w2: torch.Tensor  # [hidden, ffn]


@dataclass
class Weights:
    config: Config
    embed: torch.Tensor  # [vocab, hidden]
    layers: list[Layer]
    norm: torch.Tensor  # [hidden]
    output: torch.Tensor  # [vocab, hidden]

    def linear_weights(self) -> list[torch.Tensor]:
        """Every matrix a token step multiplies by (not the embedding)."""
        mats = [w for layer in self.layers for w in (layer.wqkv, layer.wo, layer.w13, layer.w2)]
        return mats + [self.output]


def random_weights(config: Config, device, dtype=torch.bfloat16, seed: int = 0) -> Weights:
    """Random weights scaled by 1/sqrt(fan-in), so activations stay O(1)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def mat(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, device=device, dtype=dtype, generator=g)
        return w.mul_(1.0 / math.sqrt(cols))

    def ones() -> torch.Tensor:
        return torch.ones(config.hidden, device=device, dtype=dtype)

    c = config
    layers = [
        Layer(ones(), mat(c.qkv_rows, c.hidden), mat(c.hidden, c.heads * c.head_dim),
              ones(), mat(2 * c.ffn, c.hidden), mat(c.hidden, c.ffn))
        for _ in range(c.layers)
    ]
    if c.tied:  # one matrix for both ends, scaled as a head: an embedding row stays O(1) after RMSNorm
        embed = mat(c.vocab, c.hidden)
        return Weights(c, embed, layers, ones(), embed)
    embed = torch.randn(c.vocab, c.hidden, device=device, dtype=dtype, generator=g)
    return Weights(c, embed, layers, ones(), mat(c.vocab, c.hidden))


# -- pieces both steps share -------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32.to(x.dtype) * weight


def rope_tables(config: Config, max_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, [max_len, head_dim / 2], fp32."""
    half = config.head_dim // 2
    inv_freq = config.rope_theta ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of each head; x [..., T, heads, head_dim]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # broadcast over heads
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def swiglu_ffn(x: torch.Tensor, layer: Layer, linear: Linear) -> torch.Tensor:
    gate, up = linear(x, layer.w13).chunk(2, dim=-1)
    return linear(F.silu(gate) * up, layer.w2)


# -- the naive step --------------------------------------------------------------
# --8<-- [start:naive]
def naive_step(w: Weights, token: int, pos: int, cache: list) -> torch.Tensor:
    """One token, written the obvious way: logits [1, vocab]."""
    c = w.config
    hd, q_rows, kv_rows = c.head_dim, c.heads * c.head_dim, c.kv_heads * c.head_dim
    x = w.embed[torch.tensor([token], device=w.embed.device)]  # a host-to-device copy
    cos, sin = rope_tables(c, pos + 1, x.device)  # rebuilt every token
    cos, sin = cos[pos:], sin[pos:]
    for i, layer in enumerate(w.layers):
        h = rms_norm(x, layer.attn_norm, c.norm_eps)
        q = F.linear(h, layer.wqkv[:q_rows]).view(1, c.heads, hd)
        k = F.linear(h, layer.wqkv[q_rows:q_rows + kv_rows]).view(1, c.kv_heads, hd)
        v = F.linear(h, layer.wqkv[q_rows + kv_rows:]).view(1, c.kv_heads, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache[i] is None:
            cache[i] = (k, v)
        else:  # the cache grows: a new tensor and a full copy, every token
            cache[i] = (torch.cat([cache[i][0], k]), torch.cat([cache[i][1], v]))
        keys, values = cache[i]  # [T, kv_heads, hd]
        group = c.heads // c.kv_heads  # copies of each key/value head
        keys = keys.repeat_interleave(group, dim=1).transpose(0, 1)
        values = values.repeat_interleave(group, dim=1).transpose(0, 1)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), keys, values)
        x = x + F.linear(attn.transpose(0, 1).reshape(1, q_rows), layer.wo)
        x = x + swiglu_ffn(rms_norm(x, layer.ffn_norm, c.norm_eps), layer, F.linear)
    return F.linear(rms_norm(x, w.norm, c.norm_eps), w.output)


def naive_generate(w: Weights, prompt_cache: list, start: int, first: int, steps: int) -> list[int]:
    cache, token, tokens = list(prompt_cache), first, []
    for pos in range(start, start + steps):
        logits = naive_step(w, token, pos, cache)
        token = logits.argmax(-1).item()  # the host waits for the GPU here
        tokens.append(token)
    return tokens
# --8<-- [end:naive]


# -- the static step ----------------------------------------------------------------
@dataclass
class StaticCache:
    """Preallocated keys and values, [batch, kv_heads, max_len, head_dim] per layer."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @classmethod
    def empty(cls, config: Config, batch: int, max_len: int, device, dtype=torch.bfloat16):
        shape = (batch, config.kv_heads, max_len, config.head_dim)
        zeros = lambda: torch.zeros(shape, device=device, dtype=dtype)  # noqa: E731
        return cls([zeros() for _ in range(config.layers)], [zeros() for _ in range(config.layers)])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


# --8<-- [start:static]
def layer_step(x, layer: Layer, keys, values, pos, cos, sin, config: Config,
               linear: Linear = F.linear, reduce=None):
    """One layer for one new token per sequence; x [batch, hidden].

    ``pos`` is a 1-element tensor on the GPU: the step never asks the host
    where it is, so a CUDA graph can replay it and a compiler can trace it.
    ``reduce`` sums partial outputs across GPUs (tensor parallelism).
    """
    reduce = reduce or (lambda t: t)
    c, batch = config, x.shape[0]
    hd, q_rows, kv_rows = c.head_dim, c.heads * c.head_dim, c.kv_heads * c.head_dim
    qkv = linear(rms_norm(x, layer.attn_norm, c.norm_eps), layer.wqkv)
    q, k, v = qkv.split([q_rows, kv_rows, kv_rows], dim=-1)
    q = apply_rope(q.view(batch, c.heads, hd), cos[pos], sin[pos])
    k = apply_rope(k.view(batch, c.kv_heads, hd), cos[pos], sin[pos])
    keys.index_copy_(2, pos, k.unsqueeze(2))  # written in place: no new tensor
    values.index_copy_(2, pos, v.view(batch, c.kv_heads, 1, hd))
    # Grouped-query attention as a reshape: each key head serves `group` queries.
    group = c.heads // c.kv_heads
    q = q.view(batch, c.kv_heads, group, hd)
    scores = (q @ keys.transpose(-1, -2)).float() / math.sqrt(hd)
    future = torch.arange(keys.shape[2], device=x.device) > pos
    scores = scores.masked_fill(future, float("-inf"))
    attn = (scores.softmax(-1).to(x.dtype) @ values).view(batch, q_rows)
    x = x + reduce(linear(attn, layer.wo))
    ffn = swiglu_ffn(rms_norm(x, layer.ffn_norm, c.norm_eps), layer, linear)
    return x + reduce(ffn)


def static_step(w: Weights, tokens, pos, cache: StaticCache, cos, sin,
                layer_fn=layer_step, linear: Linear = F.linear, head=None):
    """Logits [batch, vocab] for ``tokens`` [batch] at position ``pos``."""
    x = w.embed[tokens]
    for i, layer in enumerate(w.layers):
        x = layer_fn(x, layer, cache.keys[i], cache.values[i], pos, cos, sin, w.config, linear)
    logits = linear(rms_norm(x, w.norm, w.config.norm_eps), w.output)
    return head(logits) if head else logits
# --8<-- [end:static]


class Decoder:
    """Greedy decoding with the static step; every buffer allocated once.

    ``advance()`` is one token for the whole batch: step, argmax, store the
    token, move the position on, all on the GPU. It is what a CUDA graph
    captures, and what :meth:`capture` replays.
    """

    def __init__(self, w: Weights, cache: StaticCache, cos, sin, *, start: int,
                 layer_fn=layer_step, linear: Linear = F.linear, head=None):
        self.w, self.cache, self.cos, self.sin = w, cache, cos, sin
        self.layer_fn, self.linear, self.head, self.start = layer_fn, linear, head, start
        batch, device = cache.keys[0].shape[0], cos.device
        self.pos = torch.tensor([start], device=device)
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.logits = None
        self.graph = None

    def reset(self, first_tokens: torch.Tensor) -> None:
        self.pos.fill_(self.start)
        self.tokens.copy_(first_tokens)

    def advance(self) -> None:
        self.logits = static_step(self.w, self.tokens, self.pos, self.cache, self.cos,
                                  self.sin, self.layer_fn, self.linear, self.head)
        self.tokens.copy_(self.logits.argmax(-1))
        self.pos.add_(1)

    def capture(self) -> None:
        """Record one ``advance`` as a CUDA graph (after warm-up on a side stream)."""
        first = self.tokens.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # compile, autotune and allocate before capture
                self.reset(first)
                self.advance()
        torch.cuda.current_stream().wait_stream(side)
        self.reset(first)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.advance()
        self.reset(first)

    def generate(self, steps: int) -> None:
        run = self.graph.replay if self.graph is not None else self.advance
        for _ in range(steps):
            run()


def graphed(calls: Sequence[Callable[[], object]]) -> torch.cuda.CUDAGraph:
    """One CUDA graph of ``calls`` in order, after each ran once on a side stream
    (which compiles, autotunes and allocates outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    return graph


def graph_pool_mib(graph: torch.cuda.CUDAGraph, snapshot: list[dict] | None = None) -> float:
    """MiB the caching allocator holds in ``graph``'s private memory pool.

    Read from the allocator's segments (``snapshot``: ``torch.cuda.memory_snapshot()``),
    not as reserved memory after the capture minus before: the capture empties the
    allocator's cache first, so that difference is negative when cached blocks are
    released, as for a run's first graph.
    """
    pool = tuple(graph.pool())
    segments = torch.cuda.memory_snapshot() if snapshot is None else snapshot
    held = sum(s["total_size"] for s in segments if tuple(s.get("segment_pool_id", ())) == pool)
    if held < 0:
        raise ValueError(f"the graph's pool holds {held} bytes: a pool cannot hold less than nothing")
    return held / 2**20


def prefill(w: Weights, prompt: torch.Tensor, cache: StaticCache | None, cos, sin,
            linear: Linear = F.linear) -> torch.Tensor:
    """Run a prompt [batch, T] through the model at once; fill ``cache``; last logits."""
    c = w.config
    batch, length = prompt.shape
    hd, q_rows, kv_rows = c.head_dim, c.heads * c.head_dim, c.kv_heads * c.head_dim
    x = w.embed[prompt]  # [batch, T, hidden]
    for i, layer in enumerate(w.layers):
        qkv = linear(rms_norm(x, layer.attn_norm, c.norm_eps), layer.wqkv)
        q, k, v = qkv.split([q_rows, kv_rows, kv_rows], dim=-1)
        q = apply_rope(q.view(batch, length, c.heads, hd), cos[:length], sin[:length])
        k = apply_rope(k.view(batch, length, c.kv_heads, hd), cos[:length], sin[:length])
        v = v.view(batch, length, c.kv_heads, hd)
        if cache is not None:
            cache.keys[i][:, :, :length] = k.transpose(1, 2)
            cache.values[i][:, :, :length] = v.transpose(1, 2)
        group = c.heads // c.kv_heads
        keys = k.transpose(1, 2).repeat_interleave(group, dim=1)
        values = v.transpose(1, 2).repeat_interleave(group, dim=1)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=True)
        x = x + linear(attn.transpose(1, 2).reshape(batch, length, q_rows), layer.wo)
        x = x + swiglu_ffn(rms_norm(x, layer.ffn_norm, c.norm_eps), layer, linear)
    return linear(rms_norm(x[:, -1], w.norm, c.norm_eps), w.output)


def naive_cache_from(cache: StaticCache, length: int) -> list:
    """The naive step's cache ([T, kv_heads, hd] per layer) holding the same prompt."""
    return [(k[0, :, :length].transpose(0, 1).contiguous(), v[0, :, :length].transpose(0, 1).contiguous())
            for k, v in zip(cache.keys, cache.values)]


# -- command line: the shapes of a configuration, no weights allocated ------------------
#: The Llama shapes a reader may decode (``--model``), largest first, and the CPU's.
MODELS = {"llama3-8b": LLAMA3_8B, "llama3.2-3b": LLAMA32_3B, "llama3.2-1b": LLAMA32_1B}
#: How a record names each shape.
MODEL_NAMES = {"llama3-8b": "Llama 3 8B", "llama3.2-3b": "Llama 3.2 3B", "llama3.2-1b": "Llama 3.2 1B"}
CONFIGS = {**MODELS, "tiny": TINY}
EXAMPLE_ARGV = ["--config", "llama3-8b"]


def describe(config: Config) -> list[tuple[str, tuple[int, int], int]]:
    """(name, shape, count) of every matrix one layer holds, then the head."""
    c = config
    layer = [("wqkv", (c.qkv_rows, c.hidden)), ("wo", (c.hidden, c.heads * c.head_dim)),
             ("w13", (2 * c.ffn, c.hidden)), ("w2", (c.hidden, c.ffn))]
    return [(name, shape, c.layers) for name, shape in layer] + [("output", (c.vocab, c.hidden), 1)]


def main(argv: list[str] | None = None) -> int:
    from examples.lab.cli import ArgumentParser

    parser = ArgumentParser(prog="python -m examples.capstone.model",
                            description="The matrices one token step reads, per configuration.")
    parser.add_argument("--config", choices=sorted(CONFIGS), default="llama3-8b")
    args = parser.parse_args(argv)
    from examples.capstone.speed_of_light import kv_bytes_per_token, weight_count

    config = CONFIGS[args.config]
    for name, (rows, cols), count in describe(config):
        print(f"{name:7s} {rows:>7d} x {cols:<6d} x {count:>2d}  {rows * cols * count / 1e6:10.1f} M weights")
    total = weight_count(config)  # the calculator's count: a Config has the fields a Shape has
    print(f"total   {total / 1e9:.3f} B weights read per token, {total * 2 / 1e9:.2f} GB in bf16; "
          f"KV cache {kv_bytes_per_token(config) / 1024:g} KiB per token")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
