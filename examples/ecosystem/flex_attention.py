"""FlexAttention against SDPA on a mask no fused SDPA kernel can skip: documents packed in a row.

Training packs several documents into each row of a batch, and a token must
attend only to earlier tokens of its own document: a block-diagonal causal
mask. ``F.scaled_dot_product_attention`` takes it only as a dense boolean
``attn_mask`` (``seq x seq`` per row): FlashAttention refuses any mask, and the
backends that take one (cuDNN, memory-efficient) add it as a bias to every
score, so they compute all ``seq²`` entries however few the mask keeps.
FlexAttention takes the same mask as a ``mask_mod``; ``create_block_mask``
records which 128 x 128 tiles are empty, and the kernel ``torch.compile``
writes skips them.

Every variant is checked against float64 attention on one head of each row;
then all are timed in interleaved rounds by the GPU's own kernel durations:
SDPA with the dense mask (the dispatcher's choice, and memory-efficient
forced), FlexAttention with the block mask, and two mask-free references
(what a kernel built for the mask costs): varlen FlashAttention on the
documents as separate sequences, and plain causal attention (SDPA and
FlexAttention), whose work is several times the documents'. Each variant's
rate counts the useful work only: the entries the mask keeps. The compile,
the mask's construction and the memory each variant needs are recorded too.
"""

from __future__ import annotations

import inspect
import sys
import time
import warnings

import torch
import torch.nn.functional as F

from examples.ecosystem.sdpa_backends import (BACKENDS, SWITCHES, _why, backend_of, dispatched,
                                              with_backends)
from examples.lab.kernels import kernel_names

#: batch, heads, sequence length, head dimension: 4 rows of 8,192 tokens, 16 heads of 128.
SHAPE = (4, 16, 8192, 128)
QUICK_SHAPE = (2, 2, 512, 64)
#: Documents packed in each row, cut at random points (the same points every run: the
#: mask fixes the work, so it is part of the experiment; q, k and v are fresh each run).
DOCUMENTS = 8
QUICK_DOCUMENTS = 4
MASK_SEED = 2412

#: The variant every other one's speed-up is paired with: what SDPA does given the mask.
BASELINE = "SDPA, dense mask"
CAUSAL = "causal, one document per row"


# --8<-- [start:masks]
def document_ids(rows: int, n: int, documents: int, *, device, seed: int = MASK_SEED) -> torch.Tensor:
    """Which document each token belongs to, [rows, n]: ``documents - 1`` random cuts per row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(rows, n, dtype=torch.int32)
    for row in ids:
        cuts = torch.randperm(n - 1, generator=g)[:documents - 1] + 1
        row[cuts] = 1
    return ids.cumsum(1, dtype=torch.int32).to(device)


def document_causal(document: torch.Tensor):
    """The mask_mod: query ``q`` sees key ``kv`` if both are in one document and kv is not later."""
    def mask_mod(b, h, q, kv):
        return (document[b, q] == document[b, kv]) & (q >= kv)
    return mask_mod


def dense_mask(document: torch.Tensor) -> torch.Tensor:
    """The same mask for SDPA: [rows, 1, n, n] booleans, broadcast over the heads."""
    n = document.shape[1]
    same = document[:, None, :, None] == document[:, None, None, :]
    return same & torch.ones(n, n, dtype=torch.bool, device=document.device).tril()
# --8<-- [end:masks]


def lengths_of(document: torch.Tensor) -> list[list[int]]:
    """Each row's document lengths."""
    return [torch.unique_consecutive(row, return_counts=True)[1].tolist() for row in document.cpu()]


