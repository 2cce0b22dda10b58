"""The last rungs: from the compiled step to the book's own kernels, bf16 and int8.

Same model, prompt, tokens per sample and speed-of-light fraction as
:mod:`examples.capstone.decode` (its :func:`~examples.capstone.decode.start`
hands over the set-up that topic built, and its ``_Run`` does the timing and
the profiler's split, so the two topics measure alike). Five rungs, all
captured as CUDA graphs, at batch 1:

* ``compile+graph``: the regional compile of Chapter 9's best rung, as the
  baseline: the very graph :mod:`examples.capstone.decode` captured when it
  ran just before in the same process (compiled once a run), timed again
  here; captured anew (from the same compiled layer) when this topic runs
  alone or the bf16 weights had to leave the GPU for the int8 ones;
* ``coordinate-descent+graph``: the same layer compiled with Inductor's
  coordinate-descent tuning, the setting gpt-fast decodes with: under it
  Inductor turns every matrix-vector product into a reduction of its own,
  fuses RMSNorm and the residuals into them and tunes each kernel's blocks
  (``torch/_inductor/decomposition.py``: "Our matrix vector multiplies only
  achieve peak bandwidth with coordinate descent tuning");
* ``book kernels+graph``: :mod:`examples.capstone.fused`, six kernels of the
  book's own per layer, launched with programmatic dependent launch (PDL) on
  a GPU that has it;
* ``book kernels+graph, no PDL``: the same kernels, each waiting for the one
  before to finish before it starts (the effect of PDL alone);
* ``int8 book kernels+graph``: the same kernels reading int8 rows.

The four bf16 rungs are timed in interleaved rounds, and the book's kernels
with PDL are also given as a paired ratio over the same kernels without it.
Then each weight shape alone: cuBLAS's kernel against the book's, with and
without PDL, interleaved, in the fraction of the copy bandwidth its stream of
weights reaches. On the CPU the tiny configuration runs the fused step's
PyTorch twin.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from examples.capstone import fused
from examples.capstone.decode import (LOGIT_TOLERANCE, _Run, add_arguments, configure,  # noqa: F401 - its flag
                                     release_setup, start)
from examples.capstone.fused import FusedDecoder
from examples.capstone.model import Config, graphed, layer_step
from examples.lab.kernels import gpu_split

def shapes(c: Config) -> dict[str, tuple[int, int]]:
    """The weight matrices one token reads, by name: [out, in] (for Llama 3 8B: wqkv
    6144 × 4096, wo 4096 × 4096, w13 28672 × 4096, w2 4096 × 14336, output 128256 × 4096)."""
    return {"wqkv": (c.qkv_rows, c.hidden), "wo": (c.hidden, c.heads * c.head_dim),
            "w13": (2 * c.ffn, c.hidden), "w2": (c.hidden, c.ffn), "output": (c.vocab, c.hidden)}

NO_PDL = "book kernels+graph, no PDL"
#: Inductor writing its own matrix-vector kernels (coordinate-descent tuning).
INDUCTOR = "coordinate-descent+graph"


def measure(lab) -> None:
    run = start(lab)
    try:
        _measure(lab, run)
        run.note_model()
    finally:
        # The last topic that uses the set-up: its 16-24 GB go back before the next topic.
        run = None
        release_setup()


def _measure(lab, run: _Run) -> None:
    if not lab.cuda:
        # On the CPU the same step runs as its PyTorch twin: no kernels, no graph.
        dec = run.decoder(run.w, kind=FusedDecoder)
        run.check_decoder("fused step (PyTorch twin)", dec)
        run.time_rungs({"fused step (PyTorch twin)": run.rung(dec)})
        return
    w = run.setup.resident("bf16", run.forget)
    rungs = {}
    run._guarded("compile+graph", lambda: rungs.update({"compile+graph": run.rung(_compiled(run))}))
    run._guarded(INDUCTOR, lambda: rungs.update({INDUCTOR: _coordinate_descent(run)}))
    rungs["book kernels+graph"] = run.rung(_fused(run, "book kernels+graph", w))
    with fused.pdl(False):  # PDL is a launch option: off while these kernels are captured
        rungs[NO_PDL] = run.rung(_fused(run, NO_PDL, w))
    # PDL's share is what the page reads off the book's two rungs: a paired ratio.
    run.time_rungs(rungs, baseline=NO_PDL, speedup_metric="speedup_over_no_pdl")
    _top_kernels(run, run.graphed["book kernels+graph"], "book kernels+graph")
    trace = run.bf16_trace(run.graphed["book kernels+graph"])
    rungs.clear()  # their closures hold the bf16 decoders, which may have to go for the int8 weights
    del w
    int8 = _fused(run, "int8 book kernels+graph", run.setup.resident("int8", run.forget), precision="int8")
    run.time_rungs({"int8 book kernels+graph": run.rung(int8)}, precision="int8")
    run.int8_quality("int8 book kernels+graph", trace, int8)
    if not lab.quick:
        # The table multiplies weights of its own: on a small card the model's wait in host memory.
        run.setup.make_room(TABLE_BYTES + 2**30)
        matvec_table(lab, run.config, run.gbs, run.read_gbs)
    # After the table, so that its plain products' choices are in the note too.
    lab.note("matvec blocks the autotuner kept", fused.chosen_configs())


def _compiled(run: _Run):
    """The compiled step's graph: the one capstone.decode captured in this process
    (the same compiled layer, checked again here), or captured now."""
    dec = run.setup.graphs.get("compile+graph")
    if dec is None:
        return run.captured("compile+graph", run.decoder(run.w, layer_fn=run.setup.compiled_layer("bf16")))
    dec.reset(run.first)
    dec.graph.replay()
    run.lab.check("compile+graph equals the whole-sequence forward (decode's graph)",
                  dec.logits.clone(), run.reference, tolerance=LOGIT_TOLERANCE)
    run.graphed["compile+graph"] = dec
    return dec


def _coordinate_descent(run: _Run):
    """The layer compiled with coordinate-descent tuning, the default mode otherwise.

    Not ``mode="max-autotune"``: once every M=1 product is a reduction, the only
    matrix products left for max-autotune's GEMM search are the two attention
    ``bmm`` of 4 query rows, 19 candidates each (8 s a run), and its extra
    pointwise configurations are a start that the coordinate descent refines
    anyway. The option is the compile's own (``options=``), so Dynamo keeps the
    regional compile above apart from this one without a reset.
    """
    layer = torch.compile(layer_step, dynamic=False, options={"coordinate_descent_tuning": True})
    return run.rung(run.captured(INDUCTOR, run.decoder(run.w, layer_fn=layer)))


def _fused(run: _Run, rung: str, w, precision: str = "bf16") -> FusedDecoder:
    """The fused step on ``w``, captured (its first call autotunes outside the capture)."""
    return run.captured(rung, run.decoder(w, kind=FusedDecoder), precision)


def _top_kernels(run: _Run, dec: FusedDecoder, rung: str, tokens: int = 8) -> None:
    """The profiler's kernels of one graphed token, by time: the page's table."""
    dec.reset(run.first)
    split = gpu_split(dec.graph.replay, tokens, host_ops=False)
    if split is None:
        run.lab.note(f"no kernels profiled, {rung}", True)
        return
    rows = sorted(split.durations_us.items(), key=lambda kv: -sum(kv[1]))
    run.lab.note(f"kernels per token, {rung}",
                 [f"{name.split('(')[0][:60]}: {len(d) / tokens:g} × {sum(d) / len(d):.1f} µs = "
                  f"{sum(d) / tokens:.0f} µs" for name, d in rows[:10]])


# --8<-- [start:matvec_table]
#: Bytes of weight copies each shape's products stream through (enough to miss the L2).
TABLE_BYTES = 2 * 10**9
KERNELS = (("cuBLAS", F.linear, False), ("book, no PDL", fused.matvec, False),
           ("book", fused.matvec, True))


def matvec_table(lab, config: Config, copy_gbs: float, read_gbs: float) -> None:
    """Each weight shape alone: cuBLAS and the book's kernel (with and without
    PDL), as a graph of back-to-back products over enough copies of the weight
    to miss the L2; the three timed in interleaved rounds. Each product's
    bandwidth as a fraction of this run's copy and of its read roof."""
    for name, (n, k) in shapes(config).items():
        copies = max(1, int(TABLE_BYTES // (n * k * 2)))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                   for _ in range(copies)]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        # against float64, 8192 rows at a time (the head whole would be 4 GiB)
        exact = torch.cat([x.double() @ rows.double().T for rows in weights[0].split(8192)], dim=-1)
        lab.check(f"book matvec, {name}", fused.matvec(x, weights[0]), exact, tolerance=1e-2)
        replays = {}
        for kernel, fn, pdl in KERNELS:
            with fused.pdl(pdl):
                calls = [lambda w=w: fn(x, w) for w in weights]
                replays[kernel] = graphed(calls).replay
        # speedup: cuBLAS's time over each kernel's, in the same round
        times = lab.compare(replays, case={"part": "matvec", "shape": name},
                            key="kernel", metric="time", unit="us",
                            baseline="cuBLAS", warmup=3, repetitions=20)
        for kernel, t in times.items():
            case = {"part": "matvec", "shape": name, "kernel": kernel}
            gbs = copies * n * k * 2 / (t.median * 1e-6) / 1e9
            lab.value(case=case, metric="per_call", unit="us",
                      value=t.median / copies)
            lab.value(case=case, metric="fraction_of_copy", unit="",
                      value=gbs / copy_gbs)
            lab.value(case=case, metric="fraction_of_read_roof", unit="",
                      value=gbs / read_gbs)
        del weights, replays
        torch.cuda.empty_cache()
# --8<-- [end:matvec_table]


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
