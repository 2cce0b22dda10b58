"""The last rungs: from the compiled step to the book's own kernels, bf16 and int8.

Same model, prompt, token count and speed-of-light fraction as
:mod:`examples.capstone.decode` (its ``_Run`` does the set-up, the timing
and the profiler's split, so the two topics measure alike). Four rungs, all
captured as CUDA graphs, at batch 1:

* ``compile+graph``: the regional compile of Chapter 9's best rung, again in
  this run, as the baseline;
* ``max-autotune+graph``: the same with ``mode="max-autotune-no-cudagraphs"``
  and Inductor's coordinate-descent tuning, which lets Inductor write its own
  matrix-vector kernels and fold RMSNorm into them;
* ``book kernels+graph``: :mod:`examples.capstone.fused`, six kernels of the
  book's own per layer, launched with programmatic dependent launch (PDL) on
  a GPU that has it;
* ``book kernels+graph, no PDL``: the same kernels, each waiting for the one
  before to finish before it starts (the effect of PDL alone);
* ``int8 book kernels+graph``: the same kernels reading int8 rows.

Then each weight shape alone: cuBLAS's kernel against the book's, with and
without PDL, in the fraction of the copy bandwidth its stream of weights
reaches. On the CPU the tiny configuration runs the fused step's PyTorch twin.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from examples.capstone import fused
from examples.capstone.decode import PROMPT, STEPS, LOGIT_TOLERANCE, _Run, quantized
from examples.capstone.fused import FusedDecoder
from examples.capstone.model import LLAMA3_8B, TINY, layer_step
from examples.lab.harness import CheckFailed

#: Weight matrices one token reads, by name: [out, in].
SHAPES = {"wqkv": (6144, 4096), "wo": (4096, 4096), "w13": (28672, 4096),
          "w2": (4096, 14336), "output": (128256, 4096)}


def measure(lab) -> None:
    full = lab.cuda and not lab.quick
    config = LLAMA3_8B if full else TINY
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    prompt_len, steps = (PROMPT, STEPS) if full else (16, 4)
    run = _Run(lab, config, dtype, prompt_len, steps)
    run.copy_bandwidth()
    if lab.cuda:
        run._guarded("compile+graph", lambda: run._graph_rung(
            "compile+graph", run.w, torch.compile(layer_step, dynamic=False)))
        run._guarded("max-autotune+graph", lambda: _max_autotune_rung(run))
    # On the CPU the same step runs as its PyTorch twin: no kernels, no graph.
    bf16 = _fused_rung(run, "book kernels+graph" if lab.cuda else "fused step (PyTorch twin)", run.w)
    if lab.cuda:
        with fused.pdl(False):
            _fused_rung(run, "book kernels+graph, no PDL", run.w)
        wq = quantized(run.w)
        int8 = _fused_rung(run, "int8 book kernels+graph", wq, precision="int8")
        _int8_quality(run, bf16, int8)
        _top_kernels(run, bf16, "book kernels+graph")
        lab.note("matvec blocks the autotuner kept", fused.chosen_configs())
        if full:
            matvec_table(lab, run.gbs)
    lab.note("model", f"{config.layers} layers, hidden {config.hidden}, FFN {config.ffn}, "
                      f"{config.heads} query / {config.kv_heads} KV heads, vocabulary {config.vocab}, "
                      f"{str(dtype).removeprefix('torch.')}, random weights")


def _max_autotune_rung(run: _Run) -> None:
    import torch._inductor.config as inductor

    torch._dynamo.reset()  # a fresh compilation, not the regional one above
    with inductor.patch(coordinate_descent_tuning=True):
        layer = torch.compile(layer_step, dynamic=False, mode="max-autotune-no-cudagraphs")
        run._graph_rung("max-autotune+graph", run.w, layer)


def _fused_rung(run: _Run, rung: str, w, precision: str = "bf16") -> FusedDecoder:
    dec = FusedDecoder(w, run._fresh_cache(), run.cos, run.sin, start=run.prompt_len)
    if run.lab.cuda:
        dec.reset(run.first)
        dec.advance()  # autotune outside the capture
        torch.cuda.synchronize()
        dec.capture()
        dec.reset(run.first)
        dec.graph.replay()
        got = dec.logits.clone()
    else:
        dec.reset(run.first)
        dec.advance()
        got = dec.logits
    if precision == "bf16":
        run.lab.check(f"{rung} equals the whole-sequence forward", got, run.reference,
                      tolerance=LOGIT_TOLERANCE)
    run._timed_decoder(rung, w, dec, precision)
    return dec


def _int8_quality(run: _Run, bf16: FusedDecoder, int8: FusedDecoder, tokens: int = 16) -> None:
    """Teacher-forced: int8 is fed the bf16 step's tokens; their logits compared."""
    bf16.reset(run.first)
    int8.reset(run.first)
    errors, agree = [], 0
    for _ in range(tokens):
        fed = bf16.tokens.clone()
        bf16.graph.replay()
        int8.tokens.copy_(fed)
        int8.graph.replay()
        ref, got = bf16.logits.double(), int8.logits.double()
        errors.append(((got - ref).norm() / ref.norm()).item())
        agree += int((got.argmax(-1) == ref.argmax(-1)).all().item())
    case = run._case("int8 book kernels+graph", "int8")
    run.lab.value(case=case, metric="logit_error", value=sum(errors) / tokens, unit="")
    run.lab.value(case=case, metric="top1_agreement", value=agree / tokens, unit="")
    if max(errors) > 0.25:  # that far off is a broken kernel, not rounding
        raise CheckFailed(f"int8 logits differ from bf16 by {max(errors):.3g} (relative)")


