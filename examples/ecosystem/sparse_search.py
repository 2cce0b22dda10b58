"""cuSPARSELt's algorithm search for 2:4 sparse bf16 products.

PyTorch runs a cuSPARSELt product with algorithm id 0 unless told otherwise
(``SparseSemiStructuredTensor._DEFAULT_ALG_ID`` in torch/sparse/semi_structured.py);
cuSPARSELt's ``cusparseLtMatmulSearch`` times the algorithms (and split-K
settings) for one shape and keeps the fastest. This example asks, per shape:
how many algorithm ids there are, what each one's product takes, which one the
search picks, and how that compares with id 0 and with the dense cuBLAS bf16
product of the same pruned weight.

A weight W (out x in, bf16) is pruned to 2:4 along its rows (the reduction
dimension), compressed once (``torch._cslt_compress``), and multiplied by the
activations as a linear layer does, W @ xᵀ, with x stored tokens x in.
Every algorithm id's product, the search's pick, PyTorch's own
``to_sparse_semi_structured`` product and the dense one are each checked against
the float64 product of the pruned weight, then timed in interleaved rounds by
their kernels' own durations. Shapes: a Llama-3-8B-like 4096 x 14336 weight with
16 tokens (a decode batch) and 4096 tokens (a prefill), and 8192 x 8192 with
8192 tokens (the square product of "Dense vs sparse"). At most MAX_TIMED_ALGS
ids are timed per shape (the ids past them are counted and noted).

On a CPU only the pruning and its check run: cuSPARSELt needs a CUDA GPU of
compute capability 8.0 or later.
"""

from __future__ import annotations

import sys
import time
import warnings

import torch

from examples.ecosystem.sparse_dense import two_four
from examples.lab.kernels import kernel_names

#: (weight rows, weight columns, tokens): the product is W @ xᵀ with W rows x
#: columns and x tokens x columns.
SHAPES = ((4096, 14336, 16), (4096, 14336, 4096), (8192, 8192, 8192))
#: The quick run's one shape (multiples of cuSPARSELt's bf16 minimum of 16).
QUICK_SHAPE = (256, 512, 64)
#: Algorithm ids timed per shape, from 0 up: each costs one more variant in
#: every round (at 8192³ about 2 ms a call).
MAX_TIMED_ALGS = 12
#: Ids probed at most, when the search does not say how many there are.
PROBE_CAP = 64
#: Warm-up rounds before the interleaved samples (each variant has already
#: run: its check).
WARMUP = 5


# --8<-- [start:pruning]
def is_two_four(w: torch.Tensor) -> bool:
    """At most two nonzeros in every group of four along each row."""
    return bool(((w.view(w.shape[0], -1, 4) != 0).sum(-1) <= 2).all())


def two_four_by_rank(w: torch.Tensor) -> torch.Tensor:
    """The same pruning another way, for the check: rank each group's four
    magnitudes and keep the top two."""
    groups = w.view(w.shape[0], -1, 4)
    rank = groups.abs().argsort(-1).argsort(-1)  # 0 = smallest
    return (groups * (rank >= 2)).view_as(w)
# --8<-- [end:pruning]


# --8<-- [start:search]
def search(compressed: torch.Tensor, xt: torch.Tensor) -> dict:
    """cuSPARSELt's search for W @ xt: the algorithm id it picked, its split-K
    settings and ``CUSPARSELT_MATMUL_ALG_CONFIG_MAX_ID`` (on the H200, one past the last
    id: that id itself is refused)."""
    mm_search = getattr(getattr(torch._C, "_cusparselt", None), "mm_search", None)
    if mm_search is not None:  # returns (alg_id, split_k, split-K mode, max id)
        alg_id, split_k, mode, max_id = mm_search(compressed, xt, None, None, None, False)
        return {"alg_id": alg_id, "split_k": split_k, "mode": mode, "max_id": max_id}
    with warnings.catch_warnings():  # the older entry point: the id alone
        warnings.simplefilter("ignore")
        return {"alg_id": torch._cslt_sparse_mm_search(compressed, xt),
                "split_k": 1, "mode": None, "max_id": None}


def sparse_mm(compressed, xt, alg_id: int = 0, split_k: int = 1, mode=None):
    """W @ xt with one algorithm id (and split-K setting). torch's argument
    for the split-K mode is a bool ``split_k_one_kernel`` in some releases and
    an int ``split_k_mode`` in others: the search's own output says which."""
    kwargs = {"alg_id": alg_id}
    if split_k != 1:
        kwargs["split_k"] = split_k
        if mode is not None:
            kwargs["split_k_one_kernel" if isinstance(mode, bool) else "split_k_mode"] = mode
    return torch._cslt_sparse_mm(compressed, xt, **kwargs)
# --8<-- [end:search]


def valid_ids(compressed, xt, max_id) -> tuple[list[int], list[int]]:
    """The algorithm ids cuSPARSELt accepts for this shape, and those it
    refuses (RuntimeError), probed from 0 to the search's largest id; where
    the search does not say, up to the first refusal."""
    last = PROBE_CAP - 1 if max_id is None else min(int(max_id), PROBE_CAP - 1)
    ids, refused = [], []
    for alg_id in range(last + 1):
        try:
            sparse_mm(compressed, xt, alg_id)
        except RuntimeError:
            refused.append(alg_id)
            if max_id is None:
                break
            continue
        ids.append(alg_id)
    torch.cuda.synchronize()
    return ids, refused


