"""One token of a Llama-3-8B-shaped model, rung by rung, against its speed of light.

Every rung generates tokens greedily after the same 512-token prompt, at batch 1.
A timed sample is :data:`STEPS` tokens generated from the prompt, and the
rungs of one precision are timed in interleaved rounds (one sample of each
per round), so that drift falls on all alike:

* ``eager``: :func:`~examples.capstone.model.naive_step`, a growing cache and
  ``.item()`` each token (Chapters 2 and 8);
* ``static``: the static cache, the position on the GPU, no host sync;
* ``static+graph``: that step captured once as a CUDA graph (Chapter 5);
* ``compile``: each layer compiled by ``torch.compile`` (one compiled
  function serves all 32 layers: regional compilation, Chapter 4);
* ``compile+graph``: the compiled step captured as a CUDA graph;
* ``int8+graph`` and ``int8 compile+graph``: the same with weight-only int8
  weights and the book's Triton kernel (:mod:`examples.capstone.int8_linear`).

For each rung: ms per token, tokens/s, the **fraction of the speed of light**
(bytes the token must read, weights plus the KV cache so far, over the time,
over the copy bandwidth this run measured) and its **fraction of the read roof**
(the same over the best streaming read this run measured), and from the profiler the kernels
per token, the time the GPU was busy and the gaps between its kernels. Then
prefill (prompts of 128 to 8192 tokens) and decode (batch 1 to 64) on the
roofline. On the CPU the tiny configuration runs the first two rungs.

The model, its prompt and the reference logits are built once a process and
shared with :mod:`examples.capstone.fused_decode` (:func:`shared_setup`), and so
are the compiled layers and the ``compile+graph`` rung's captured graph: the
layer is compiled once a run. Each precision's weights are built once a run too;
where the GPU has no room for both (a 24 GiB card), the one not in use waits in
host memory (:meth:`Setup.resident`), so that the whole ladder runs there.
``--model llama3.2-3b`` or ``llama3.2-1b`` decodes a smaller Llama shape, for a
GPU of 8 to 16 GiB; the book's figures are the 8B shape's.
"""
from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch

from examples.capstone.int8_linear import Int8Weight, int8_chosen_configs, int8_linear, quantized
from examples.capstone.model import (
    MODEL_NAMES, MODELS, TINY, Config, Decoder, StaticCache, Weights, graph_pool_mib, layer_step,
    naive_cache_from, naive_generate, naive_step, prefill, random_weights, rope_tables)
from examples.capstone.read_roof import reads
from examples.lab.harness import CheckFailed
from examples.lab.kernels import gpu_split
from examples.lab.memory import allocatable

PROMPT = 512  # tokens in the cache before generation starts
#: Tokens generated per timed sample. At a context of 512 every token costs the
#: same (the cache grows by 4 tokens, 0.5 MB against 15 GB read per token) and a
#: sample starts from a warm step (each rung ran before it is timed), so 4 give
#: the steady state's ms per token: a graphed token is 4-7 ms against a launch
#: of microseconds, a host-bound one waits on the host from its first kernel.
#: 64 made a host-bound rung's sample 2 s, 8 made the ladder's rounds 11 s.
STEPS = 4
#: Tokens the profiler records per rung (each token's kernels are the same, so
#: 4 give the per-token counts and times), and the int8 comparison's tokens:
#: the cache has room past the prompt for each.
PROFILED_TOKENS = 4
QUALITY_TOKENS = 16
PREFILL_LENGTHS = (128, 512, 2048, 8192)
DECODE_BATCHES = (1, 4, 16, 64)
#: bf16 steps through 32 layers agree with another summation order to about 2 %
#: (relative L2); a wrong head or slice is off by 100 %.
LOGIT_TOLERANCE = 5e-2
#: The Llama shape both capstone topics decode (``--model``): the book measures the 8B.
DEFAULT_MODEL = "llama3-8b"
MODEL = DEFAULT_MODEL
#: GPU memory a rung needs beside its weights (caches, graphs, the sweeps' batch of 64,
#: the compiler's scratch): about 2 GiB for the 8B shape on the book's GPUs (each rung's
#: ``memory_reserved`` less its weights); with room to spare, so that a second set of
#: weights is only kept on the GPU where it cannot crowd a rung out.
WORKING_ROOM = 4 * 2**30


