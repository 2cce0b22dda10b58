"""Dense vs sparse matmul across sparsities, and 2:4 structured sparsity.

A square matrix A with a fraction ``sparsity`` of its entries zero (at random
places) times a dense B: once as a dense matmul (cuBLAS on a GPU, the CPU
BLAS otherwise), once with A stored as CSR (cuSPARSE's SpMM on a GPU). Both
are checked against a float64 product first (the dense products at a
shape's first sparsity, CSR at every one). The dense side is FP32 with
TF32 off (PyTorch's default); on a GPU it is also timed in TF32 and in BF16,
as a user would run it, for two shapes. On a GPU the same run also times the
CPU, and 2:4 sparse bf16 products (two zeros in every four) for a few shapes
if this build has the kernels, with the kernels the profiler saw.
"""

from __future__ import annotations

import sys
import warnings

import torch

from examples.lab.kernels import kernel_names

warnings.filterwarnings("ignore", message="Sparse CSR tensor support")

#: The main GPU shape's sparsities: 0.5 (dense far ahead), the neighbours
#: of each crossover (against FP32 between 0.9 and 0.95, against TF32
#: between 0.99 and 0.995, against BF16 between 0.995 and 0.999) and 0.98.
#: The second GPU shape (SECOND_SPARSITIES) and the CPU keep 0.8, and the
#: CPU 0.7: the CPU's crossover lies between 0.8 and 0.9. A CSR product of
#: the main shape at 70 or 80% zeros takes 6-10 ms, which 65 rounds make a
#: second and a half of the run for a point that no figure or claim needs.
SPARSITIES = (0.5, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
#: The CPU's sparsities: its crossover moves between 0.7 and 0.9 from run
#: to run (the page's claims), and its points are cheap.
CPU_SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)


# --8<-- [start:operands]
def random_sparse(n: int, sparsity: float, device) -> torch.Tensor:
    """An n x n float32 matrix whose entries are zero with prob. sparsity."""
    a = torch.randn(n, n, device=device)
    return a * (torch.rand(n, n, device=device) >= sparsity)


def variants(a: torch.Tensor):
    """The same product, dense and CSR: both compute a @ b."""
    a_csr = a.to_sparse_csr()
    return {
        "dense": lambda b: a @ b,  # GEMM: every zero is multiplied too
        "CSR": lambda b: a_csr @ b,  # SpMM: only the stored nonzeros
    }


# --8<-- [end:operands]


def _band(s: float) -> str:
    return "below 90%" if s < 0.9 else "90% and above"


#: Warm-up rounds before the interleaved samples: every variant has already
#: run once (its check), so these only bring the clocks up.
WARMUP = 5


def at_precision(precision: str, fn):
    """``fn`` with FP32 matmuls at ``precision`` ("highest": FP32, "high": TF32).

    The flag is global, and the dense variants are timed in interleaved
    rounds: each sets its own, a setter of a tenth of a microsecond.
    """
    def call(*args):
        torch.set_float32_matmul_precision(precision)
        return fn(*args)
    return call


def _sweep(lab, device, n: int, k: int, sparsities, reps=None,
           baselines: bool = False) -> None:
    """CSR against dense FP32 (TF32 off, PyTorch's default) at each sparsity;
    with ``baselines``, also against dense TF32 and dense BF16 (GPU).

    The variants of one sparsity are timed in interleaved rounds; each one's
    ``speedup`` is dense FP32's sample over its own in the same round.

    The dense products are checked at the first sparsity only: cuBLAS
    picks its kernel by shape and dtype, not by the values in A, so each
    later sparsity runs the kernels already checked on other numbers, and
    each float64 check of an output of 8-16 Mi entries costs the host a
    tenth of a second. CSR, whose work and whose cuSPARSE path depend on the
    nonzeros, is checked at every sparsity."""
    saved = torch.get_float32_matmul_precision()
    try:
        for i, s in enumerate(sparsities):
            check_dense = i == 0
            a = random_sparse(n, s, device)
            b = torch.randn(n, k, device=device)
            # One copy to the host for all the checks of this sparsity.
            expected = (a.double() @ b.double()).cpu()
            base = {"device": device.type, "n": n, "k": k, "sparsity": s,
                    "band": _band(s)}
            timed = {}
            for name, fn in variants(a).items():
                if name == "CSR" or check_dense:
                    lab.check(f"{name}, {device.type}, {n}x{k}, sparsity {s}",
                              fn(b), expected, tolerance=1e-5)
                timed[name] = fn
            timed["dense"] = at_precision("highest", timed["dense"])
            if baselines:
                timed.update(_dense_baselines(lab, a, b, expected, base,
                                              check=check_dense))
            del expected
            times = {name: t.median for name, t in lab.compare(
                timed, case=base, key="format", metric="time", unit="ms",
                baseline="dense", repetitions=reps, warmup=WARMUP,
                inputs=[(b,)]).items()}
            case = {**base, "format": "CSR"}
            for name, metric in (("dense TF32", "speedup_vs_tf32"),
                                 ("dense bf16", "speedup_vs_bf16")):
                if name in times:  # medians of the same interleaved rounds
                    lab.value(case=case, metric=metric, unit="x",
                              value=times[name] / times["CSR"])
    finally:
        torch.set_float32_matmul_precision(saved)


