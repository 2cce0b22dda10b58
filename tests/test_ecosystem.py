"""Chapter 7: FFT convolution, 2:4 pruning, FP8 scaling, the C++ custom op, FlexAttention's masks."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from examples.ecosystem import flex_attention as flex
from examples.ecosystem.fft_conv import fft_conv2d
from examples.ecosystem.fp8_gemm import E4M3, column_major, fp8_matmul, to_fp8
from examples.ecosystem.sparse_dense import random_sparse, two_four, variants


@pytest.mark.parametrize("k", [1, 3, 7, 11])
def test_fft_conv_is_conv2d(k):
    x = torch.randn(2, 3, 20, 17, dtype=torch.float64)
    w = torch.randn(5, 3, k, k, dtype=torch.float64)
    torch.testing.assert_close(fft_conv2d(x, w), F.conv2d(x, w, padding=k // 2))


def test_two_four_keeps_two_of_four():
    a = two_four(torch.randn(8, 64))
    nonzero = (a.view(8, -1, 4) != 0).sum(-1)
    assert (nonzero == 2).all()


def test_sparse_variants_agree():
    a = random_sparse(64, 0.9, "cpu")
    assert 0.8 < (a == 0).float().mean() < 0.97
    b = torch.randn(64, 8)
    out = {name: fn(b) for name, fn in variants(a).items()}
    torch.testing.assert_close(out["CSR"], out["dense"])


def test_fp8_scale_uses_the_range():
    x = torch.randn(64, 64) * 1e-3
    x8, scale = to_fp8(x)
    assert x8.dtype == E4M3
    assert x8.float().abs().max() == torch.finfo(E4M3).max
    ref = (x8.double() * scale) @ (x8.double() * scale)
    x8_cm = column_major(x8)  # laid out once, reused by every product
    assert x8_cm.stride() == (1, 64) and torch.equal(x8_cm.float(), x8.float())
    for fast in (False, True):
        y = fp8_matmul(x8, scale, x8_cm, scale, fast_accum=fast).double()
        assert ((y - ref).norm() / ref.norm()) < 1e-2


def test_fresh_thread_reraises_and_returns():
    from types import SimpleNamespace

    from examples.ecosystem.fft_conv import in_fresh_thread

    lab = SimpleNamespace(cuda=False, device=torch.device("cpu"))
    assert in_fresh_thread(lab, lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        in_fresh_thread(lab, lambda: 1 / 0)


def test_cpp_op_is_silu_and_passes_opcheck():
    from examples.ecosystem.custom_op import build_extension

    build_extension(cuda=False)  # cached in torch's build folder after the first build
    x = torch.randn(1000, requires_grad=True)
    torch.testing.assert_close(torch.ops.book_ext.swish(x), F.silu(x))
    torch.library.opcheck(torch.ops.book_ext.swish, (x,))
    (g,) = torch.autograd.grad(torch.ops.book_ext.swish(x).sum(), x)
    (g_ref,) = torch.autograd.grad(F.silu(x).sum(), x)
    torch.testing.assert_close(g, g_ref)
    with pytest.raises(RuntimeError, match="float32 only"):
        torch.ops.book_ext.swish(torch.randn(3, dtype=torch.float64))


def test_the_gpu_build_has_its_sources():
    """The CUDA half is built only on a GPU: at least its sources must exist and agree."""
    from examples.ecosystem.custom_op import CPP_CUDA, CUDA

    assert "TORCH_LIBRARY_IMPL(book_ext, CUDA, m)" in CPP_CUDA
    launch = "void swish_launch(const float*"
    assert launch in CUDA and launch in CPP_CUDA


def test_the_build_folder_follows_torch_extensions_dir(monkeypatch, tmp_path):
    from torch.utils.cpp_extension import get_default_build_root

    from examples.ecosystem.custom_op import build_folder

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))  # what the lab runner does per run
    assert build_folder("book_swish_x") == tmp_path / "book_swish_x"
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")  # a reader's own runs share torch's cache
    assert build_folder("book_swish_x").parent == Path(get_default_build_root())


def test_fp8_recipes_are_exact_on_representable_values_and_order_as_the_outliers_say():
    from examples.ecosystem.fp8_scaling import (
        RECIPES, activations, amax_of, error_of_the_rest, fp8_round_trip, scale_bytes)

    exact = torch.tensor([[1.0, -2.0, 0.5, 448.0] * 8])  # e4m3 values: no rounding in any recipe
    for recipe in RECIPES:
        torch.testing.assert_close(fp8_round_trip(exact, recipe), exact)
    assert amax_of(torch.ones(2, 64), "block32").shape == (2, 2, 1)
    with pytest.raises(ValueError, match="unknown recipe"):
        amax_of(exact, "columnwise")
    x, outliers = activations(256, 1024, outlier=1e4, where="channels")
    tensor, row, block = (error_of_the_rest(x, outliers, r) for r in RECIPES)
    assert block < row < tensor  # channel outliers: only the 32-value blocks escape them
    x, outliers = activations(256, 1024, outlier=1e4, where="rows")
    assert error_of_the_rest(x, outliers, "rowwise") < 0.6 * error_of_the_rest(x, outliers, "tensorwise")
    assert [scale_bytes(256, 1024, r) for r in RECIPES] == [4, 1024, 8192]


def test_the_document_masks_agree_on_what_they_keep():
    """The dense mask, the counted useful entries and the block mask's tiles describe one mask:
    the tiles the block mask keeps cover every kept entry, and skip only empty tiles."""
    from torch.nn.attention.flex_attention import create_block_mask

    rows, n, block = 3, 1024, 128
    document = flex.document_ids(rows, n, 6, device="cpu")
    lengths = flex.lengths_of(document)
    assert all(len(row) == 6 and sum(row) == n for row in lengths)
    dense = flex.dense_mask(document)
    assert dense.shape == (rows, 1, n, n) and int(dense.sum()) == flex.useful_entries(lengths)
    block_mask = create_block_mask(flex.document_causal(document), B=rows, H=None, Q_LEN=n, KV_LEN=n,
                                   device="cpu")
    tiles_kept = dense.view(rows, 1, n // block, block, n // block, block).any(5).any(3)
    assert flex.tile_entries(block_mask) == int(tiles_kept.sum()) * block * block
    assert block_mask.sparsity() == pytest.approx(100 * (1 - tiles_kept.float().mean().item()))


def test_the_varlen_variant_packs_the_documents_as_sequences(monkeypatch):
    """varlen_attn needs a GPU; a stand-in with its signature (causal per sequence between
    cumulative offsets) checks the packing, the offsets and the unpacking against the dense mask."""
    import torch.nn.attention.varlen as varlen

    def stand_in(q, k, v, cu_q, cu_k, max_q, max_k, *, window_size=(-1, -1), **_):
        assert window_size == (-1, 0) and torch.equal(cu_q, cu_k) and cu_q.dtype == torch.int32
        out = torch.empty_like(q)
        for start, end in zip(cu_q[:-1].tolist(), cu_q[1:].tolist()):
            assert end - start <= max_q
            one = [t[start:end].transpose(0, 1) for t in (q, k, v)]
            out[start:end] = F.scaled_dot_product_attention(*one, is_causal=True).transpose(0, 1)
        return out

    monkeypatch.setattr(varlen, "varlen_attn", stand_in)
    b, h, n, d = 2, 3, 256, 16
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3))
    document = flex.document_ids(b, n, 5, device="cpu")
    call, unpacked = flex.varlen_call(q, k, v, flex.lengths_of(document))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=flex.dense_mask(document))
    torch.testing.assert_close(unpacked(call()), expected)


def test_block_scales_have_the_layouts_scaled_mm_checks():
    """ScaledBlas.cpp's checks: a's 1x128 scales (M, K/128) with strides (1, M); b's
    128x128 scales (K/128, N/128) with strides (1, K/128); b itself column-major."""
    import torch

    from examples.ecosystem.fp8_blockwise import dequantize_a, dequantize_w, quantize_a, quantize_w

    m, k, n = 256, 1024, 384
    a, w = torch.randn(m, k), torch.randn(n, k)
    a8, sa = quantize_a(a, "blockwise")
    b8, sb = quantize_w(w, "blockwise")
    assert sa.shape == (m, k // 128) and sa.stride() == (1, m)
    assert sb.shape == (k // 128, n // 128) and sb.stride() == (1, k // 128)
    assert b8.shape == (k, n) and b8.stride() == (1, k)
    for recipe in ("tensorwise", "rowwise", "blockwise"):  # e4m3 keeps ~3 bits: a few per cent
        (qa, s_a), (qw, s_w) = quantize_a(a, recipe), quantize_w(w, recipe)
        assert ((dequantize_a(qa, s_a, recipe) - a.double()).norm() / a.norm()).item() < 0.05
        assert ((dequantize_w(qw, s_w, recipe) - w.t().double()).norm() / w.norm()).item() < 0.05


def test_a_128_tile_keeps_an_outlier_channel_from_the_rest_of_its_row():
    from examples.ecosystem.fp8_blockwise import round_trip_error
    from examples.ecosystem.fp8_scaling import activations

    x, outliers = activations(256, 4096, outlier=1e4, where="channels")
    errors = {r: round_trip_error(x, outliers, r) for r in ("tensorwise", "rowwise", "blockwise")}
    assert errors["blockwise"] < errors["rowwise"] < errors["tensorwise"]
