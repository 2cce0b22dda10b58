"""One token of a Llama-3-8B-shaped model, rung by rung, against its speed of light.

Every rung generates the same number of tokens greedily after the same
512-token prompt, at batch 1, and is timed over the whole generation:

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
over the copy bandwidth this run measured), and from the profiler the kernels
per token, the time the GPU was busy and the gaps between its kernels. Then
prefill (prompts of 128 to 8192 tokens) and decode (batch 1 to 64) on the
roofline. On the CPU the tiny configuration runs the first two rungs.
"""
from __future__ import annotations

import sys
import time
import torch

from examples.capstone.int8_linear import Int8Weight, int8_linear, quantize
from examples.capstone.model import (
    LLAMA3_8B, TINY, Config, Decoder, Layer, StaticCache, Weights, layer_step,
    naive_cache_from, naive_generate, naive_step, prefill, random_weights, rope_tables)
from examples.lab.harness import CheckFailed

PROMPT = 512  # tokens in the cache before generation starts
STEPS = 64  # tokens generated per timed sample
PREFILL_LENGTHS = (128, 512, 2048, 8192)
DECODE_BATCHES = (1, 4, 16, 64)
#: bf16 steps through 32 layers agree with another summation order to about 2 %
#: (relative L2); a wrong head or slice is off by 100 %.
LOGIT_TOLERANCE = 5e-2


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


def quantized(w: Weights) -> Weights:
    """The same model with every matrix a step multiplies by in int8."""
    layers = [Layer(lay.attn_norm, quantize(lay.wqkv), quantize(lay.wo), lay.ffn_norm,
                    quantize(lay.w13), quantize(lay.w2)) for lay in w.layers]
    return Weights(w.config, w.embed, layers, w.norm, quantize(w.output))


def measure(lab) -> None:
    full = lab.cuda and not lab.quick
    config = LLAMA3_8B if full else TINY
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    prompt_len, steps = (PROMPT, STEPS) if full else (16, 4)
    run = _Run(lab, config, dtype, prompt_len, steps)
    run.copy_bandwidth()
    run.ladder()
    if lab.cuda:
        run.int8_rungs()
        if full:
            run.prefill_sweep()
            run.batch_sweep()
    lab.note("model", f"{config.layers} layers, hidden {config.hidden}, FFN {config.ffn}, "
                      f"{config.heads} query / {config.kv_heads} KV heads, vocabulary {config.vocab}, "
                      f"{str(dtype).removeprefix('torch.')}, random weights")