def useful_entries(lengths: list[list[int]]) -> int:
    """Score entries the mask keeps, summed over rows: l (l + 1) / 2 per document of l tokens."""
    return sum(l * (l + 1) // 2 for row in lengths for l in row)


def tensor_bytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def fresh_compile_cache():
    """Inductor's and Triton's caches in a new temporary directory: the compile is timed cold
    on every run, not read back from the last run's files."""
    from torch._inductor import utils

    return getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache


def varlen_call(q, k, v, lengths: list[list[int]]):
    """FlashAttention's variable-length kernel on the documents as separate causal sequences.

    The inputs are packed once, outside the timed call, as [tokens, heads, dim] (the layout a
    model that packs documents would hold); the output is unpacked to [b, h, n, d] for the
    check only. torch 2.10's ``varlen_attn`` takes ``is_causal``; later ones a window, where
    (-1, 0) means causal.
    """
    from torch.nn.attention.varlen import varlen_attn

    b, h, n, d = q.shape
    starts = [0]
    for row in lengths:
        for length in row:
            starts.append(starts[-1] + length)
    cu = torch.tensor(starts, dtype=torch.int32, device=q.device)
    longest = max(max(row) for row in lengths)
    qp, kp, vp = (t.transpose(1, 2).reshape(b * n, h, d).contiguous() for t in (q, k, v))
    causal = ({"is_causal": True} if "is_causal" in inspect.signature(varlen_attn).parameters
              else {"window_size": (-1, 0)})

    def call():
        return varlen_attn(qp, kp, vp, cu, cu, longest, longest, **causal)

    def unpacked(out):
        return out.reshape(b, n, h, d).transpose(1, 2)
    return call, unpacked


def measure(lab) -> None:
    b, h, n, d = QUICK_SHAPE if lab.quick else SHAPE
    documents = QUICK_DOCUMENTS if lab.quick else DOCUMENTS
    dtype = torch.bfloat16 if lab.cuda else torch.float32
    saved = {name: flag() for name, flag in (
        ("flash", torch.backends.cuda.flash_sdp_enabled),
        ("memory-efficient", torch.backends.cuda.mem_efficient_sdp_enabled),
        ("cuDNN", torch.backends.cuda.cudnn_sdp_enabled),
        ("math", torch.backends.cuda.math_sdp_enabled))}
    try:
        measure_shape(lab, b, h, n, d, documents, dtype)
    finally:
        for name, on in saved.items():
            SWITCHES[name](on)
    lab.note("torch", torch.__version__)


def measure_shape(lab, b, h, n, d, documents, dtype) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    shape = {"seq": n, "head_dim": d}
    q, k, v = (torch.randn(b, h, n, d, device=lab.device, dtype=dtype) for _ in range(3))
    document_mask = f"{documents} documents per row, causal"
    # --8<-- [start:variants]
    document = document_ids(b, n, documents, device=lab.device)
    dense = dense_mask(document)  # b x n x n bytes
    block_mask = create_block_mask(document_causal(document), B=b, H=None,
                                   Q_LEN=n, KV_LEN=n, device=lab.device)
    # One document per row: plain causal through the same mask_mod, no recompile.
    one_document = torch.zeros_like(document)
    causal_block_mask = create_block_mask(document_causal(one_document), B=b, H=None,
                                          Q_LEN=n, KV_LEN=n, device=lab.device)
    flex = torch.compile(flex_attention)
    all_backends = set(BACKENDS)
    calls = {  # name -> (mask, call)
        BASELINE: (document_mask, with_backends(all_backends, q, k, v, {"attn_mask": dense})),
        "SDPA flash, dense mask": (document_mask, with_backends({"flash"}, q, k, v, {"attn_mask": dense})),
        "SDPA, dense mask, memory-efficient": (
            document_mask, with_backends({"memory-efficient"}, q, k, v, {"attn_mask": dense})),
        "FlexAttention, block mask": (document_mask, lambda: flex(q, k, v, block_mask=block_mask)),
        "SDPA, is_causal": (CAUSAL, with_backends(all_backends, q, k, v, {"is_causal": True})),
        "SDPA flash, is_causal": (CAUSAL, with_backends({"flash"}, q, k, v, {"is_causal": True})),
        "FlexAttention, causal block mask": (CAUSAL, lambda: flex(q, k, v, block_mask=causal_block_mask)),
    }
    # --8<-- [end:variants]
    lengths = lengths_of(document)
    lab.note("document lengths per row", lengths)
    unpack = {}
    if lab.cuda:
        try:
            varlen, unpack["varlen FlashAttention"] = varlen_call(q, k, v, lengths)
            calls["varlen FlashAttention"] = (document_mask, varlen)
        except (ImportError, TypeError, ValueError) as exc:  # an API that moved between releases
            lab.note("varlen FlashAttention", f"skipped: {type(exc).__name__}: {exc}"[:200])
    else:  # the forced backends are CUDA's, and varlen_attn is FlashAttention's kernel
        for name in ("SDPA flash, dense mask", "SDPA, dense mask, memory-efficient", "SDPA flash, is_causal"):
            del calls[name]
        lab.note("varlen FlashAttention", "skipped: needs a CUDA GPU")

    # The compile: the first call of each block mask, host clock, caches cold.
    torch._dynamo.reset()
    with fresh_compile_cache()():
        for mask, block in ((document_mask, block_mask), (CAUSAL, causal_block_mask)):
            lab.synchronize()
            began = time.perf_counter()
            flex(q, k, v, block_mask=block)
            lab.synchronize()
            lab.value(case={**shape, "mask": mask, "kernel": "FlexAttention, first call"},
                      metric="compile_time", unit="s", value=time.perf_counter() - began)

    useful = {document_mask: useful_entries(lengths) * h, CAUSAL: n * (n + 1) // 2 * b * h}
    check_all(lab, calls, unpack, q, k, v, dense)

    # One profiler session per variant: its kernels, and for an unforced SDPA call, the backend
    # they belong to, which names it (on the CPU, the backend comes from the ops' names).
    kernels = {name: kernel_names(call) if lab.cuda else "(CPU: no kernels)" for name, (_, call) in calls.items()}
    names = {name: name for name in calls}
    for name, kw in ((BASELINE, {"attn_mask": dense}), ("SDPA, is_causal", {"is_causal": True})):
        found = kernels[name]
        chosen = backend_of(" ".join(found)) if isinstance(found, list) else dispatched(q, k, v, **kw)
        names[name] = f"{name} ({chosen})"
    for name, found in kernels.items():
        lab.note(f"kernels, {names[name]}", found)
    memory(lab, calls, names, shape)

    rows = {names[x]: ({**shape, "mask": mask, "kernel": names[x]}, "time") for x, (mask, _) in calls.items()}
    ratios = {names[x]: (rows[names[x]][0], "speedup", 1.0) for x in calls if x != BASELINE}
    times = lab.compare_rows({names[x]: call for x, (_, call) in calls.items()}, rows,
                             baseline=names[BASELINE], ratios=ratios, unit="ms", timer="kernel",
                             warmup=5)
    computed = {  # the entries each kernel computes, where the kernel says: every one, or whole tiles
        names[x]: entries for x, entries in (
            (BASELINE, b * h * n * n), ("SDPA, dense mask, memory-efficient", b * h * n * n),
            ("FlexAttention, block mask", tile_entries(block_mask) * h),
            ("FlexAttention, causal block mask", tile_entries(causal_block_mask) * h)) if x in calls}
    for name, t in times.items():
        case, _ = rows[name]
        seconds = t.median * 1e-3
        lab.value(case=case, metric="rate", unit="TFLOP/s",
                  value=4 * d * useful[case["mask"]] / seconds / 1e12)
        if name in computed:
            lab.value(case=case, metric="computed_rate", unit="TFLOP/s",
                      value=4 * d * computed[name] / seconds / 1e12)

    mask_figures(lab, shape, document_mask, document, dense, block_mask, useful, b, n, h,
                 lambda: create_block_mask(document_causal(document), B=b, H=None,
                                           Q_LEN=n, KV_LEN=n, device=lab.device))
    lab.value(case={**shape, "mask": CAUSAL}, metric="block_sparsity", unit="%",
              value=causal_block_mask.sparsity())


def check_all(lab, calls, unpack, q, k, v, dense) -> None:
    """Every variant against float64 attention, on head ``row % heads`` of every row: one score
    matrix of n x n doubles at a time (512 MiB at n = 8192)."""
    b, h = q.shape[:2]
    heads = [row % h for row in range(b)]
    expected = {}
    for mask in {mask for mask, _ in calls.values()}:
        refs = []
        for row, head in enumerate(heads):
            one = [t[row:row + 1, head:head + 1].double() for t in (q, k, v)]
            kw = {"is_causal": True} if mask == CAUSAL else {"attn_mask": dense[row:row + 1]}
            refs.append(F.scaled_dot_product_attention(*one, **kw)[0, 0])
        expected[mask] = torch.stack(refs)
    tolerance = 2e-2 if q.dtype == torch.bfloat16 else 1e-4
    refused = []
    for name, (mask, call) in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # a refusing SDPA backend says why in a warning
            try:
                out = call()
            except (RuntimeError, ValueError) as exc:  # an SDPA backend, or varlen_attn, refused
                lab.note(f"{name}: refused", _why(exc, caught))
                refused.append(name)
                continue
        out = unpack.get(name, lambda o: o)(out)
        lab.check(f"{name}, {mask}", torch.stack([out[row, head] for row, head in enumerate(heads)]),
                  expected[mask], tolerance=tolerance)
    for name in refused:
        del calls[name]
    for switch in SWITCHES.values():  # the last forced call left only its backend on
        switch(True)


def tile_entries(block_mask) -> int:
    """Entries of the tiles the kernel computes (partial and full), per head, summed over rows."""
    rows, cols = block_mask.BLOCK_SIZE
    tiles = block_mask.kv_num_blocks.sum()
    if block_mask.full_kv_num_blocks is not None:
        tiles = tiles + block_mask.full_kv_num_blocks.sum()
    return int(tiles) * rows * cols


def peak_mib(fn) -> float:
    """Memory one call of ``fn`` allocates beyond what is already allocated (its output
    included), from the CUDA allocator's peak."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def memory(lab, calls, names, shape) -> None:
    if lab.cuda:
        for name, (mask, call) in calls.items():
            lab.value(case={**shape, "mask": mask, "kernel": names[name]}, metric="peak_memory", unit="MiB",
                      value=peak_mib(call))


def mask_figures(lab, shape, document_mask, document, dense, block_mask, useful, b, n, h, rebuild) -> None:
    """How sparse the mask is, what each form of it holds in memory, and what rebuilding the
    block mask costs (once per batch in training, since the documents change)."""
    case = {**shape, "mask": document_mask}
    lab.value(case=case, metric="block_sparsity", unit="%", value=block_mask.sparsity())
    lab.value(case=case, metric="useful_fraction", unit="%", value=100 * useful[document_mask] / (b * h * n * n))
    # What each form keeps between calls: the dense booleans; the block mask's tile lists and
    # the document ids its mask_mod reads for the partial tiles.
    lab.value(case={**case, "kernel": "dense boolean mask"}, metric="mask_memory", unit="MiB",
              value=tensor_bytes(dense) / 2**20)
    lab.value(case={**case, "kernel": "create_block_mask"}, metric="mask_memory", unit="MiB",
              value=(tensor_bytes(*block_mask.as_tuple()) + tensor_bytes(document)) / 2**20)
    builds = {"create_block_mask": rebuild, "dense boolean mask": lambda: dense_mask(document)}
    for name, build in builds.items():
        lab.time(build, case={**case, "kernel": name}, metric="mask_time", unit="ms",
                 timer="host_sync", warmup=2, repetitions=5 if lab.quick else 10)
        if lab.cuda:  # create_block_mask, run eagerly, evaluates the mask_mod on every entry
            lab.value(case={**case, "kernel": name}, metric="peak_memory", unit="MiB", value=peak_mib(build))


def main(argv=None) -> int:
    from examples.lab.cli import run_example

    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