def _dense_baselines(lab, a, b, expected, base, check: bool) -> dict:
    """The dense product as a GPU user would run it: TF32 or BF16
    (checked if ``check``: see ``_sweep``)."""
    what = f"{base['n']}x{base['k']}, sparsity {base['sparsity']}"
    tf32 = at_precision("high", lambda b: a @ b)  # TF32 for fp32 matmuls
    if check:
        lab.check(f"dense TF32, {what}", tf32(b), expected, tolerance=5e-3)
    torch.set_float32_matmul_precision("highest")
    a16 = a.bfloat16()  # cast once, outside the timing

    def bf16(b, b16=b.bfloat16()):  # B cast once too
        return a16 @ b16
    if check:
        lab.check(f"dense bf16, {what}", bf16(b), expected, tolerance=2e-2)
    return {"dense TF32": tf32, "dense bf16": bf16}


# --8<-- [start:two_four]
def two_four(a: torch.Tensor) -> torch.Tensor:
    """Keep the two largest of every four entries in a row (2:4 pattern)."""
    groups = a.view(a.shape[0], -1, 4)
    keep = groups.abs().topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return (groups * mask).view_as(a)


def semi_structured_speedup(lab, n: int, k: int) -> None:
    from torch.sparse import to_sparse_semi_structured

    a = two_four(torch.randn(n, n, device="cuda", dtype=torch.bfloat16))
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a_24 = to_sparse_semi_structured(a)  # values + 2-bit indices
    # --8<-- [end:two_four]
    what = f"2:4 sparse bf16, {n}x{k}"
    columns = slice(None)
    if k > CHECKED_COLUMNS:  # the host's float64 check of 16384 x 16384
        # outputs took seconds: a random sample of columns, spread over the
        # whole output, catches a wrong tile as surely.
        columns = torch.randperm(k, device="cuda")[:CHECKED_COLUMNS]
        what += f", {CHECKED_COLUMNS} random columns"
    lab.check(what, (a_24 @ b)[:, columns],
              a.double() @ b[:, columns].double(), tolerance=2e-2)
    base = {"device": "cuda", "n": n, "k": k, "sparsity": 0.5, "band": "2:4"}
    # Interleaved rounds; the 2:4 product's ``speedup`` is the dense
    # sample over its own, round by round.
    lab.compare({"dense bf16": lambda: a @ b, "2:4 bf16": lambda: a_24 @ b},
                case=base, key="format", metric="time", unit="ms",
                baseline="dense bf16", warmup=WARMUP)
    lab.note("2:4 kernels", type(a_24).__name__)
    # Which kernels one product launched: the sparse GEMM and any copies.
    lab.note(f"2:4 kernels, {n}x{n} @ {n}x{k}", kernel_names(lambda: a_24 @ b))
    lab.note(f"dense bf16 kernels, {n}x{n} @ {n}x{k}", kernel_names(lambda: a @ b))


#: Columns of B whose products the 2:4 check compares with float64.
CHECKED_COLUMNS = 1024
#: (n, k) of the 2:4 products: A is n x n, B is n x k.
SHAPES_24 = ((8192, 1024), (8192, 8192), (16384, 16384))
#: The second CSR shape, on fewer sparsities (each CSR call is ~20 ms).
SECOND_SPARSITIES = (0.5, 0.8, 0.9, 0.95, 0.98, 0.99)


def measure(lab) -> None:
    from examples.lab.harness import CheckFailed

    cpu = torch.device("cpu")
    if lab.quick:
        _sweep(lab, lab.device, 512, 64, (0.5, 0.9, 0.99),
               baselines=lab.cuda)
        if lab.cuda:
            _sweep(lab, cpu, 512, 64, (0.5, 0.9, 0.99))
        return
    if lab.cuda:
        _sweep(lab, lab.device, 8192, 1024, SPARSITIES, baselines=True)
        _sweep(lab, lab.device, 4096, 4096, SECOND_SPARSITIES, reps=20,
               baselines=True)
        for n, k in SHAPES_24:
            try:
                semi_structured_speedup(lab, n, k)
            except CheckFailed:  # a wrong product aborts the record
                raise
            except (RuntimeError, NotImplementedError, ImportError) as exc:
                # An optional kernel missing from this build is an observation.
                lab.note(f"2:4 sparse, {n}x{k}", f"{type(exc).__name__}: "
                         f"{str(exc).strip().splitlines()[0]}")
    _sweep(lab, cpu, 2048, 256, CPU_SPARSITIES, reps=10)
    lab.note("CPU threads", torch.get_num_threads())


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
