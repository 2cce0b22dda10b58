"""Chapter 9's model on the CPU: the steps agree, int8 is int8, the TP split is exact."""
from __future__ import annotations

import pytest
import torch

from examples.capstone import speed_of_light as sol
from examples.capstone.decode import bytes_read_per_token
from examples.capstone.int8_linear import int8_linear, quantize, quantized, reference_int8_linear
from examples.capstone.model import (
    TINY, Config, Decoder, StaticCache, graph_pool_mib, naive_cache_from, naive_generate,
    naive_step, prefill, random_weights, rope_tables)
from examples.capstone.tensor_parallel import shard


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    w = random_weights(TINY, "cpu", torch.float32)
    cos, sin = rope_tables(TINY, 64, "cpu")
    prompt = torch.randint(0, TINY.vocab, (1, 12))
    cache = StaticCache.empty(TINY, 1, 20, "cpu", torch.float32)
    first = prefill(w, prompt, cache, cos, sin).argmax(-1)
    whole = prefill(w, torch.cat([prompt, first[:, None]], 1), None, cos, sin)
    return w, cos, sin, cache, first, whole


def test_static_step_equals_the_whole_sequence(tiny):
    w, cos, sin, cache, first, whole = tiny
    dec = Decoder(w, cache, cos, sin, start=12)
    dec.reset(first)
    dec.advance()
    torch.testing.assert_close(dec.logits, whole, rtol=1e-4, atol=1e-4)
    assert dec.pos.item() == 13 and dec.tokens.item() == whole.argmax(-1).item()


def test_naive_step_equals_the_whole_sequence_and_both_generate_the_same_tokens(tiny):
    w, cos, sin, cache, first, whole = tiny
    prefix = naive_cache_from(cache, 12)
    torch.testing.assert_close(naive_step(w, first.item(), 12, list(prefix)), whole, rtol=1e-4, atol=1e-4)
    naive = naive_generate(w, prefix, 12, first.item(), 6)
    dec = Decoder(w, cache, cos, sin, start=12)
    dec.reset(first)
    static = []
    for _ in range(6):
        dec.advance()
        static.append(dec.tokens.item())
    assert naive == static


def test_a_static_step_writes_one_cache_slot_and_nothing_else(tiny):
    w, cos, sin, shared, first, _ = tiny
    cache = StaticCache([k.clone() for k in shared.keys], [v.clone() for v in shared.values])
    for k in cache.keys:
        k[:, :, 12:] = 0  # what a fresh cache holds past the prompt
    before = [k.clone() for k in cache.keys]
    dec = Decoder(w, cache, cos, sin, start=12)
    dec.reset(first)
    dec.advance()
    for old, new in zip(before, cache.keys):
        changed = (old != new).any(dim=(0, 1, 3)).nonzero().flatten().tolist()
        assert changed == [12]


def test_int8_rows_round_trip_within_half_a_step():
    w = torch.randn(64, 96)
    q = quantize(w)
    assert q.q.dtype == torch.int8 and q.q.abs().max() <= 127
    err = (q.q.float() * q.scale[:, None] - w).abs()
    assert (err <= q.scale[:, None] / 2 + 1e-6).all()


def test_int8_linear_is_the_dequantized_product():
    w, x = torch.randn(40, 72), torch.randn(3, 72)
    q = quantize(w)
    torch.testing.assert_close(int8_linear(x, q), x @ (q.q.float() * q.scale[:, None]).T, rtol=1e-5, atol=1e-5)