def add_arguments(parser) -> None:
    """The topics' own flag (``python -m examples.capstone.decode --model ...``, and the lab's)."""
    parser.add_argument("--model", choices=list(MODELS), default=DEFAULT_MODEL,
                        help="the Llama shape to decode: llama3-8b (the book's, 16 GB of bf16 "
                             "weights, a 24 GiB GPU), llama3.2-3b (6.4 GB, 12 GiB), "
                             "llama3.2-1b (2.5 GB, 8 GiB: on the edge there)")


def configure(args) -> None:
    global MODEL
    if MODEL != args.model:
        release_setup()  # the set-up of another shape is no use any more
    MODEL = args.model


# --8<-- [start:bytes]
def bytes_read_per_token(w: Weights, context: float, batch: int = 1) -> float:
    """What one step must read: every matrix and norm once, every cached K/V."""
    c = w.config
    weights = sum(_nbytes(m) for m in w.linear_weights())
    norms = sum(layer.attn_norm.nbytes + layer.ffn_norm.nbytes for layer in w.layers) + w.norm.nbytes
    kv = 2 * c.layers * c.kv_heads * c.head_dim * w.embed.element_size()
    return weights + norms + batch * context * kv
# --8<-- [end:bytes]


def _nbytes(m) -> int:
    return m.q.nbytes + m.scale.nbytes if isinstance(m, Int8Weight) else m.nbytes


class Rung(NamedTuple):
    """What the timing and the profiler need of one rung."""

    w: Weights  # the weights it reads: its bytes per token
    generate: Callable[[], object]  # one timed sample: STEPS tokens from the prompt
    one_token: Callable[[], object]  # one more token: what the profiler records
    rewind: Callable[[], object] = lambda: None  # back to the prompt


def measure(lab) -> None:
    run = start(lab)
    run.ladder()
    if lab.cuda:
        run.int8_rungs()
        if not lab.quick:
            run.prefill_sweep()
            run.batch_sweep()
    run.note_model()
    # The set-up stays for capstone.fused_decode, which the runner starts next.