def _skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 0):
        return f"needs compute capability 8.0 or later, not {major}.{minor}"
    backend = getattr(torch.backends, "cusparselt", None)
    if backend is None or not backend.is_available():
        return "this torch build has no cuSPARSELt"
    return None


def _pruning(lab, device) -> None:
    """The 2:4 pruning and its check: the part that runs anywhere."""
    w = torch.randn(256, 512, device=device)
    pruned = two_four(w)
    if not is_two_four(pruned):
        from examples.lab.harness import CheckFailed
        raise CheckFailed("2:4 pruning left more than two nonzeros in a group of four")
    lab.check(f"2:4 pruning, {device.type}", pruned, two_four_by_rank(w), tolerance=0)
    lab.value(case={"device": device.type, "shape": "256x512"}, metric="kept_share", unit="%",
              value=100.0 * float((pruned != 0).float().mean()))


def _shape(lab, rows: int, cols: int, tokens: int, max_timed: int) -> None:
    from torch.sparse import to_sparse_semi_structured

    w = two_four(torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16))
    if not is_two_four(w):
        from examples.lab.harness import CheckFailed
        raise CheckFailed(f"{rows}x{cols}: the pruned weight is not 2:4")
    xt = torch.randn(tokens, cols, device="cuda", dtype=torch.bfloat16).t()  # as F.linear
    compressed = torch._cslt_compress(w)  # kept values + 2-bit indices, one buffer
    expected = w.double() @ xt.double()
    case = {"shape": f"{rows}x{cols}", "tokens": tokens}
    what = f"{rows}x{cols}, {tokens} tokens"

    torch.cuda.synchronize()
    began = time.perf_counter()
    found = search(compressed, xt)
    torch.cuda.synchronize()
    lab.value(case=case, metric="search_time", unit="ms", value=(time.perf_counter() - began) * 1e3)
    lab.note(f"search, {what}", {k: (v if isinstance(v, (bool, type(None))) else int(v))
                                 for k, v in found.items()})

    ids, refused = valid_ids(compressed, xt, found["max_id"])
    if refused:
        lab.note(f"ids refused, {what}", refused)
    lab.value(case=case, metric="algorithms", unit="", value=len(ids))
    timed_ids = ids[:max_timed]
    if len(ids) > len(timed_ids):
        lab.note(f"ids not timed, {what}", f"{len(ids) - len(timed_ids)} (ids {timed_ids[-1] + 1} to {ids[-1]})")
    lab.value(case=case, metric="picked", unit="", value=int(found["alg_id"]))

    variants = {"dense bf16 (cuBLAS)": lambda: w @ xt}
    for alg_id in timed_ids:
        variants[f"alg {alg_id}"] = lambda alg_id=alg_id: sparse_mm(compressed, xt, alg_id)
    variants["picked by search"] = lambda: sparse_mm(compressed, xt, int(found["alg_id"]),
                                                  int(found["split_k"]), found["mode"])
    try:
        w_24 = to_sparse_semi_structured(w)  # PyTorch's own path: no search
        w_24 @ xt  # a product it refuses raises here, not in the check
        lab.note(f"to_sparse_semi_structured, {what}",
                 f"{type(w_24).__name__}, alg_id_cusparselt={getattr(w_24, 'alg_id_cusparselt', None)}")
        variants["to_sparse_semi_structured"] = lambda: w_24 @ xt
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        lab.note(f"to_sparse_semi_structured, {what}",
                 f"skipped: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"[:200])
    for name, fn in variants.items():  # every product against float64 first
        lab.check(f"{name}, {what}", fn(), expected, tolerance=2e-2)
    del expected

    times = {name: t.median for name, t in lab.compare(
        variants, case=case, key="variant", metric="time", unit="ms", timer="kernel",
        baseline="dense bf16 (cuBLAS)", warmup=WARMUP).items()}
    algs = {f"alg {i}": times[f"alg {i}"] for i in timed_ids}
    best = min(algs, key=algs.get)
    lab.note(f"fastest timed id, {what}", best)
    for metric, value in (("best_over_default", times["alg 0"] / algs[best]),
                          ("pick_over_default", times["alg 0"] / times["picked by search"]),
                          ("pick_over_best", algs[best] / times["picked by search"]),
                          ("slowest_over_fastest", max(algs.values()) / algs[best])):
        lab.value(case=case, metric=metric, unit="x", value=value)
    for name in ("alg 0", "picked by search", "dense bf16 (cuBLAS)"):
        lab.note(f"kernels, {name}, {what}", kernel_names(variants[name]))


def measure(lab) -> None:
    _pruning(lab, lab.device)
    why = _skip_reason() if lab.cuda else "needs a CUDA GPU"
    if why is not None:
        lab.note("cuSPARSELt search", f"skipped: {why}")
        return
    lab.note("cuSPARSELt version", getattr(torch.backends.cusparselt, "version", lambda: None)())
    from torch.sparse import SparseSemiStructuredTensor
    lab.note("torch's default alg_id", SparseSemiStructuredTensor._DEFAULT_ALG_ID)
    if lab.quick:
        _shape(lab, *QUICK_SHAPE, max_timed=3)
        return
    for rows, cols, tokens in SHAPES:
        _shape(lab, rows, cols, tokens, MAX_TIMED_ALGS)


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