class _Run:
    def __init__(self, lab, config: Config, dtype, prompt_len: int, steps: int):
        self.lab, self.config, self.dtype = lab, config, dtype
        self.prompt_len, self.steps = prompt_len, steps
        self.max_len = prompt_len + steps
        dev = lab.device
        self.w = random_weights(config, dev, dtype)
        self.cos, self.sin = rope_tables(config, max(self.max_len, max(PREFILL_LENGTHS) + 1), dev)
        self.cache = StaticCache.empty(config, 1, self.max_len, dev, dtype)
        g = torch.Generator(device="cpu").manual_seed(1)
        prompt = torch.randint(0, config.vocab, (1, prompt_len), generator=g).to(dev)
        self.first = prefill(self.w, prompt, self.cache, self.cos, self.sin).argmax(-1)
        # The reference for every rung's first token: the whole sequence at once.
        self.reference = prefill(self.w, torch.cat([prompt, self.first[:, None]], 1), None,
                                 self.cos, self.sin)
        self.gbs = None
        self.ms_by_rung: dict[str, float] = {}
        self.graph_bf16 = None

    # -- the memory roof of this run -------------------------------------------
    def copy_bandwidth(self) -> None:
        n = (1 << 30) if self.lab.cuda and not self.lab.quick else (1 << 24)
        src = torch.empty(n, dtype=torch.uint8, device=self.lab.device)
        dst = torch.empty_like(src)
        t = self.lab.time(lambda: dst.copy_(src), case={"part": "copy"}, metric="time", unit="us")
        self.gbs = 2 * n / (t.median * 1e-6) / 1e9  # read + write
        self.lab.value(case={"part": "copy"}, metric="bandwidth", value=self.gbs, unit="GB/s")

    # -- the ladder -----------------------------------------------------------------
    def ladder(self) -> None:
        lab, w = self.lab, self.w
        first_int = int(self.first.item())
        naive_prefix = naive_cache_from(self.cache, self.prompt_len)
        lab.check("eager step equals the whole-sequence forward",
                  naive_step(w, first_int, self.prompt_len, list(naive_prefix)), self.reference,
                  tolerance=LOGIT_TOLERANCE)
        self._timed("eager", w, lambda: naive_generate(w, naive_prefix, self.prompt_len,
                                                       first_int, self.steps),
                    one_token=lambda: naive_generate(w, naive_prefix, self.prompt_len, first_int, 1))

        static = Decoder(w, self.cache, self.cos, self.sin, start=self.prompt_len)
        self._check_decoder("static", static)
        self._timed_decoder("static", w, static)
        if not self.lab.cuda:
            return
        self._guarded("static+graph", lambda: self._graph_rung("static+graph", w, layer_step))
        # One compiled function for all 32 layers: same shapes, so one compilation.
        compiled_layer = torch.compile(layer_step, dynamic=False)
        self._guarded("compile", lambda: self._compile_rung(w, compiled_layer))
        self._guarded("compile+graph",
                      lambda: self._graph_rung("compile+graph", w, compiled_layer))

    def int8_rungs(self) -> None:
        wq = quantized(self.w)
        self._guarded("int8+graph", lambda: self._graph_rung(
            "int8+graph", wq, layer_step, linear=int8_linear, precision="int8"))
        compiled_layer = torch.compile(layer_step, dynamic=False)
        self._guarded("int8 compile+graph", lambda: self._graph_rung(
            "int8 compile+graph", wq, compiled_layer, linear=int8_linear, precision="int8"))
        self._guarded("int8 quality", lambda: self._int8_quality(wq))

    def _compile_rung(self, w, compiled_layer) -> None:
        dec = Decoder(w, self.cache, self.cos, self.sin, start=self.prompt_len, layer_fn=compiled_layer)
        started = time.perf_counter()
        dec.reset(self.first)
        dec.advance()  # compiles the layer once; later layers reuse it
        torch.cuda.synchronize()
        self.lab.value(case=self._case("compile"), metric="compile_time",
                       value=time.perf_counter() - started, unit="s")
        self._check_decoder("compile", dec)
        self._timed_decoder("compile", w, dec)

    def _graph_rung(self, rung, w, layer_fn, linear=None, precision="bf16") -> None:
        kwargs = {"linear": linear} if linear else {}
        dec = Decoder(w, self._fresh_cache(), self.cos, self.sin, start=self.prompt_len,
                      layer_fn=layer_fn, **kwargs)
        dec.reset(self.first)
        dec.advance()  # compile and autotune outside the capture
        torch.cuda.synchronize()
        before = torch.cuda.memory_reserved()
        dec.capture()
        torch.cuda.synchronize()
        self.lab.value(case=self._case(rung, precision), metric="graph_pool",
                       value=(torch.cuda.memory_reserved() - before) / 2**20, unit="MiB")
        dec.reset(self.first)
        dec.graph.replay()
        if precision == "bf16":
            self.lab.check(f"{rung} equals the whole-sequence forward", dec.logits.clone(),
                           self.reference, tolerance=LOGIT_TOLERANCE)
            if rung == "static+graph":
                self.graph_bf16 = dec
        self._timed_decoder(rung, w, dec, precision)

    def _fresh_cache(self) -> StaticCache:
        """A cache holding the same prompt (each graph keeps its own buffers)."""
        cache = StaticCache.empty(self.config, 1, self.max_len, self.lab.device, self.dtype)
        for mine, theirs in zip(cache.keys + cache.values, self.cache.keys + self.cache.values):
            mine.copy_(theirs)
        return cache

    def _int8_quality(self, wq: Weights) -> None:
        """Teacher-forced: both models see the bf16 model's tokens; compare their logits."""
        bf16 = self.graph_bf16
        int8 = Decoder(wq, self._fresh_cache(), self.cos, self.sin, start=self.prompt_len,
                       linear=int8_linear)
        bf16.reset(self.first)
        int8.reset(self.first)
        errors, agree = [], 0
        for _ in range(16):
            fed = bf16.tokens.clone()
            bf16.graph.replay()
            int8.tokens.copy_(fed)
            int8.advance()
            ref, got = bf16.logits.double(), int8.logits.double()
            errors.append(((got - ref).norm() / ref.norm()).item())
            agree += int((got.argmax(-1) == ref.argmax(-1)).all().item())
        case = self._case("int8+graph", "int8")
        self.lab.value(case=case, metric="logit_error", value=sum(errors) / len(errors), unit="")
        self.lab.value(case=case, metric="top1_agreement", value=agree / 16, unit="")
        if max(errors) > 0.25:  # int8 that far off is a broken kernel, not rounding
            raise CheckFailed(f"int8 logits differ from bf16 by {max(errors):.3g} (relative)")

    # -- timing and the split of a step --------------------------------------------
    def _check_decoder(self, rung: str, dec: Decoder) -> None:
        dec.reset(self.first)
        dec.advance()
        self.lab.check(f"{rung} equals the whole-sequence forward", dec.logits, self.reference,
                       tolerance=LOGIT_TOLERANCE)

    def _timed_decoder(self, rung, w, dec: Decoder, precision="bf16") -> None:
        def generate(n=self.steps):
            dec.reset(self.first)
            dec.generate(n)
        self._timed(rung, w, generate, one_token=lambda: dec.generate(1), precision=precision,
                    rewind=lambda: dec.reset(self.first))

    def _case(self, rung: str, precision: str = "bf16") -> dict:
        if precision == "bf16" and self.dtype != torch.bfloat16:
            precision = "fp32"  # the CPU path
        return {"rung": rung, "precision": precision}

    def _timed(self, rung, w, generate, *, one_token, precision="bf16", rewind=lambda: None) -> None:
        lab, case = self.lab, self._case(rung, precision)
        t = lab.time(generate, case=case, metric="generate", unit="ms", warmup=2,
                     repetitions=10 if not lab.quick else 3)
        ms = t.median / self.steps
        lab.value(case=case, metric="ms_per_token", value=ms, unit="ms")
        lab.value(case=case, metric="tokens_per_s", value=1e3 / ms, unit="tokens/s")
        context = self.prompt_len + (self.steps + 1) / 2  # the mean over the generated tokens
        gb = bytes_read_per_token(w, context) / 1e9
        lab.value(case=case, metric="gb_per_token", value=gb, unit="GB")
        # --8<-- [start:fraction]
        fraction = gb / (ms * 1e-3) / self.gbs  # achieved bandwidth / copy bandwidth
        # --8<-- [end:fraction]
        lab.value(case=case, metric="speed_of_light_fraction", value=fraction, unit="")
        self.ms_by_rung[rung] = ms
        if "eager" in self.ms_by_rung:
            lab.value(case=case, metric="speedup_over_eager", value=self.ms_by_rung["eager"] / ms, unit="x")
        if precision == "int8":
            bf16_twin = self.ms_by_rung.get(rung.removeprefix("int8 ").replace("int8+", "static+"))
            if bf16_twin:  # the same code with bf16 weights
                lab.value(case=case, metric="speedup_over_bf16", value=bf16_twin / ms, unit="x")
            best = min(m for r, m in self.ms_by_rung.items() if not r.startswith("int8"))
            lab.value(case=case, metric="speedup_over_best_bf16", value=best / ms, unit="x")
        if lab.cuda:
            self._split(case, one_token, rewind, ms)
            lab.value(case=case, metric="memory_reserved", unit="GiB",
                      value=torch.cuda.memory_reserved() / 2**30)

    def _split(self, case, one_token, rewind, step_ms: float, tokens: int = 8) -> None:
        """Kernels per token, GPU busy and the gaps between kernels, from the profiler."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        rewind()  # back to the prompt: the cache has room for `steps` tokens from there
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            host_started = time.perf_counter()
            for _ in range(tokens):
                one_token()
            host_s = time.perf_counter() - host_started
            torch.cuda.synchronize()
        spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                       if e.device_type == DeviceType.CUDA)
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        if not spans:
            self.lab.note(f"no kernels profiled, {case['rung']}", True)
            return
        busy, end = 0.0, spans[0][0]
        for s, e in spans:  # merge overlapping intervals
            busy += max(0.0, e - max(s, end))
            end = max(end, e)
        span_us = spans[-1][1] - spans[0][0]
        lab = self.lab
        lab.value(case=case, metric="kernels_per_token", value=len(kernels) / tokens, unit="")
        lab.value(case=case, metric="gpu_busy", value=busy / tokens / 1e3, unit="ms")
        lab.value(case=case, metric="gpu_gaps", value=(span_us - busy) / tokens / 1e3, unit="ms")
        lab.value(case=case, metric="busy_fraction", value=busy / span_us, unit="")
        lab.value(case=case, metric="host_issue", value=host_s / tokens * 1e3, unit="ms")
        # busy + gaps is the profiled step; it should add up to the step timed without the profiler
        lab.value(case=case, metric="split_over_step", value=span_us / tokens / 1e3 / step_ms, unit="x")

    def _guarded(self, rung: str, fn) -> None:
        """Run one rung; a failure of the machinery is noted and the others still run."""
        try:
            fn()
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
            self.lab.note(f"{rung} failed", f"{type(exc).__name__}: {str(exc)[:300]}")
            torch.cuda.synchronize()

    # -- prefill and decode on the roofline ----------------------------------------
    def prefill_sweep(self) -> None:
        c, w = self.config, self.w
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
        c, w = self.config, self.w
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
            context = self.prompt_len + (self.steps + 1) / 2
            flops = 2 * params * batch + 2 * 2 * c.layers * c.heads * c.head_dim * context * batch
            nbytes = bytes_read_per_token(w, context, batch)
            self._roofline_point(case, flops, nbytes, step_ms)
            self.lab.value(case=case, metric="tokens_per_s", value=batch * 1e3 / step_ms, unit="tokens/s")
            self.lab.value(case=case, metric="speed_of_light_fraction",
                           value=nbytes / 1e9 / (step_ms * 1e-3) / self.gbs, unit="")
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