# -- the set-up both capstone topics share ------------------------------------------
@dataclass
class Setup:
    """The model, a prompt already in a cache, the first generated token and the
    reference logits for it (the whole sequence at once): what every rung of both
    capstone topics starts from."""

    config: Config
    dtype: torch.dtype
    prompt_len: int
    steps: int  # tokens per timed sample
    max_len: int
    w: Weights
    cos: torch.Tensor
    sin: torch.Tensor
    cache: StaticCache
    first: torch.Tensor
    reference: torch.Tensor
    int8_weights: Weights | None = None
    #: captured rungs the next topic times again instead of compiling them again
    graphs: dict[str, Decoder] = field(default_factory=dict)
    #: precision -> its compiled layer: one compilation a run serves both topics
    compiled: dict[str, Callable] = field(default_factory=dict)
    #: the precisions whose matrices wait in host memory (no room on the GPU for both)
    parked: set[str] = field(default_factory=set)

    @classmethod
    def build(cls, lab) -> Setup:
        full = lab.cuda and not lab.quick
        config = MODELS[MODEL] if full else TINY
        dtype = torch.bfloat16 if lab.cuda else torch.float32
        prompt_len, steps = (PROMPT, STEPS) if full else (16, 4)
        # room past the prompt for a timed sample, the profiled tokens and the int8 comparison
        max_len = prompt_len + max(steps, PROFILED_TOKENS, QUALITY_TOKENS)
        dev = lab.device
        w = random_weights(config, dev, dtype)
        cos, sin = rope_tables(config, max(max_len, max(PREFILL_LENGTHS) + 1), dev)
        cache = StaticCache.empty(config, 1, max_len, dev, dtype)
        g = torch.Generator(device="cpu").manual_seed(1)
        prompt = torch.randint(0, config.vocab, (1, prompt_len), generator=g).to(dev)
        first = prefill(w, prompt, cache, cos, sin).argmax(-1)
        # The reference for every rung's first token: the whole sequence at once.
        reference = prefill(w, torch.cat([prompt, first[:, None]], 1), None, cos, sin)
        return cls(config, dtype, prompt_len, steps, max_len, w, cos, sin, cache, first, reference)

    def compiled_layer(self, precision: str) -> Callable:
        """The layer compiled for ``precision`` (its first call compiles it; later ones and
        the other topic reuse it). Same shapes in every layer: one compilation a precision."""
        if precision not in self.compiled:
            self.compiled[precision] = torch.compile(layer_step, dynamic=False)
        return self.compiled[precision]

    def resident(self, precision: str, forget: Callable[[str], None]) -> Weights:
        """The weights of ``precision`` ("bf16" or "int8") with their matrices on the GPU.
        Each precision is built once (int8 from bf16, the first time a topic asks). Where the
        GPU has no room for the other precision's matrices beside them (and a rung's working
        room), those wait in host memory: ``forget(other)`` first lets go of every rung built
        on them (their graphs read the old addresses), then they move."""
        other = "int8" if precision == "bf16" else "bf16"
        mine = self.w if precision == "bf16" else self.int8_weights
        theirs = self.int8_weights if precision == "bf16" else self.w
        if mine is not None and precision not in self.parked:
            return mine
        if mine is None and "bf16" in self.parked:
            self.resident("bf16", forget)  # int8 is quantized from bf16 on the GPU: bring it back first
        if mine is None:  # int8, from bf16: its matrices, and quantize()'s fp32 copies of the largest
            largest = max(m.numel() for m in self.w.linear_weights())
            need = sum(m.numel() for m in self.w.linear_weights()) + 12 * largest
        else:
            need = _matrix_bytes(mine)
        crowded = (theirs is not None and other not in self.parked
                   and _room(self.w.embed.device) < need + WORKING_ROOM)
        if mine is None:
            if crowded:  # bf16 moves layer by layer as int8's are made; marked first, so that
                self._drop_rungs("bf16", forget)  # a stop halfway still brings it back whole
                self.parked.add("bf16")
            self.int8_weights = quantized(self.w, then=(lambda i: _park_part(self.w, i)) if crowded else None)
            _free_cached()
            return self.int8_weights
        if crowded:
            self._park(other, forget)
        _move_matrices(mine, self.w.embed.device)
        self.parked.discard(precision)
        return mine

    def make_room(self, nbytes: int) -> None:
        """Where the GPU could not give ``nbytes`` more, move matrices to host memory until it
        can: int8's first, then bf16's (with the graphs kept for the next topic, which read
        them); the rungs that follow bring back the precision they use (:meth:`resident`)."""
        for precision, w in (("int8", self.int8_weights), ("bf16", self.w)):
            if _room(self.w.embed.device) >= nbytes:
                return
            if w is not None and precision not in self.parked:
                self._park(precision)

    def _park(self, precision: str, forget: Callable[[str], None] | None = None) -> None:
        """``precision``'s matrices to host memory, the rungs built on them let go first."""
        self._drop_rungs(precision, forget)
        _move_matrices(self.w if precision == "bf16" else self.int8_weights, "cpu")
        self.parked.add(precision)
        _free_cached()

    def _drop_rungs(self, precision: str, forget: Callable[[str], None] | None) -> None:
        """Let go of every rung built on ``precision``'s matrices, and of the graphs kept for
        the next topic (bf16's): their graphs read addresses that are about to change."""
        if forget is not None:
            forget(precision)
        if precision == "bf16":
            self.graphs.clear()
        _free_cached()

    def fresh_cache(self) -> StaticCache:
        """A cache holding the prompt (each rung writes its own tokens past it)."""
        cache = StaticCache.empty(self.config, 1, self.max_len, self.cache.keys[0].device, self.dtype)
        for mine, theirs in zip(cache.keys + cache.values, self.cache.keys + self.cache.values):
            mine.copy_(theirs)
        return cache


#: The set-up of this process, under (device, dtype, quick): one at most.
_SETUP: dict[tuple, Setup] = {}


def shared_setup(lab) -> Setup:
    """The set-up for ``lab``'s device and sizes, built once a process: the runner runs
    capstone.decode and capstone.fused_decode one after the other, and both start here."""
    key = _setup_key(lab)
    if key not in _SETUP:
        release_setup()  # another device or size: free the one held first
        _SETUP[key] = Setup.build(lab)
    return _SETUP[key]


def _setup_key(lab) -> tuple:
    return str(lab.device), torch.bfloat16 if lab.cuda else torch.float32, lab.quick


def release_setup() -> None:
    """Free the shared set-up (16 GB of weights at full size, 24 with the int8 copy)."""
    _SETUP.clear()
    _free_cached()


def _free_cached(device=None) -> None:
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _room(device) -> float:
    """Bytes the GPU could still give this process (the CPU's memory is not counted)."""
    return allocatable(device) if device.type == "cuda" else float("inf")