def test_the_triton_kernel_in_the_interpreter_matches_the_reference(cli):
    pytest.importorskip("triton")
    code = (
        "import torch\n"
        "from examples.capstone.int8_linear import int8_gemv, quantize, reference_int8_linear\n"
        "torch.manual_seed(0)\n"
        "q = quantize(torch.randn(50, 200))\n"  # neither size a multiple of the blocks
        "x = torch.randn(2, 200)\n"
        "got = int8_gemv(x, q.q, q.scale, {'BLOCK_N': 16, 'BLOCK_K': 64})\n"
        "torch.testing.assert_close(got, reference_int8_linear(x, q.q, q.scale), rtol=1e-4, atol=1e-4)\n"
        "print('ok')\n")
    proc = cli.run("-c", code, env=cli.cpu_env(TRITON_INTERPRET="1"), timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", cli.explain(proc)


def test_int8_model_halves_the_bytes_and_stays_close(tiny):
    w, cos, sin, cache, first, whole = tiny
    wq = quantized(w)
    ratio = bytes_read_per_token(wq, 0) / bytes_read_per_token(w, 0)
    assert 0.25 < ratio < 0.3  # fp32 -> int8 plus scales and fp32 norms
    dec = Decoder(wq, cache, cos, sin, start=12, linear=int8_linear)
    dec.reset(first)
    dec.advance()
    rel = ((dec.logits - whole).norm() / whole.norm()).item()
    assert 0 < rel < 0.05


def test_the_speed_of_light_counts_the_same_bytes_as_the_measurement(tiny):
    w = tiny[0]
    c = TINY  # the calculator reads a model Config as it reads a Shape
    model = sol.speed_of_light(c, weight_bytes=4, context=10, batch=1, bandwidth_gbs=1)
    norms_fp32_extra = ((2 * c.layers + 1) * c.hidden) * 2  # the model counts norms at bf16
    kv_fp32_extra = 10 * sol.kv_bytes_per_token(c)  # and the cache at bf16
    assert bytes_read_per_token(w, 10) == pytest.approx(model.step_gb * 1e9 + norms_fp32_extra + kv_fp32_extra)


def test_llama3_8b_weights_and_cache_by_hand():
    c = sol.Shape()
    per_layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336
    assert sol.weight_count(c) == 32 * per_layer + 128256 * 4096
    assert sol.kv_bytes_per_token(c) == 2 * 32 * 8 * 128 * 2 == 131072
    r = sol.speed_of_light(c, weight_bytes=1, context=0, batch=4, bandwidth_gbs=4000)
    assert r.tokens_per_s == pytest.approx(4 / (r.weight_gb / 4000))
    assert sol.speed_of_light(c, weight_bytes=2, context=200_000, batch=64, bandwidth_gbs=1).bound == "kv cache"


def test_the_calculator_refuses_bad_flags(cli):
    proc = cli.run("-m", "examples.capstone.speed_of_light", "--bandwidth-gbs", "-3")
    assert "--bandwidth-gbs" in cli.one_line_error(proc)
    proc = cli.run("-m", "examples.capstone.speed_of_light", "--bandwidth-gbs", "3000", "--heads", "x")
    assert "--heads" in cli.one_line_error(proc)


@pytest.mark.parametrize("world", [2, 4])
def test_tensor_parallel_slices_partition_the_whole_model(tiny, world):
    """Every head, FFN column and vocabulary row lands on exactly one rank (the gloo run of
    examples.capstone.tensor_parallel checks the split step against the whole one)."""
    w = random_weights(Config(layers=2, hidden=64, ffn=160, heads=8, kv_heads=4, vocab=512, head_dim=8),
                       "cpu", torch.float32)
    c = w.config
    cos, sin = rope_tables(c, 32, "cpu")
    prompt = torch.randint(0, c.vocab, (1, 9))
    cache = StaticCache.empty(c, 1, 16, "cpu", torch.float32)
    first = prefill(w, prompt, cache, cos, sin).argmax(-1)
    dec = Decoder(w, cache, cos, sin, start=9)
    dec.reset(first)
    dec.advance()
    shards = [shard(w, r, world) for r in range(world)]
    assert sum(s.output.shape[0] for s in shards) == c.vocab
    assert all(s.config.heads * world == c.heads and s.config.ffn * world == c.ffn for s in shards)
    # Column/row splits: concatenating the slices' q/k/v rows gives back every head once.
    q_rows = torch.cat([s.layers[0].wqkv[: s.config.heads * c.head_dim] for s in shards])
    torch.testing.assert_close(q_rows, w.layers[0].wqkv[: c.heads * c.head_dim])
    w2 = torch.cat([s.layers[0].w2 for s in shards], dim=1)
    torch.testing.assert_close(w2, w.layers[0].w2)


def test_the_fused_step_equals_the_whole_sequence(tiny):
    from examples.capstone.fused import FusedDecoder

    w, cos, sin, cache, first, whole = tiny
    dec = FusedDecoder(w, _copy(cache), cos, sin, start=12)
    dec.reset(first)
    dec.advance()
    torch.testing.assert_close(dec.logits, whole, rtol=1e-4, atol=1e-4)
    assert dec.pos.item() == 13 and dec.tokens.item() == whole.argmax(-1).item()


def _copy(cache: StaticCache) -> StaticCache:
    return StaticCache([k.clone() for k in cache.keys], [v.clone() for v in cache.values])


FUSED_KERNELS_SCRIPT = """
import torch
from examples.capstone import fused
from examples.capstone.int8_linear import quantize
from examples.capstone.model import TINY, StaticCache, prefill, random_weights, rope_tables
torch.manual_seed(0)
fused.FIXED_BLOCKS = {"BLOCK_N": 4, "BLOCK_K": 32}  # no autotuner in the interpreter
fused.SPLIT = 8  # several attention splits, some wholly past pos
kernels, twins = (lambda t: True), (lambda t: False)

def both(fn, *args, **kwargs):  # the kernel, then its PyTorch twin, on copies
    fused._on_gpu = kernels
    got = fn(*[a.clone() if torch.is_tensor(a) else a for a in args], **kwargs)
    fused._on_gpu = twins
    return got, fn(*args, **kwargs)

x, g = torch.randn(1, 40), torch.rand(40) + 0.5  # sizes that are not multiples of the blocks
for weight in (torch.randn(50, 40), quantize(torch.randn(50, 40))):
    for kw in ({}, {"norm": g}, {"residual": torch.randn(1, 50)}, {"norm": g, "swiglu": True}):
        n = 25 if kw.get("swiglu") else 50
        got, ref = both(fused.matvec, x, weight, **kw)
        assert got.shape == (1, n)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
c = TINY
w = random_weights(c, "cpu", torch.float32)
cos, sin = rope_tables(c, 40, "cpu")
cache = StaticCache.empty(c, 1, 20, "cpu", torch.float32)
prompt = torch.randint(0, c.vocab, (1, 12))
first = prefill(w, prompt, cache, cos, sin).argmax(-1)
for step in range(3):  # the whole step: logits, the cache written, the next token
    k1, v1 = [t.clone() for t in cache.keys], [t.clone() for t in cache.values]
    c1, c2 = StaticCache(k1, v1), StaticCache(cache.keys, cache.values)
    pos = torch.tensor([12 + step])
    fused._on_gpu = kernels
    got = fused.fused_logits(w, first, pos, c1, cos, sin)
    fused._on_gpu = twins
    ref = fused.fused_logits(w, first, pos, c2, cos, sin)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(k1 + v1, c2.keys + c2.values):
        torch.testing.assert_close(a, b)
    tokens, moved = torch.zeros(1, dtype=torch.long), pos.clone()
    fused._on_gpu = kernels
    fused.argmax_next(got, tokens, moved)
    assert tokens.item() == got.argmax(-1).item() and moved.item() == pos.item() + 1
    first = tokens
for weight in (w.layers[0].wqkv, quantize(w.layers[0].wqkv)):  # q/k/v + rotary, bf16 and int8 rows
    x0, here = torch.randn(1, c.hidden), torch.tensor([7])
    caches = [[t.clone() for t in (cache.keys[0], cache.values[0])] for _ in range(2)]
    out = []
    for on_gpu, (keys, values) in zip((kernels, twins), caches):
        fused._on_gpu = on_gpu
        out.append(fused.qkv_rope_store(x0, weight, w.layers[0].attn_norm, 1e-5, cos, sin, here,
                                        keys, values, c))
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-4)
    for a, b in zip(*caches):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert not torch.equal(caches[0][0][0, :, 7], cache.keys[0][0, :, 7])  # k was written at pos
print("ok")
"""


def test_the_fused_kernels_in_the_interpreter_match_their_twins(cli):
    pytest.importorskip("triton")
    proc = cli.run("-c", FUSED_KERNELS_SCRIPT, env=cli.cpu_env(TRITON_INTERPRET="1"), timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", cli.explain(proc)


def test_the_fused_plan_launches_196_kernels_and_reads_the_token_s_bytes():
    from examples.capstone.fused import kernel_plan
    from examples.capstone.model import LLAMA3_8B

    plan = kernel_plan(LLAMA3_8B, context=544)
    assert sum(launches for _, launches, _ in plan) == 6 * 32 + 4  # as the profiler counts
    weights_and_cache = sol.weight_count(LLAMA3_8B) * 2 + sol.kv_bytes_per_token(LLAMA3_8B) * 544
    total = sum(nbytes for _, _, nbytes in plan)
    assert weights_and_cache <= total <= weights_and_cache * 1.001  # plus activations only


def test_pdl_is_off_on_the_cpu_and_the_switch_restores_the_setting():
    from examples.capstone import fused

    cpu = torch.zeros(1)
    assert fused._launch(cpu) == {"PDL": False}  # no launch option a CPU kernel would reject
    assert fused.PDL is True
    with fused.pdl(False):
        assert fused.PDL is False
        with pytest.raises(RuntimeError):
            with fused.pdl(True):
                raise RuntimeError("a failing capture")
        assert fused.PDL is False
    assert fused.PDL is True


class _FakeGraph:
    def __init__(self, pool):
        self._pool = pool

    def pool(self):
        return self._pool


def test_the_graph_pool_is_what_the_graph_s_pool_holds_never_negative():
    """The figure once was reserved memory after the capture minus before, which the
    capture's emptying of the allocator's cache made negative for a run's first graph.
    It is the sum of the segments of the graph's own pool, whatever the rest does."""
    mib = 2**20
    snapshot = [  # the default pool (0, 0), another graph's pool and this graph's two segments
        {"segment_pool_id": (0, 0), "total_size": 4096 * mib},
        {"segment_pool_id": (7, 1), "total_size": 64 * mib},
        {"segment_pool_id": (7, 2), "total_size": 20 * mib},
        {"segment_pool_id": (7, 2), "total_size": 2 * mib},
    ]
    assert graph_pool_mib(_FakeGraph((7, 2)), snapshot) == 22
    assert graph_pool_mib(_FakeGraph((7, 3)), snapshot) == 0  # a pool the allocator does not list
    with pytest.raises(ValueError, match="less than nothing"):
        graph_pool_mib(_FakeGraph((7, 2)), snapshot + [{"segment_pool_id": (7, 2), "total_size": -30 * mib}])


def test_both_capstone_topics_share_one_set_up_and_the_last_frees_it(monkeypatch):
    from examples.capstone import decode, fused_decode
    from examples.lab.harness import Lab

    built = []
    real = decode.random_weights
    monkeypatch.setattr(decode, "random_weights", lambda *a, **k: built.append(a) or real(*a, **k))
    decode.release_setup()
    lab = Lab(torch.device("cpu"), quick=True)
    try:
        decode.measure(lab)
        assert len(built) == 1 and len(decode._SETUP) == 1  # kept for the next topic
        setup = next(iter(decode._SETUP.values()))
        other = Lab(torch.device("cpu"), quick=True)
        assert decode.start(other).setup is setup  # the same model, prompt and reference
        fused_decode.measure(other)
        assert len(built) == 1  # not built again
        assert not decode._SETUP  # fused_decode, the last user, released it
        decode.shared_setup(Lab(torch.device("cpu"), quick=False))  # another key: a new set-up
        assert len(built) == 2 and len(decode._SETUP) == 1
    finally:
        lab.load.stop()
        other.load.stop()
        decode.release_setup()


def test_each_fused_product_autotunes_over_its_own_winners_and_never_over_nothing():
    """The matvec autotuner's candidates depend on the product (its flags), not only on
    the precision: one block for a product that always chose it, the precision's full
    list for a product without recorded choices (the per-shape table's plain product)."""
    pytest.importorskip("triton")
    from examples.capstone import fused

    def kept(**flags):
        return {(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"])
                for c in fused._for_product(fused._MATVEC_CONFIGS, {}, PDL=False, **flags)}

    assert kept(HEADS=32, KV_HEADS=8, HALF=64, INT8=False) == {(8, 512)}
    assert kept(NORM=True, SWIGLU=True, RESIDUAL=False, INT8=False) == {(1, 1024)}
    assert kept(NORM=True, SWIGLU=False, RESIDUAL=False, INT8=True) == {(8, 1024)}
    assert kept(NORM=False, SWIGLU=False, RESIDUAL=True, INT8=True) == {(2, 512), (4, 1024), (8, 1024)}
    assert kept(NORM=False, SWIGLU=False, RESIDUAL=False, INT8=False) == set(fused._BF16_BLOCKS)
    assert kept(NORM=False, SWIGLU=False, RESIDUAL=False, INT8=True) == set(fused._INT8_BLOCKS)
    for (product, int8), blocks in fused._WON.items():  # a subset of what is compiled for them
        assert blocks and set(blocks) <= set(fused._INT8_BLOCKS if int8 else fused._BF16_BLOCKS)


def test_with_no_room_for_both_precisions_the_idle_one_waits_in_host_memory(monkeypatch):
    """A 24 GiB card cannot hold the 8B shape's bf16 and int8 weights together: each
    precision is still built once, the other one's matrices move out first, every rung
    built on them is let go, and the int8 comparison gives what it gives with room.
    (The CPU stands in for the GPU: "no room" is the answer substituted.)"""
    from examples.capstone import decode
    from examples.capstone.int8_linear import int8_linear
    from examples.lab.harness import Lab

    def int8_phase(room: float):
        monkeypatch.setattr(decode, "_room", lambda device: room)
        decode.release_setup()
        lab = Lab(torch.device("cpu"), quick=True)
        try:
            run = decode.start(lab)
            setup, forgotten = run.setup, []
            forget = run.forget
            run.forget = lambda precision: forgotten.append(precision) or forget(precision)
            run.graphed["static+graph"] = static = run.decoder(setup.resident("bf16", run.forget))
            trace = run.bf16_trace(static)
            built = []
            real = decode.quantized
            monkeypatch.setattr(decode, "quantized", lambda *a, **k: built.append(1) or real(*a, **k))
            wq = setup.resident("int8", run.forget)
            state = (list(forgotten), set(setup.parked), set(run.graphed))
            run.int8_quality("int8", trace, run.decoder(wq, linear=int8_linear))
            assert setup.resident("bf16", run.forget) is setup.w  # back; int8 waits now where crowded
            assert setup.parked == ({"int8"} if room == 0 else set())
            assert setup.resident("int8", run.forget) is wq and built == [1]  # each built once
            quality = {k: m.median for row in lab.rows() for k, m in row.metrics.items()
                       if k in ("logit_error", "top1_agreement")}
            return state, quality
        finally:
            lab.load.stop()
            decode.release_setup()

    (forgotten, parked, graphed), crowded = int8_phase(0.0)
    assert forgotten == ["bf16"] and parked == {"bf16"}
    assert "static+graph" not in graphed  # on a GPU its graph would read the weights' old addresses
    (forgotten, parked, graphed), roomy = int8_phase(float("inf"))
    assert forgotten == [] and parked == set() and "static+graph" in graphed
    assert len(crowded) == 2 and crowded == roomy


def test_the_roofs_buffers_send_the_weights_to_host_memory_only_where_there_is_no_room(monkeypatch):
    """capstone.fused_decode measures its roofs (4 GiB of buffers) after capstone.decode left
    the weights on the GPU: on a small card both precisions wait in host memory meanwhile,
    the graph kept for the next topic goes first (it reads their addresses), and the next
    rung brings back only the precision it uses. With room, nothing moves."""
    from examples.capstone import decode
    from examples.lab.harness import Lab

    for room, parked in ((0.0, {"bf16", "int8"}), (float("inf"), set())):
        monkeypatch.setattr(decode, "_room", lambda device, room=room: room)
        decode.release_setup()
        lab = Lab(torch.device("cpu"), quick=True)
        try:
            run = decode.start(lab)
            setup = run.setup
            setup.resident("int8", run.forget)
            setup.graphs["compile+graph"] = run.decoder(setup.w)
            setup.parked.clear()  # as on a GPU with room for both, until the roofs come
            setup.make_room(decode.ROOF_BYTES)
            assert setup.parked == parked
            assert ("compile+graph" in setup.graphs) == (not parked)
            assert setup.resident("bf16", run.forget) is setup.w
            assert setup.parked == parked - {"bf16"}
        finally:
            lab.load.stop()
            decode.release_setup()


def test_room_is_made_int8_first_and_int8_is_never_built_from_weights_in_host_memory(monkeypatch):
    """Where moving the int8 matrices out makes room enough, bf16's stay (with the graph kept
    for the next topic); and int8 asked for while bf16 waits in host memory is quantized from
    bf16 brought back to the GPU, not from host memory."""
    from examples.capstone import decode
    from examples.lab.harness import Lab

    decode.release_setup()
    lab = Lab(torch.device("cpu"), quick=True)
    try:
        run = decode.start(lab)
        setup = run.setup
        monkeypatch.setattr(decode, "_room", lambda device: 0.0)
        setup.make_room(decode.ROOF_BYTES)  # int8 not built yet: bf16 goes
        assert setup.parked == {"bf16"}
        monkeypatch.setattr(decode, "_room", lambda device: float("inf"))
        setup.resident("int8", run.forget)
        assert setup.parked == set() and setup.int8_weights is not None
        setup.graphs["compile+graph"] = run.decoder(setup.w)
        monkeypatch.setattr(decode, "_room", lambda device: float("inf") if "int8" in setup.parked else 0.0)
        setup.make_room(decode.ROOF_BYTES)
        assert setup.parked == {"int8"} and "compile+graph" in setup.graphs
    finally:
        lab.load.stop()
        decode.release_setup()


def test_the_smaller_llama_shapes_are_the_published_ones_and_the_lab_offers_each():
    from examples.capstone.model import MODELS
    from examples.capstone.speed_of_light import weight_count
    from examples.lab.__main__ import MODEL_CHOICES

    assert MODEL_CHOICES == tuple(MODELS)  # the lab's --model, written out for a torch-free --help
    # Meta's model cards: 8.03 B, 3.21 B and 1.24 B parameters (the 1B and 3B tie the head to the embedding)
    billions = {name: round(weight_count(c) / 1e9, 2) for name, c in MODELS.items()}
    assert billions["llama3.2-3b"] == 3.21 and billions["llama3.2-1b"] == 1.24


def test_the_model_flag_is_one_flag_and_a_bad_one_is_one_line(cli):
    out = cli.run("-m", "examples.capstone.decode", "--help")
    assert out.returncode == 0 and "--model" in out.stdout and "llama3.2-1b" in out.stdout, cli.explain(out)
    bad = cli.run("-m", "examples.capstone.fused_decode", "--model", "llama3-70b")
    assert "llama3-70b" in cli.one_line_error(bad)
    lab = cli.run("-m", "examples.lab", "run", "capstone.decode", "--out", "/tmp/x", "--model", "7b")
    assert "--model" in cli.one_line_error(lab)
