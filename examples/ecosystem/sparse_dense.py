"""Dense vs sparse matmul across sparsities, and 2:4 structured sparsity.

A square matrix A with a fraction ``sparsity`` of its entries zero (at random
places) times a dense B: once as a dense matmul (cuBLAS on a GPU, the CPU
BLAS otherwise), once with A stored as CSR (cuSPARSE's SpMM on a GPU). Both
are checked against a float64 product first. On a GPU the same run also times
the CPU, and a 2:4 sparse bf16 matmul (two zeros in every four) if this
build has the kernels for it.
"""

from __future__ import annotations

import sys
import warnings

import torch

warnings.filterwarnings("ignore", message="Sparse CSR tensor support")

SPARSITIES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)


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


def _sweep(lab, device, n: int, k: int, sparsities, reps=None) -> None:
    for s in sparsities:
        a = random_sparse(n, s, device)
        b = torch.randn(n, k, device=device)
        expected = a.double() @ b.double()
        times = {}
        for name, fn in variants(a).items():
            lab.check(f"{name}, {device.type}, sparsity {s}", fn(b), expected,
                      tolerance=1e-5)
            case = {"device": device.type, "n": n, "sparsity": s,
                    "band": "below 90%" if s < 0.9 else "90% and above",
                    "format": name}
            times[name] = lab.time(lambda: fn(b), case=case, metric="time",
                                   unit="ms", repetitions=reps).median
        case = {"device": device.type, "n": n, "sparsity": s,
                "band": "below 90%" if s < 0.9 else "90% and above",
                "format": "CSR"}
        lab.value(case=case, metric="sparse_speedup", unit="x",
                  value=times["dense"] / times["CSR"])


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
    lab.check("2:4 sparse bf16", a_24 @ b, a.double() @ b.double(),
              tolerance=2e-2)
    # --8<-- [end:two_four]
    dense = lab.time(lambda: a @ b, case={"device": "cuda", "n": n,
                     "format": "dense bf16", "sparsity": 0.5,
                     "band": "2:4"}, metric="time", unit="ms").median
    case = {"device": "cuda", "n": n, "format": "2:4 bf16",
            "sparsity": 0.5, "band": "2:4"}
    sparse = lab.time(lambda: a_24 @ b, case=case, metric="time",
                      unit="ms").median
    lab.value(case=case, metric="sparse_speedup", unit="x",
              value=dense / sparse)
    lab.note("2:4 kernels", type(a_24).__name__)


def measure(lab) -> None:
    cpu = torch.device("cpu")
    if lab.quick:
        _sweep(lab, lab.device, 512, 64, (0.5, 0.9, 0.99))
        if lab.cuda:
            _sweep(lab, cpu, 512, 64, (0.5, 0.9, 0.99))
        return
    if lab.cuda:
        _sweep(lab, lab.device, 8192, 1024, SPARSITIES)
        try:
            semi_structured_speedup(lab, 8192, 1024)
        except (RuntimeError, NotImplementedError, ImportError) as exc:
            lab.note("2:4 sparse", f"{type(exc).__name__}: "
                     f"{str(exc).strip().splitlines()[0]}")
    _sweep(lab, cpu, 2048, 256, SPARSITIES, reps=10)
    lab.note("CPU threads", torch.get_num_threads())


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