def _matrix_bytes(w: Weights) -> int:
    """The bytes that move when ``w`` is parked (a tied head is the embedding, which stays)."""
    return sum(_nbytes(m) for m in w.linear_weights() if m is not w.embed)


def _moved(m, device):
    return Int8Weight(m.q.to(device), m.scale.to(device)) if isinstance(m, Int8Weight) else m.to(device)


def _move_matrices(w: Weights, device) -> None:
    """Move ``w``'s matrices (what a step multiplies by) to ``device``, in place; the
    embedding and the norms, which both precisions share, stay."""
    for i in range(len(w.layers)):
        _park_part(w, i, device)
    _park_part(w, -1, device)


def _park_part(w: Weights, i: int, device="cpu") -> None:
    """Layer ``i``'s matrices (``-1``: the head's) to ``device``, in place."""
    if i >= 0:
        lay = w.layers[i]
        w.layers[i] = lay._replace(wqkv=_moved(lay.wqkv, device), wo=_moved(lay.wo, device),
                                   w13=_moved(lay.w13, device), w2=_moved(lay.w2, device))
    elif w.output is not w.embed:  # a tied head is the embedding, which stays
        w.output = _moved(w.output, device)


#: Rungs whose captured graph the set-up keeps for capstone.fused_decode's baseline.
SHARED_RUNGS = ("compile+graph",)
#: The runner keeps the set-up for the topic that shares it when that topic runs next,
#: and calls :func:`release` otherwise (examples/lab/__main__.py).
SHARES_WITH = ("capstone.fused_decode",)
release = release_setup


def start(lab) -> _Run:
    """Both topics' first steps: this run's copy bandwidth and read roof (each record carries
    the roofs its fractions are taken against), then the shared set-up. The roofs come
    first, so that their 4 GiB of buffers never sit beside the weights: where this topic
    builds the weights, the buffers are gone before the weights come; where the other topic
    left them on a GPU without room for the buffers too, they wait in host memory meanwhile.
    The 1B shape's whole ladder then runs on an 8 GiB card, with little to spare."""
    kept = _SETUP.get(_setup_key(lab))
    if kept is not None and lab.cuda and not lab.quick:
        kept.make_room(ROOF_BYTES + 2**30)  # the buffers, and the check's float64 chunks
    roofs = measure_roofs(lab)
    run = _Run(lab, shared_setup(lab))
    run.gbs, run.read_gbs = roofs
    return run


# -- the memory roofs of this run ------------------------------------------------------
#: The roofs' buffers on a GPU: 2 GiB read (and 2 GiB written by the copy).
ROOF_BYTES = 4 * 2**30


def measure_roofs(lab) -> tuple[float, float]:
    """The two denominators of every fraction these topics report, measured in
    this run: the copy bandwidth (``dst.copy_(src)``, read + write bytes over the
    time) and the read roof (the best of :mod:`examples.capstone.read_roof`'s
    streaming reads of the same 2 GiB). A decode step only reads, and a read
    outruns a copy by a few per cent on these GPUs, so a fraction of the copy can
    pass 1; a fraction of the read roof is the one that says how close a step is
    to what this memory delivers. All are timed in the same interleaved rounds by
    the GPU's own kernel durations (a Triton launch's host time would otherwise
    count against the reads alone), each read checked against a float64 sum first."""
    count = ROOF_BYTES // 4 if lab.cuda and not lab.quick else (1 << 22)  # bf16: 2 GiB on a GPU
    nbytes = 2 * count
    src = torch.rand(count, dtype=torch.bfloat16, device=lab.device)
    dst = torch.empty_like(src)
    exact = sum(chunk.double().sum() for chunk in src.split(1 << 26))
    variants = {"copy": lambda: dst.copy_(src)}
    for name, read in reads(src).items():
        lab.check(f"read roof, {name}: sum of the bf16 values", read().double().sum(), exact,
                  tolerance=1e-5)
        variants[name] = read
    times = lab.compare_rows(
        variants, {name: ({"part": "copy" if name == "copy" else f"read, {name}"}, "time")
                   for name in variants}, timer="kernel")
    gbs = {name: (2 if name == "copy" else 1) * nbytes / (t.median * 1e-6) / 1e9
           for name, t in times.items()}
    copy = gbs.pop("copy")
    best = max(gbs, key=gbs.get)
    read_roof = gbs[best]
    lab.value(case={"part": "copy"}, metric="bandwidth", value=copy, unit="GB/s")
    for name, value in gbs.items():
        lab.value(case={"part": f"read, {name}"}, metric="bandwidth", value=value, unit="GB/s")
    lab.value(case={"part": "read roof"}, metric="read_roof", value=read_roof, unit="GB/s")
    lab.note("read roof", f"{best}, {nbytes / 2**30:g} GiB of bf16")
    variants.clear()  # the closures hold the 4 GiB of buffers: give them back before the ladder
    del src, dst
    if lab.cuda:
        torch.cuda.empty_cache()
    return copy, read_roof



