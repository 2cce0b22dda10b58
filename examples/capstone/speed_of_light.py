"""The speed of light of token generation: bytes per token over bandwidth.

    python -m examples.capstone.speed_of_light --bandwidth-gbs 3000

At small batch every weight is read once per step and every cached key and
value of every sequence once too; the arithmetic is tiny next to the bytes.
So no implementation can produce a step faster than

    (weight bytes + batch × context × KV bytes per token) / bandwidth,

and ``batch`` tokens come out of each step. The model counts the matrices a
step multiplies by (the embedding table is not read: one row per token is)
and the norms; the int8 scales (one per weight row, 0.05 % of the bytes) are
left out.

>>> c = Shape()  # Llama 3 8B
>>> round(kv_bytes_per_token(c) / 1024)  # KiB of keys and values per token
128
>>> r = speed_of_light(c, weight_bytes=2, context=1024, batch=1, bandwidth_gbs=3000)
>>> round(r.weight_gb, 2), round(r.step_gb, 2), round(r.tokens_per_s)
(15.01, 15.14, 198)
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from examples.lab.cli import ArgumentParser, add_json_flag, at_least, emit_json, positive

#: Llama 3 8B at bf16, 1024 tokens of context, batch 1, against 3000 GB/s.
EXAMPLE_ARGV = ["--layers", "32", "--hidden", "4096", "--ffn", "14336", "--heads", "32",
                "--kv-heads", "8", "--head-dim", "128", "--vocab", "128256", "--weight-bytes", "2",
                "--context", "1024", "--batch", "1", "--bandwidth-gbs", "3000"]


# --8<-- [start:model]
@dataclass(frozen=True)
class Shape:
    """The fields the model reads; a Config of examples.capstone.model has them too."""

    layers: int = 32
    hidden: int = 4096
    ffn: int = 14336
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 128256


def weight_count(c: Shape) -> int:
    """Weights a step multiplies by: per layer q/k/v, o, gate/up, down; the head."""
    qkv = c.hidden * (c.heads + 2 * c.kv_heads) * c.head_dim
    per_layer = qkv + c.hidden * (c.heads * c.head_dim) + 3 * c.hidden * c.ffn
    return c.layers * per_layer + c.vocab * c.hidden


def kv_bytes_per_token(c: Shape, kv_bytes: int = 2) -> int:
    """One token's keys and values in every layer (bf16 cache)."""
    return 2 * c.layers * c.kv_heads * c.head_dim * kv_bytes


@dataclass(frozen=True)
class SpeedOfLight:
    kv_kib_per_token: float  # the cache grows by this per token of context
    weight_gb: float  # weights read per step
    kv_gb: float  # cached keys and values read per step
    step_gb: float
    ms_per_step: float  # the floor
    tokens_per_s: float  # batch tokens per step
    bound: str  # "weights" or "kv cache": which bytes dominate


def speed_of_light(c: Shape, *, weight_bytes: float, context: int, batch: int,
                   bandwidth_gbs: float) -> SpeedOfLight:
    norms = (2 * c.layers + 1) * c.hidden * 2  # bf16 whatever the weights
    weight_gb = (weight_count(c) * weight_bytes + norms) / 1e9
    kv_gb = batch * context * kv_bytes_per_token(c) / 1e9
    step_gb = weight_gb + kv_gb
    ms = step_gb / bandwidth_gbs * 1e3
    return SpeedOfLight(kv_bytes_per_token(c) / 1024, weight_gb, kv_gb, step_gb, ms, batch / ms * 1e3,
                        "weights" if weight_gb >= kv_gb else "kv cache")
# --8<-- [end:model]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m examples.capstone.speed_of_light",
                            description=__doc__.strip().splitlines()[0])
    for flag, default, what in [("--layers", 32, "decoder layers"), ("--hidden", 4096, "model width"),
                                ("--ffn", 14336, "feed-forward width"), ("--heads", 32, "query heads"),
                                ("--kv-heads", 8, "key/value heads"), ("--head-dim", 128, "width of one head"),
                                ("--vocab", 128256, "vocabulary")]:
        parser.add_argument(flag, type=positive(int), default=default, help=f"{what} (default {default})")
    parser.add_argument("--weight-bytes", type=positive(), default=2.0,
                        help="bytes per weight: 2 for bf16, 1 for int8, 0.5 for int4")
    parser.add_argument("--context", type=at_least(0, int), default=1024, help="tokens already in the cache")
    parser.add_argument("--batch", type=positive(int), default=1, help="sequences decoded together")
    parser.add_argument("--bandwidth-gbs", type=positive(), required=True,
                        help="memory bandwidth, GB/s (measured copy bandwidth)")
    add_json_flag(parser, "the result")
    args = parser.parse_args(argv)
    shape = Shape(args.layers, args.hidden, args.ffn, args.heads, args.kv_heads, args.head_dim, args.vocab)
    r = speed_of_light(shape, weight_bytes=args.weight_bytes, context=args.context,
                       batch=args.batch, bandwidth_gbs=args.bandwidth_gbs)
    if args.json:
        emit_json(json.dumps(asdict(r)) + "\n", args.json)
        return 0
    print(f"KV cache: {r.kv_kib_per_token:.4g} KiB per token of context")
    print(f"bytes per step: {r.step_gb:.4g} GB ({r.weight_gb:.4g} weights, {r.kv_gb:.4g} KV cache)")
    print(f"speed of light: {r.ms_per_step:.4g} ms per step, {r.tokens_per_s:.4g} tokens/s ({r.bound}-bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