def _top_kernels(run: _Run, dec: FusedDecoder, rung: str, tokens: int = 8) -> None:
    """The profiler's kernels of one graphed token, by time: the page's table."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    dec.reset(run.first)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(tokens):
            dec.graph.replay()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            by_name.setdefault(e.name.split("(")[0][:60], []).append(e.time_range.end - e.time_range.start)
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    run.lab.note(f"kernels per token, {rung}",
                 [f"{name}: {len(d) / tokens:g} × {sum(d) / len(d):.1f} µs = {sum(d) / tokens:.0f} µs"
                  for name, d in rows[:10]])


# --8<-- [start:matvec_table]
def matvec_table(lab, copy_gbs: float, total_bytes: float = 2e9) -> None:
    """Each weight shape alone: cuBLAS and the book's kernel (with and without
    PDL), as a graph of back-to-back products over enough copies of the weight
    to miss the L2."""
    for name, (n, k) in SHAPES.items():
        copies = max(1, int(total_bytes // (n * k * 2)))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        lab.check(f"book matvec, {name}", fused.matvec(x, weights[0]),
                  x.double() @ weights[0].double().T, tolerance=1e-2)
        for kernel, fn, pdl in (("cuBLAS", F.linear, False), ("book, no PDL", fused.matvec, False),
                                ("book", fused.matvec, True)):
            with fused.pdl(pdl):
                replay = _graphed([lambda w=w: fn(x, w) for w in weights])
            case = {"part": "matvec", "shape": name, "kernel": kernel}
            t = lab.time(replay, case=case, metric="time", unit="us", warmup=3, repetitions=20)
            lab.value(case=case, metric="per_call", unit="us", value=t.median / copies)
            lab.value(case=case, metric="fraction_of_copy", unit="",
                      value=copies * n * k * 2 / (t.median * 1e-6) / 1e9 / copy_gbs)
        del weights
        torch.cuda.empty_cache()
# --8<-- [end:matvec_table]


def _graphed(calls):
    """One CUDA graph of ``calls`` (after a warm-up that autotunes): its replay."""
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
    return graph.replay


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