class _Run:
    def __init__(self, lab, setup: Setup):
        self.lab, self.setup = lab, setup
        self.config, self.dtype, self.w = setup.config, setup.dtype, setup.w
        self.prompt_len, self.steps, self.max_len = setup.prompt_len, setup.steps, setup.max_len
        self.cos, self.sin = setup.cos, setup.sin
        self.first, self.reference = setup.first, setup.reference
        self.gbs = None  # this run's copy bandwidth, GB/s (read + write bytes)
        self.read_gbs = None  # this run's read roof, GB/s: the best streaming read
        self.ms_by_rung: dict[str, float] = {}
        #: rung -> its captured decoder (the int8 comparison replays two of them)
        self.graphed: dict[str, Decoder] = {}
        self._paired_over_eager: set[str] = set()

    def note_model(self) -> None:
        c = self.config
        shape = "" if c is TINY or MODEL == DEFAULT_MODEL else f"{MODEL_NAMES[MODEL]} shape: "
        self.lab.note("model", f"{shape}{c.layers} layers, hidden {c.hidden}, FFN {c.ffn}, "
                               f"{c.heads} query / {c.kv_heads} KV heads, vocabulary {c.vocab}, "
                               f"{str(self.dtype).removeprefix('torch.')}, random weights")
        if self.setup.parked:
            self.lab.note("weights parked in host memory", "no room on this GPU for both precisions: "
                          "the one not in use waited in host memory")

    def forget(self, precision: str) -> None:
        """Let go of every rung built on ``precision``'s weights (before they move)."""
        for rung in [r for r in self.graphed if r.startswith("int8") == (precision == "int8")]:
            del self.graphed[rung]

    # -- the ladder -----------------------------------------------------------------
    def ladder(self) -> None:
        lab, w = self.lab, self.setup.resident("bf16", self.forget)
        first_int = int(self.first.item())
        naive_prefix = naive_cache_from(self.setup.cache, self.prompt_len)
        lab.check("eager step equals the whole-sequence forward",
                  naive_step(w, first_int, self.prompt_len, list(naive_prefix)), self.reference,
                  tolerance=LOGIT_TOLERANCE)
        eager = Rung(w, lambda: naive_generate(w, naive_prefix, self.prompt_len, first_int, self.steps),
                     one_token=lambda: naive_generate(w, naive_prefix, self.prompt_len, first_int, 1))
        static = self.decoder(w)
        self.check_decoder("static", static)
        rungs = {"eager": eager, "static": self.rung(static)}
        if lab.cuda:
            self._guarded("static+graph", lambda: rungs.update(
                {"static+graph": self.rung(self.captured("static+graph", self.decoder(w)))}))
            # One compiled function for all 32 layers: same shapes, so one compilation.
            compiled_layer = self.setup.compiled_layer("bf16")
            self._guarded("compile", lambda: rungs.update(
                {"compile": self.rung(self._compiled(compiled_layer))}))
            self._guarded("compile+graph", lambda: rungs.update({"compile+graph": self.rung(
                self.captured("compile+graph", self.decoder(w, layer_fn=compiled_layer)))}))
        # Every rung against eager, in interleaved rounds: the ratios are paired.
        self.time_rungs(rungs, baseline="eager", speedup_metric="speedup_over_eager")

    def int8_rungs(self) -> None:
        trace = self.bf16_trace(self.graphed["static+graph"]) if "static+graph" in self.graphed else None
        wq = self.setup.resident("int8", self.forget)
        rungs = {}
        self._guarded("int8+graph", lambda: rungs.update({"int8+graph": self.rung(self.captured(
            "int8+graph", self.decoder(wq, linear=int8_linear), "int8"))}))
        compiled_layer = self.setup.compiled_layer("int8")
        self._guarded("int8 compile+graph", lambda: rungs.update({"int8 compile+graph": self.rung(
            self.captured("int8 compile+graph", self.decoder(wq, layer_fn=compiled_layer,
                                                             linear=int8_linear), "int8"))}))
        if rungs:
            self.time_rungs(rungs, precision="int8")
        if trace and "int8+graph" in self.graphed:
            self.int8_quality("int8+graph", trace, self.graphed["int8+graph"])
        self.lab.note("int8 blocks the autotuner kept", int8_chosen_configs())

    # -- building the rungs -----------------------------------------------------------
    def decoder(self, w, *, layer_fn=layer_step, linear=None, kind=Decoder) -> Decoder:
        """A decoder of ``w`` on a fresh copy of the prompt's cache."""
        kwargs = {"linear": linear} if linear else {}
        return kind(w, self.setup.fresh_cache(), self.cos, self.sin, start=self.prompt_len,
                    layer_fn=layer_fn, **kwargs)

    def _compiled(self, compiled_layer) -> Decoder:
        dec = self.decoder(self.w, layer_fn=compiled_layer)
        started = time.perf_counter()
        dec.reset(self.first)
        dec.advance()  # compiles the layer once; later layers reuse it
        torch.cuda.synchronize()
        self.lab.value(case=self._case("compile"), metric="compile_time",
                       value=time.perf_counter() - started, unit="s")
        self.check_decoder("compile", dec)
        return dec

    def captured(self, rung: str, dec: Decoder, precision: str = "bf16") -> Decoder:
        """``dec``'s step captured as a CUDA graph; the graph's memory pool kept as a figure;
        its first token checked against the reference (bf16)."""
        dec.reset(self.first)
        dec.advance()  # compile and autotune outside the capture
        torch.cuda.synchronize()
        dec.capture()
        torch.cuda.synchronize()
        pool = graph_pool_mib(dec.graph)  # raises if negative: a pool cannot hold less than nothing
        if pool > 0:
            self.lab.value(case=self._case(rung, precision), metric="graph_pool", value=pool, unit="MiB")
        else:  # the allocator listed no segment of this pool: say so rather than keep a 0
            self.lab.note(f"graph pool not found, {rung}", True)
        dec.reset(self.first)
        dec.graph.replay()
        if precision == "bf16":
            self.lab.check(f"{rung} equals the whole-sequence forward", dec.logits.clone(),
                           self.reference, tolerance=LOGIT_TOLERANCE)
        self.graphed[rung] = dec
        if rung in SHARED_RUNGS and precision == "bf16":
            self.setup.graphs[rung] = dec
        return dec

    def check_decoder(self, rung: str, dec: Decoder) -> None:
        dec.reset(self.first)
        dec.advance()
        self.lab.check(f"{rung} equals the whole-sequence forward", dec.logits, self.reference,
                       tolerance=LOGIT_TOLERANCE)

    def rung(self, dec: Decoder) -> Rung:
        """A decoder as a rung: a sample generates ``steps`` tokens from the prompt."""
        def generate():
            dec.reset(self.first)
            dec.generate(self.steps)
        return Rung(dec.w, generate, one_token=lambda: dec.generate(1),
                    rewind=lambda: dec.reset(self.first))

    def bf16_trace(self, bf16: Decoder) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The bf16 model's next :data:`QUALITY_TOKENS` steps from the first token: the token
        each step was fed and the logits it gave, kept for the int8 comparison (so that the
        bf16 weights may leave the GPU before the int8 ones come)."""
        bf16.reset(self.first)
        trace = []
        for _ in range(QUALITY_TOKENS):
            fed = bf16.tokens.clone()
            bf16.generate(1)
            trace.append((fed, bf16.logits.double()))
        return trace

    def int8_quality(self, rung: str, trace: list[tuple[torch.Tensor, torch.Tensor]], int8: Decoder) -> None:
        """Teacher-forced: int8 is fed the bf16 model's tokens (``trace``, from
        :meth:`bf16_trace`) and their logits compared. Each decoder steps as it was built to
        (its graph's replay, or its step)."""
        int8.reset(self.first)
        errors, agree = [], 0
        for fed, ref in trace:
            int8.tokens.copy_(fed)
            int8.generate(1)
            got = int8.logits.double()
            errors.append(((got - ref).norm() / ref.norm()).item())
            agree += int((got.argmax(-1) == ref.argmax(-1)).all().item())
        case = self._case(rung, "int8")
        self.lab.value(case=case, metric="logit_error", value=sum(errors) / len(errors), unit="")
        self.lab.value(case=case, metric="top1_agreement", value=agree / QUALITY_TOKENS, unit="")
        if max(errors) > 0.25:  # int8 that far off is a broken kernel, not rounding
            raise CheckFailed(f"int8 logits differ from bf16 by {max(errors):.3g} (relative)")

    # -- timing and the split of a step --------------------------------------------
    def _case(self, rung: str, precision: str = "bf16") -> dict:
        if precision == "bf16" and self.dtype != torch.bfloat16:
            precision = "fp32"  # the CPU path
        return {"rung": rung, "precision": precision}

    def time_rungs(self, rungs: dict[str, Rung], *, precision: str = "bf16", baseline: str | None = None,
                   speedup_metric: str = "speedup") -> None:
        """Time the rungs' samples (``steps`` tokens each) in interleaved rounds, then
        each rung's figures: per token, against the speed of light, and its split."""
        lab = self.lab
        reps = 3 if lab.quick else 10
        # One warm-up round: every rung already ran its step while it was built (its
        # check, its capture and first replay), so the round settles the allocator and
        # the clocks; a second one repeated it.
        warmup = 1
        generate = {name: r.generate for name, r in rungs.items()}
        if len(generate) == 1:
            (name, fn), = generate.items()
            times = {name: lab.time(fn, case=self._case(name, precision), metric="generate",
                                    unit="ms", warmup=warmup, repetitions=reps)}
        else:
            if baseline not in generate:
                baseline = None  # it failed to build: the others still compare
            times = lab.compare(generate, case={"precision": self._case("", precision)["precision"]},
                                key="rung", metric="generate", unit="ms", baseline=baseline,
                                speedup_metric=speedup_metric, warmup=warmup, repetitions=reps)
            if speedup_metric == "speedup_over_eager" and baseline:
                self._paired_over_eager.update(n for n in generate if n != baseline)
        for name, t in times.items():
            self.ms_by_rung[name] = t.median / self.steps
        for name, t in times.items():  # after all: best_bf16 needs every rung's time
            self._figures(name, rungs[name], precision)

    def _figures(self, rung: str, r: Rung, precision: str) -> None:
        lab, case, ms = self.lab, self._case(rung, precision), self.ms_by_rung[rung]
        lab.value(case=case, metric="ms_per_token", value=ms, unit="ms")
        lab.value(case=case, metric="tokens_per_s", value=1e3 / ms, unit="tokens/s")
        context = self.prompt_len + (self.steps + 1) / 2  # the mean over the generated tokens
        gb = bytes_read_per_token(r.w, context) / 1e9
        lab.value(case=case, metric="gb_per_token", value=gb, unit="GB")
        # --8<-- [start:fraction]
        fraction = gb / (ms * 1e-3) / self.gbs  # achieved bandwidth / copy bandwidth
        of_read_roof = gb / (ms * 1e-3) / self.read_gbs  # ... / the best streaming read
        # --8<-- [end:fraction]
        lab.value(case=case, metric="speed_of_light_fraction", value=fraction, unit="")
        lab.value(case=case, metric="read_roof_fraction", value=of_read_roof, unit="")
        if "eager" in self.ms_by_rung and rung != "eager" and rung not in self._paired_over_eager:
            lab.value(case=case, metric="speedup_over_eager", value=self.ms_by_rung["eager"] / ms, unit="x")
        if precision == "int8":
            bf16_twin = self.ms_by_rung.get(rung.removeprefix("int8 ").replace("int8+", "static+"))
            if bf16_twin:  # the same code with bf16 weights
                lab.value(case=case, metric="speedup_over_bf16", value=bf16_twin / ms, unit="x")
            best = min(m for r_, m in self.ms_by_rung.items() if not r_.startswith("int8"))
            lab.value(case=case, metric="speedup_over_best_bf16", value=best / ms, unit="x")
        if lab.cuda:
            self._split(case, r, ms)
            lab.value(case=case, metric="memory_reserved", unit="GiB",
                      value=torch.cuda.memory_reserved() / 2**30)

    def _split(self, case, r: Rung, step_ms: float) -> None:
        """Kernels per token, GPU busy and the gaps between kernels, from the profiler."""
        r.rewind()  # back to the prompt: the cache has room for the profiled tokens from there
        split = gpu_split(r.one_token, PROFILED_TOKENS)
        if split is None:
            self.lab.note(f"no kernels profiled, {case['rung']}", True)
            return
        lab = self.lab
        lab.value(case=case, metric="kernels_per_token", value=split.kernels, unit="")
        lab.value(case=case, metric="gpu_busy", value=split.busy_us / 1e3, unit="ms")
        lab.value(case=case, metric="gpu_gaps", value=(split.span_us - split.busy_us) / 1e3, unit="ms")
        lab.value(case=case, metric="busy_fraction", value=split.busy_us / split.span_us, unit="")
        lab.value(case=case, metric="host_issue", value=split.host_us / 1e3, unit="ms")
        # busy + gaps is the profiled step; it should add up to the step timed without the profiler
        lab.value(case=case, metric="split_over_step", value=split.span_us / 1e3 / step_ms, unit="x")

    def _guarded(self, rung: str, fn) -> None:
        """Build one rung; a failure of the machinery is noted and the others still run."""
        try:
            fn()
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
            self.lab.note(f"{rung} failed", f"{type(exc).__name__}: {str(exc)[:300]}")
            torch.cuda.synchronize()

    # -- prefill and decode on the roofline ----------------------------------------
    def prefill_sweep(self) -> None:
        c, w = self.config, self.setup.resident("bf16", self.forget)
        params = sum(_nbytes(m) for m in w.linear_weights()) / w.embed.element_size()
        for length in PREFILL_LENGTHS:
            prompt = torch.randint(0, c.vocab, (1, length), device=self.lab.device)
            case = {"phase": "prefill", "tokens": length, "batch": 1}
            t = self.lab.time(lambda: prefill(w, prompt, None, self.cos, self.sin), case=case,
                              metric="time", unit="ms", warmup=1, repetitions=5)
            # matrices on every token (the head on the last only) + causal attention
            flops = 2 * (params - c.vocab * c.hidden) * length + 2 * c.vocab * c.hidden
            flops += 2 * 2 * c.layers * c.heads * c.head_dim * length * (length + 1) / 2
            nbytes = bytes_read_per_token(w, 0) + length * 2 * c.layers * c.kv_heads * c.head_dim * 2
            self._roofline_point(case, flops, nbytes, t.median)

    def batch_sweep(self) -> None:
        c, w = self.config, self.setup.resident("bf16", self.forget)
        params = sum(_nbytes(m) for m in w.linear_weights()) / w.embed.element_size()
        for batch in DECODE_BATCHES:
            cache = StaticCache.empty(c, batch, self.max_len, self.lab.device, self.dtype)
            for t in cache.keys + cache.values:
                t.normal_(0, 1)  # any prompt: the work does not depend on the values
            dec = Decoder(w, cache, self.cos, self.sin, start=self.prompt_len)
            first = torch.randint(0, c.vocab, (batch,), device=self.lab.device)
            dec.reset(first)
            dec.capture()
            case = {"phase": "decode", "tokens": batch, "batch": batch}

            def generate(dec=dec, first=first):
                dec.reset(first)
                dec.generate(self.steps)
            t = self.lab.time(generate, case=case, metric="time", unit="ms", warmup=2, repetitions=10)
            step_ms = t.median / self.steps
            self.lab.value(case=case, metric="ms_per_step", value=step_ms, unit="ms")
            context = self.prompt_len + (self.steps + 1) / 2
            flops = 2 * params * batch + 2 * 2 * c.layers * c.heads * c.head_dim * context * batch
            nbytes = bytes_read_per_token(w, context, batch)
            self._roofline_point(case, flops, nbytes, step_ms)
            self.lab.value(case=case, metric="tokens_per_s", value=batch * 1e3 / step_ms, unit="tokens/s")
            self.lab.value(case=case, metric="speed_of_light_fraction",
                           value=nbytes / 1e9 / (step_ms * 1e-3) / self.gbs, unit="")
            self.lab.value(case=case, metric="read_roof_fraction",
                           value=nbytes / 1e9 / (step_ms * 1e-3) / self.read_gbs, unit="")
            del dec, cache
            torch.cuda.empty_cache()

    def _roofline_point(self, case, flops, nbytes, ms) -> None:
        self.lab.value(case=case, metric="intensity", value=flops / nbytes, unit="FLOP/B")
        self.lab.value(case=case, metric="rate", value=flops / (ms * 1e-3) / 1e12, unit="TFLOP/s")
        self.lab.value(case=case, metric="bandwidth", value=nbytes / (ms * 1e-3) / 1e9, unit="GB/s")


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
