"""ds::amla by behaviour, on every backend (tests/backends.py: the reference, Triton under the interpreter on CPU or
for real on CUDA, Ascend C when built): against an independent fp64 dense computation, the field cases A1–A7 of
cases.md, head counts, query tokens, block sizes, NaN in every unused slot and page, poisoned outputs, unchecked
caller errors; then the argument checks and the registration (opcheck, torch.compile, FLOPs, make_inputs).

Inputs come from ``ops.amla.make_inputs`` / ``ops.amla.paged_cache`` (the one builder); tolerances from the one table.
The kernel-specific knobs (rescale variants, forced splits, launch tables) are tests/test_amla_triton.py, the AMLA
emulation tests/test_amla_emulation.py, the batch-invariant mode tests/test_amla_batch_invariant.py.
"""
from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import example, given, strategies as st

import ops
from ops import amla as amla_mod
from ops.amla import make_inputs, paged_cache
from reference.amla import amla_blockwise
from reference.deepseek import deepseek_softmax_scale
from tests.backends import backends_for
from tests.tolerances import assert_close

DC, DR = 512, 64
SCALE = deepseek_softmax_scale()
BACKENDS = backends_for("amla")
DTYPES = [torch.bfloat16, torch.float16]


# ----------------------------------------------------------------------------------------------
# helpers (tests/test_amla_*.py reuse them)
# ----------------------------------------------------------------------------------------------
def make(gen, *, B=2, S_q=2, N=4, L=100, seq_lens=None, block_size=64, causal=True, dtype=torch.bfloat16, **kw):
    """``make_inputs`` on the CPU for a few keywords (seq_lens sets B)."""
    shape = dict(B=B, S_q=S_q, N=N, L=L, block_size=block_size, causal=causal, **kw)
    if seq_lens is not None:
        shape["seq_lens"] = list(seq_lens)
        shape["B"] = len(seq_lens)
    return make_inputs(shape, dtype=dtype, generator=gen)


def dense_rows(gen, lens, dtype, *, scale=1.0):
    """Per-request keys: c_kv [L_b, Dc] and k_rope [L_b, Dr], N(0, scale²)."""
    kvs = [(torch.randn(L, DC, generator=gen) * scale).to(dtype) for L in lens]
    krs = [(torch.randn(L, DR, generator=gen) * scale).to(dtype) for L in lens]
    return kvs, krs


def queries(gen, B, S_q, N, dtype):
    return (torch.randn(B, S_q, N, DC, generator=gen).to(dtype), torch.randn(B, S_q, N, DR, generator=gen).to(dtype))


def paged(q_nope, q_rope, kvs, krs, block_size, gen, *, causal=True, **kw) -> dict:
    """ds::amla inputs for these queries and per-request keys, paged by ``ops.amla.paged_cache`` (kw: its options:
    permute, unused, fill, extra_blocks, spare_pages)."""
    return dict(q_nope=q_nope, q_rope=q_rope, **paged_cache(kvs, krs, block_size, generator=gen, **kw),
                softmax_scale=SCALE, causal=causal)


def on(be, inputs: dict) -> dict:
    """``inputs`` on the backend's device, floats in the dtype it tests (fp16 for bf16 under the interpreter)."""
    def conv(v):
        if not isinstance(v, torch.Tensor):
            return v
        v = v.to(be.device)
        return v.to(be.dtype(v.dtype)) if v.is_floating_point() else v
    return {k: conv(v) for k, v in inputs.items()}


def poisoned(be) -> contextlib.AbstractContextManager:
    """Outputs (and split partials) the backend allocates start as NaN, so a value it forgets to write shows."""
    if be.name != "triton":
        return contextlib.nullcontext()
    from ops.triton import amla as tri
    return tri.output_allocator(lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype,
                                                                          device=device))


def run(be, inputs: dict, *, via: str = "call") -> tuple[torch.Tensor, torch.Tensor]:
    """ds::amla on ``inputs`` under backend ``be`` (a tests.backends.Backend or a backend name); via "call" (the
    eager fast path ops.amla.amla) or "op" (the registered torch.ops.ds.amla). Outputs poisoned; returned on the CPU."""
    fn = amla_mod.amla if via == "call" else torch.ops.ds.amla
    if isinstance(be, str):
        with ops.backend(be):
            return fn(**inputs)
    with be.active(), poisoned(be):
        out, lse = fn(**inputs)
    return out.cpu(), lse.cpu()


def dense_fp64(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent oracle: per request, gather every key by (page, slot) = (block_table[b, i // bs], i % bs)
    with advanced indexing, build dense K/V in fp64, mask explicitly, torch.softmax / logsumexp in fp64.
    Returns (out fp64 [B,S_q,N,Dc], lse fp64 [B,S_q,N]) on the CPU; rows without a key: 0 and −inf."""
    inputs = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    qn, qr, kv, kr = inputs["q_nope"], inputs["q_rope"], inputs["kv_cache"], inputs["kr_cache"]
    bt, lens, scale, causal = inputs["block_table"], inputs["seq_lens"], inputs["softmax_scale"], inputs.get("causal", True)
    B, S_q, N, Dc = qn.shape
    bs = kv.shape[1]
    out = torch.zeros(B, S_q, N, Dc, dtype=torch.float64)
    lse = torch.full((B, S_q, N), -math.inf, dtype=torch.float64)
    for b in range(B):
        L = int(lens[b])
        if L == 0:
            continue
        pos = torch.arange(L)
        page = bt[b].long()[pos // bs]
        slot = pos % bs
        k = torch.cat([kv[page, slot, 0], kr[page, slot, 0]], dim=-1).double()
        v = kv[page, slot, 0].double()
        q = torch.cat([qn[b], qr[b]], dim=-1).double()
        s = scale * torch.einsum("snd,ld->snl", q, k)
        mask = torch.tensor([[(not causal) or i <= L - S_q + j for i in range(L)] for j in range(S_q)])
        s = s.masked_fill(~mask[:, None, :], -math.inf)
        for j in range(S_q):
            if mask[j].any():
                out[b, j] = torch.softmax(s[j], dim=-1) @ v
                lse[b, j] = torch.logsumexp(s[j], dim=-1)
    return out, lse


def out_kind(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def assert_matches_dense(out, lse, inputs, *, name="out"):
    ref_out, ref_lse = dense_fp64(inputs)
    assert out.dtype == inputs["q_nope"].dtype and lse.dtype == torch.float32
    assert_close(out, ref_out, out_kind(out.dtype), name=name)
    assert_close(lse, ref_lse, "lse", name=name + ".lse")
    empty = torch.isneginf(ref_lse)
    assert torch.all(out.cpu()[empty] == 0), f"{name}: rows without a key must be exactly 0"


def _rows_of(inputs, b):
    """Request b alone (same cache)."""
    return dict(inputs, q_nope=inputs["q_nope"][b:b + 1], q_rope=inputs["q_rope"][b:b + 1],
                block_table=inputs["block_table"][b:b + 1], seq_lens=inputs["seq_lens"][b:b + 1])


# ----------------------------------------------------------------------------------------------
# against fp64 dense
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_matches_dense_fp64(be, dtype, causal, gen):
    if be.dtype(dtype) != dtype:
        pytest.skip(f"{be} tests {be.dtype(dtype)} in place of {dtype} (the fp16 case covers it)")
    inputs = on(be, make(gen, seq_lens=[300, 1, 129, 64], S_q=2, N=8, dtype=dtype, causal=causal))
    out, lse = run(be, inputs)
    assert_matches_dense(out, lse, inputs)
    out2, lse2 = run(be, inputs, via="op")
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


@pytest.mark.parametrize("be", BACKENDS)
def test_out_is_fresh_and_inputs_untouched(be, gen):
    inputs = on(be, make(gen, seq_lens=[70, 3]))
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    with be.active():
        out, lse = amla_mod.amla(**inputs)
    for k, v in before.items():
        assert torch.equal(inputs[k].nan_to_num(7.0), v.nan_to_num(7.0)), f"{k} was modified"
    assert out.data_ptr() not in {v.data_ptr() for v in inputs.values() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("be", BACKENDS)
def test_short_causal_rows_allowed(be, gen):
    """seq_len < S_q is valid: the first S_q − L query tokens see no key (out 0, lse −inf)."""
    inputs = on(be, make(gen, seq_lens=[2, 0], S_q=4))
    out, lse = run(be, inputs)
    assert torch.all(torch.isneginf(lse[0, :2])) and torch.all(out[0, :2] == 0)
    assert torch.isfinite(lse[0, 2:]).all()
    assert_matches_dense(out, lse, inputs)


@pytest.mark.parametrize("be", BACKENDS)
def test_noncontiguous_queries(be, gen):
    """q_nope / q_rope as column slices of one [.., Dc + Dr] tensor, and as a [B, N, S_q, D] tensor transposed to
    [B, S_q, N, D] (rows not evenly spaced): same result as contiguous copies."""
    inputs = on(be, make(gen, seq_lens=[40, 9], S_q=3, N=4, block_size=16))
    want = run(be, inputs)
    wide = torch.cat([inputs["q_nope"], inputs["q_rope"]], dim=-1)
    sliced = dict(inputs, q_nope=wide[..., :DC], q_rope=wide[..., DC:])
    assert not sliced["q_nope"].is_contiguous()
    got = run(be, sliced)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    tr = dict(inputs, q_nope=inputs["q_nope"].transpose(1, 2).contiguous().transpose(1, 2),
              q_rope=inputs["q_rope"].transpose(1, 2).contiguous().transpose(1, 2))
    assert tr["q_nope"].stride(1) != tr["q_nope"].shape[2] * tr["q_nope"].stride(2)
    got = run(be, tr)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ----------------------------------------------------------------------------------------------
# field cases (docs/field_cases.md)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", BACKENDS)
def test_A1_zero_length_rows(be, gen):
    inputs = on(be, make(gen, seq_lens=[0, 37, 0, 5, 1], S_q=2))
    out, lse = run(be, inputs)
    for b in (0, 2):
        assert torch.all(out[b] == 0) and torch.all(torch.isneginf(lse[b]))
    # S_q = 2, L = 1, causal: token 0 sees no key, token 1 sees key 0
    assert torch.all(out[4, 0] == 0) and torch.isneginf(lse[4, 0]).all() and torch.isfinite(lse[4, 1]).all()
    assert_matches_dense(out, lse, inputs)
    # the other rows are unaffected by the empty ones: the same bits as running them alone (the batch-invariant
    # mode makes that hold for the split kernels too; the reference is per request anyway)
    with ops.batch_invariant():
        o_all, l_all = run(be, inputs)
        for b in (1, 3, 4):
            o1, l1 = run(be, _rows_of(inputs, b))
            assert torch.equal(o1[0], o_all[b]) and torch.equal(l1[0], l_all[b]), b
    if be.name == "reference":
        assert torch.equal(o_all, out) and torch.equal(l_all, lse)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("num_blocks", [0, 3])
def test_A1_all_rows_empty(be, num_blocks, gen):
    """A padded CUDA-graph batch: every seq_len 0, also with an empty cache ([0, bs, 1, 576]) and an
    empty or all −1 block table. out = 0 and lse = −inf everywhere; nothing is read."""
    qn, qr = queries(gen, 3, 2, 4, torch.bfloat16)
    inputs = on(be, dict(q_nope=qn, q_rope=qr,
                         kv_cache=torch.full((num_blocks, 64, 1, DC), float("nan"), dtype=torch.bfloat16),
                         kr_cache=torch.full((num_blocks, 64, 1, DR), float("nan"), dtype=torch.bfloat16),
                         block_table=torch.full((3, 0 if num_blocks == 0 else 2), -1, dtype=torch.int32),
                         seq_lens=torch.zeros(3, dtype=torch.int32), softmax_scale=SCALE, causal=True))
    out, lse = run(be, inputs)
    assert out.shape == (3, 2, 4, DC) and torch.all(out == 0)
    assert lse.shape == (3, 2, 4) and torch.all(torch.isneginf(lse))


@pytest.mark.parametrize("be", BACKENDS)
def test_A2_nan_in_unused_slots(be, gen):
    """NaN in the unused tail slots, unused pages and other requests' pages: identical to a clean cache."""
    inputs = on(be, make(gen, seq_lens=[100, 37, 64, 1], block_size=64, spare_pages=3))
    assert torch.isnan(inputs["kv_cache"]).any() and torch.isnan(inputs["kr_cache"]).any()
    clean = dict(inputs)
    for name in ("kv_cache", "kr_cache"):
        c = inputs[name]
        clean[name] = torch.where(torch.isnan(c), torch.randn(c.shape, generator=gen).to(c), c)
    out, lse = run(be, inputs)
    out_c, lse_c = run(be, clean)
    assert torch.equal(out, out_c) and torch.equal(lse, lse_c)
    assert not torch.isnan(out).any()
    assert_matches_dense(out, lse, inputs)
    # each request alone in a cache where everything it does not own is NaN (also other requests' rows)
    bs = inputs["kv_cache"].shape[1]
    for b, L in enumerate(inputs["seq_lens"].tolist()):
        own = torch.zeros(inputs["kv_cache"].shape[:2], dtype=torch.bool, device=inputs["kv_cache"].device)
        for i in range(L):
            own[int(inputs["block_table"][b, i // bs]), i % bs] = True
        iso = dict(clean)
        for name in ("kv_cache", "kr_cache"):
            iso[name] = clean[name].masked_fill(~own[:, :, None, None], float("nan"))
        o_b, l_b = run(be, iso)
        assert torch.equal(o_b[b], out[b]) and torch.equal(l_b[b], lse[b])


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("unused", [-1, 2147480000, -2147483648, 2**31 - 1])
def test_A3_page_permutation_and_garbage_table_entries(be, unused, gen):
    lens = [200, 65, 7]
    qn, qr = queries(gen, 3, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, lens, torch.bfloat16)
    ordered = on(be, paged(qn, qr, kvs, krs, 64, gen, permute=False, unused=0, fill=0.0))
    shuffled = on(be, paged(qn, qr, kvs, krs, 64, gen, permute=True, unused=unused, extra_blocks=1))
    assert not torch.equal(ordered["block_table"], shuffled["block_table"])
    o1, l1 = run(be, ordered)
    o2, l2 = run(be, shuffled)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    assert_matches_dense(o2, l2, shuffled)


_HEADS = [(N, S_q) for N in (3, 8, 16, 32, 64, 128) for S_q in (1, 2)] + [(3, 4), (8, 4), (16, 4)]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("N,S_q", _HEADS)
def test_A4_tp_head_counts(be, N, S_q, gen):
    """Every tensor-parallel shard's head count (and an odd one, 3: row blocks straddle query tokens) with 1, 2
    (MTP) and 4 query tokens: correct, none routed to a kernel built for another head count."""
    inputs = on(be, make(gen, seq_lens=[33, 18, 0], S_q=S_q, N=N, block_size=16))
    out, lse = run(be, inputs)
    assert out.shape == (3, S_q, N, DC)
    assert_matches_dense(out, lse, inputs)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("S_q", [1, 2])
def test_A5_very_short_sequences(be, S_q, gen):
    inputs = on(be, make(gen, seq_lens=list(range(1, 21)), S_q=S_q, N=4, block_size=16))
    out, lse = run(be, inputs)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert_matches_dense(out, lse, inputs)


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("L", [1, 2, 3, 64, 65])
def test_A6_mtp_causal_visibility(be, L, gen):
    """S_q = 2 causal: query j sees exactly keys [0, L − 2 + j]."""
    qn, qr = queries(gen, 1, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, [L], torch.bfloat16)
    base = on(be, paged(qn, qr, kvs, krs, 16, torch.Generator().manual_seed(0)))
    out, lse = run(be, base)
    assert_matches_dense(out, lse, base)
    if L == 1:
        assert torch.all(out[0, 0] == 0) and torch.all(torch.isneginf(lse[0, 0]))
    for key in (L - 1, L - 2):
        if key < 0:
            continue
        kv2, kr2 = [kvs[0].clone()], [krs[0].clone()]
        kv2[0][key] = torch.randn(DC, generator=gen).to(torch.bfloat16) * 3
        kr2[0][key] = torch.randn(DR, generator=gen).to(torch.bfloat16) * 3
        o_b, _ = run(be, on(be, paged(qn, qr, kv2, kr2, 16, torch.Generator().manual_seed(0))))
        for j in range(2):
            sees = key <= L - 2 + j
            changed = not torch.equal(out[0, j], o_b[0, j])
            assert changed == sees, f"L={L}: query {j} {'should' if sees else 'must not'} see key {key}"


@pytest.mark.parametrize("be", BACKENDS)
def test_A7_block_sizes_agree(be, gen):
    """Block sizes 16, 64, 128, 256 with lengths that are no multiple of them: every one matches fp64 and the
    others. In the batch-invariant mode the chunks follow L alone, so a kernel whose key tile is the same for two
    block sizes gives the same bits (the reference always does)."""
    lens = [100, 257, 31, 128]
    qn, qr = queries(gen, 4, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, lens, torch.bfloat16)
    results, tiles = {}, {}
    for bs in (16, 64, 128, 256):
        inputs = on(be, paged(qn, qr, kvs, krs, bs, gen))
        results[bs] = run(be, inputs)
        assert_matches_dense(*results[bs], inputs, name=f"block_size {bs}")
        with ops.batch_invariant():
            results[bs, "inv"] = run(be, inputs)
        if be.name == "triton":
            from ops.triton import amla as tri
            tiles[bs] = tri.launch_plan_for(**{k: inputs[k] for k in ("q_nope", "q_rope", "kv_cache", "kr_cache",
                                                                          "block_table")})["BLOCK_N"]
    for bs in (64, 128, 256):
        if be.name == "reference":   # same rows, same math: bit-identical
            assert torch.equal(results[bs][0], results[16][0]) and torch.equal(results[bs][1], results[16][1])
        if be.name == "reference" or tiles[bs] == tiles[16]:
            o, l = results[bs, "inv"]
            assert torch.equal(o, results[16, "inv"][0]) and torch.equal(l, results[16, "inv"][1]), bs
        assert_close(results[bs][0], results[16][0].float(), out_kind(results[bs][0].dtype))
        assert_close(results[bs][1], results[16][1], "lse")


# ----------------------------------------------------------------------------------------------
# unchecked caller errors (docs/ops/amla.md): NaN rows, never an out-of-bounds access
# ----------------------------------------------------------------------------------------------
def _guarded(c: torch.Tensor, pad: int = 8) -> torch.Tensor:
    """``c`` as a view into a buffer whose pages before and after it hold NaN (a read outside shows as NaN)."""
    buf = torch.full((pad + c.shape[0] + pad,) + tuple(c.shape[1:]), float("nan"), dtype=c.dtype, device=c.device)
    buf[pad:pad + c.shape[0]] = c
    return buf[pad:pad + c.shape[0]]


@pytest.mark.parametrize("be", BACKENDS)
@pytest.mark.parametrize("error", ["page_id_past_the_cache", "negative_page_id", "seq_len_past_capacity",
                                   "negative_seq_len"])
def test_unchecked_caller_errors_give_nan_rows(be, error, gen, monkeypatch):
    """With DS_OPS_CHECKS=0 (as under compile / capture) a used page id outside [0, num_blocks) makes NaN exactly the
    (token, head) rows that see a key on it, and a seq_len outside [0, max_blocks·block_size] every row of its
    request; every other row keeps its bits; nothing outside the cache is read (its neighbours are NaN pages).
    Request 2 (L = 33, block size 16) has key 32 alone on its last page: causal token 0 does not see it."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    inputs = on(be, make(gen, seq_lens=[40, 20, 33], S_q=2, N=4, block_size=16, extra_blocks=1))
    inputs["kv_cache"], inputs["kr_cache"] = _guarded(inputs["kv_cache"]), _guarded(inputs["kr_cache"])
    good_out, good_lse = run(be, inputs)
    bad = dict(inputs, block_table=inputs["block_table"].clone(), seq_lens=inputs["seq_lens"].clone())
    nb, cap = inputs["kv_cache"].shape[0], inputs["block_table"].shape[1] * 16
    nan_rows = torch.zeros(good_lse.shape, dtype=torch.bool)
    if error in ("page_id_past_the_cache", "negative_page_id"):
        bad["block_table"][2, 2] = nb + 1 if error == "page_id_past_the_cache" else -7
        nan_rows[2, 1] = True                              # only token 1 sees key 32
    else:
        bad["seq_lens"][1] = cap + 1 if error == "seq_len_past_capacity" else -3
        nan_rows[1] = True
    out, lse = run(be, bad)
    assert torch.isnan(lse[nan_rows]).all() and torch.isnan(out[nan_rows]).all()
    assert torch.equal(lse[~nan_rows], good_lse[~nan_rows]) and torch.equal(out[~nan_rows], good_out[~nan_rows])
    # the reference says the same
    r_out, r_lse = run("reference", {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in bad.items()})
    assert torch.equal(torch.isnan(r_lse), nan_rows) and torch.equal(torch.isnan(r_out).all(-1), nan_rows)


# ----------------------------------------------------------------------------------------------
# Hypothesis over the supported domain
# ----------------------------------------------------------------------------------------------
@st.composite
def amla_cases(draw):
    B = draw(st.integers(1, 3))
    S_q = draw(st.integers(1, 4))
    N = draw(st.sampled_from([1, 3, 8, 16]))
    block_size = draw(st.sampled_from([16, 32, 64, 128]))
    L = st.one_of(st.just(0), st.integers(1, 4), st.sampled_from([block_size - 1, block_size, block_size + 1]),
                  st.integers(0, 300))
    lens = draw(st.lists(L, min_size=B, max_size=B))
    return dict(S_q=S_q, N=N, block_size=block_size, seq_lens=lens, causal=draw(st.booleans()),
                dtype=draw(st.sampled_from(DTYPES)), seed=draw(st.integers(0, 2**31 - 1)))


@pytest.mark.parametrize("be", BACKENDS)
@given(case=amla_cases())
@example(case=dict(S_q=4, N=3, block_size=16, seq_lens=[0, 2, 17], causal=True, dtype=torch.float16, seed=1))
@example(case=dict(S_q=1, N=1, block_size=128, seq_lens=[0], causal=False, dtype=torch.bfloat16, seed=2))
@example(case=dict(S_q=3, N=1, block_size=16, seq_lens=[2, 0, 0], causal=True, dtype=torch.float16, seed=0))
def test_hypothesis_matches_dense(be, case):
    case = dict(case)
    gen = torch.Generator().manual_seed(case.pop("seed"))
    inputs = on(be, make(gen, **case))
    out, lse = run(be, inputs)
    assert_matches_dense(out, lse, inputs)
    if be.name == "reference":
        o_b, l_b = amla_blockwise(**inputs, block_kv=64)
        assert_matches_dense(o_b, l_b, inputs, name="blockwise[amla]")


# ----------------------------------------------------------------------------------------------
# eager argument checks
# ----------------------------------------------------------------------------------------------
def _bad(inputs, **changes):
    return dict(inputs, **changes)


BAD_CASES = [
    ("q fp32", lambda i: _bad(i, q_nope=i["q_nope"].float()), TypeError, "q_nope"),
    ("q_rope dtype", lambda i: _bad(i, q_rope=i["q_rope"].half()), TypeError, "q_rope"),
    ("kv dtype", lambda i: _bad(i, kv_cache=i["kv_cache"].half()), TypeError, "kv_cache"),
    ("kr dtype", lambda i: _bad(i, kr_cache=i["kr_cache"].half()), TypeError, "kr_cache"),
    ("block_table int64", lambda i: _bad(i, block_table=i["block_table"].long()), TypeError, "block_table"),
    ("seq_lens int64", lambda i: _bad(i, seq_lens=i["seq_lens"].long()), TypeError, "seq_lens"),
    ("q 3-d", lambda i: _bad(i, q_nope=i["q_nope"][0]), ValueError, "q_nope"),
    ("q_rope heads", lambda i: _bad(i, q_rope=i["q_rope"][:, :, :1]), ValueError, "q_rope"),
    ("kv Dc", lambda i: _bad(i, kv_cache=i["kv_cache"][..., :256]), ValueError, "kv_cache"),
    ("kv 2 heads", lambda i: _bad(i, kv_cache=i["kv_cache"].expand(-1, -1, 2, -1)), ValueError, "kv_cache"),
    ("kr pages", lambda i: _bad(i, kr_cache=i["kr_cache"][:-1]), ValueError, "kr_cache"),
    ("block_table rows", lambda i: _bad(i, block_table=i["block_table"][:1]), ValueError, "block_table"),
    ("seq_lens size", lambda i: _bad(i, seq_lens=i["seq_lens"][:1]), ValueError, "seq_lens"),
    ("S_q 17", lambda i: _bad(i, q_nope=i["q_nope"][:, :1].expand(-1, 17, -1, -1),
                                q_rope=i["q_rope"][:, :1].expand(-1, 17, -1, -1)), ValueError, "S_q"),
    ("scale bool", lambda i: _bad(i, softmax_scale=True), TypeError, "softmax_scale"),
    ("scale nan", lambda i: _bad(i, softmax_scale=float("nan")), ValueError, "softmax_scale"),
    ("causal int 2", lambda i: _bad(i, causal=2), TypeError, "causal must be a bool, got int 2"),
    ("causal int 1", lambda i: _bad(i, causal=1), TypeError, "causal must be a bool, got int 1"),
    ("causal float", lambda i: _bad(i, causal=0.0), TypeError, "causal must be a bool, got float"),
    ("seq_len > capacity", lambda i: _bad(i, seq_lens=torch.tensor([3 * 16 + 1, 5], dtype=torch.int32)),
     ValueError, "seq_lens"),
    ("negative seq_len", lambda i: _bad(i, seq_lens=torch.tensor([-1, 5], dtype=torch.int32)), ValueError, "seq_lens"),
    ("used -1 page", lambda i: _bad(i, seq_lens=torch.tensor([3 * 16, 5], dtype=torch.int32)), ValueError, "block_table"),
    ("page id too large", lambda i: _bad(i, block_table=i["block_table"].masked_fill(i["block_table"] >= 0, 10**6)),
     ValueError, "block_table"),
]


@pytest.mark.parametrize("via", ["call", "op"])
@pytest.mark.parametrize("case", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_eager_checks(case, via, gen):
    """Every bad argument raises naming it, on the eager call and through torch.ops.ds.amla alike (causal=2 used to
    run there: the schema's bool took any number; causal is a Scalar now, so the check sees the caller's type)."""
    name, mutate, exc, match = case
    if via == "op" and name == "scale bool":
        pytest.skip("the dispatcher converts a bool to the schema's float before the check sees it")
    # two requests, block_size 16, 3 block_table columns; request 0 uses 2 pages, the third column is −1
    inputs = make(gen, seq_lens=[20, 5], block_size=16, extra_blocks=1)
    assert inputs["block_table"].shape == (2, 3)
    with pytest.raises(exc, match=match):
        run("reference", mutate(inputs), via=via)


# ----------------------------------------------------------------------------------------------
# registration: opcheck, torch.compile, FLOPs / bytes, make_inputs, the triton hook
# ----------------------------------------------------------------------------------------------
def _positional(inputs):
    return (inputs["q_nope"], inputs["q_rope"], inputs["kv_cache"], inputs["kr_cache"], inputs["block_table"],
            inputs["seq_lens"], inputs["softmax_scale"])


@pytest.mark.parametrize("causal", [None, False])
def test_R1_opcheck(causal, gen):
    inputs = make(gen, seq_lens=[40, 0, 17], S_q=2, N=2, block_size=16)
    kwargs = {} if causal is None else {"causal": causal}   # None: the schema default (True)
    torch.library.opcheck(torch.ops.ds.amla.default, _positional(inputs), kwargs)


def test_R2_torch_compile_fullgraph(gen):
    inputs = make(gen, seq_lens=[40, 3], S_q=2, N=2, block_size=16)

    def f(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens):
        out, lse = amla_mod.amla(q_nope, q_rope, kv_cache, kr_cache, block_table, seq_lens, SCALE, True)
        return out.float() * 2, lse

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    args = _positional(inputs)[:6]
    with ops.backend("reference"):
        got, want = compiled(*args), f(*args)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_flops_and_bytes(gen):
    from torch.utils.flop_counter import FlopCounterMode
    inputs = make(gen, seq_lens=[40, 0, 17], S_q=2, N=2, block_size=16)
    want = 2 * 2 * 2 * (40 + 17) * (DC + DR + DC)
    assert amla_mod.flops(**inputs) == want
    with FlopCounterMode(display=False) as counter:
        run("reference", inputs, via="op")
    assert counter.get_total_flops() == want
    isz = 2
    assert amla_mod.bytes_moved(**inputs) == (57 * (DC + DR) * isz + 3 * 2 * 2 * (DC + DR) * isz
                                              + 3 * 2 * 2 * DC * isz + 3 * 2 * 2 * 4)
    # DeepSeek decode FLOP count (2·B·S_q·N·L·1088)
    spec = ops.SPECS["amla"]
    shape = spec.shapes["b64_sq2_n128_l4096"]
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v)
            for k, v in amla_mod.make_inputs(dict(shape, L=1, B=1), generator=gen).items()}
    assert amla_mod.flops(**meta) == 2 * 1 * 2 * 128 * meta["block_table"].shape[1] * 128 * 1088   # upper bound


def test_flops_under_fake_tensors_is_an_upper_bound(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode
    inputs = make(gen, seq_lens=[40, 0, 17], S_q=2, N=2, block_size=16)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = {k: (mode.from_tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        with FlopCounterMode(display=False) as counter:
            torch.ops.ds.amla(**fake)
    cap = inputs["block_table"].shape[1] * 16
    assert counter.get_total_flops() == 2 * 2 * 2 * 3 * cap * (DC + DR + DC)
    assert counter.get_total_flops() >= amla_mod.flops(**inputs)


def test_make_inputs_layout(gen):
    spec = ops.SPECS["amla"]
    assert spec.make_inputs is amla_mod.make_inputs and spec.compute == "bf16"
    for name in ("b1_sq1_n16_l1024", "b64_sq2_n128_l4096", "b128_sq2_n128_l16384"):
        assert name in spec.shapes
    assert all("B" in s and "S_q" in s and "N" in s for s in spec.shapes.values())
    assert any(s.get("cpu") for s in spec.shapes.values())
    inputs = make(gen, seq_lens=[70, 0, 16], block_size=16, extra_blocks=2)
    bt, kv, lens = inputs["block_table"], inputs["kv_cache"], inputs["seq_lens"]
    assert bt.dtype == torch.int32 and lens.dtype == torch.int32
    used = [-(-int(L) // 16) for L in lens]
    for b, n in enumerate(used):
        assert torch.all(bt[b, n:] == -1) and torch.all(bt[b, :n] >= 0)
    ids = torch.cat([bt[b, :n] for b, n in enumerate(used)])
    assert ids.unique().numel() == ids.numel() and not torch.equal(ids, torch.arange(ids.numel(), dtype=torch.int32))
    # the tail of request 0's last page and the unowned pages are NaN; owned slots are finite, not zero
    last = int(bt[0, used[0] - 1])
    assert torch.isnan(kv[last, 70 % 16:]).all() and torch.isfinite(kv[last, :70 % 16]).all()
    unowned = sorted(set(range(kv.shape[0])) - set(ids.tolist()))
    assert unowned and torch.isnan(kv[unowned]).all()
    assert (inputs["q_nope"] != 0).float().mean() > 0.99
    # the paging options: in order, a chosen fill and unused entry
    flat = make(gen, seq_lens=[20, 5], block_size=16, permute=False, fill=0.0, unused=7)
    assert flat["block_table"].tolist() == [[0, 1, 7], [2, 7, 7]] and not torch.isnan(flat["kv_cache"]).any()
    # the CPU shapes run on the reference
    for name, shape in spec.shapes.items():
        if shape.get("cpu"):
            inp = spec.make_inputs(shape, dtype=torch.bfloat16, device="cpu", generator=gen)
            out, lse = run("reference", inp)
            assert_matches_dense(out, lse, inp, name=name)


def test_paged_cache_rejects_mismatched_requests(gen):
    kvs, krs = dense_rows(gen, [5, 3], torch.float16)
    with pytest.raises(ValueError, match="same requests"):
        paged_cache(kvs, krs[:1], 16)
    with pytest.raises(ValueError, match="same requests"):
        paged_cache(kvs, [krs[0], krs[0]], 16)
    with pytest.raises(ValueError, match="block_size"):
        paged_cache(kvs, krs, 0)


def test_triton_supports_hook_never_raises(gen):
    inputs = make(gen, seq_lens=[5])
    for k in ops._library.OPS["amla"].kernels:
        reason = k.supports(**inputs) if k.supports is not None else None
        assert reason is None or isinstance(reason, str)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reference_on_cuda_matches_cpu():
    """GPU smoke for the reference half: make_inputs on the device, the reference on CUDA tensors equals
    the CPU run, and a DeepSeek named shape builds with the documented FLOP count."""
    spec = ops.SPECS["amla"]
    g = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(spec.shapes["cpu_b4_sq1_n16_varlen"], dtype=torch.bfloat16, device="cuda", generator=g)
    out, lse = run("reference", inputs, via="op")
    assert out.is_cuda and lse.is_cuda
    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    out_c, lse_c = run("reference", cpu)
    assert_close(out.cpu(), out_c.float(), "bf16")
    assert_close(lse.cpu(), lse_c, "lse")
    assert_matches_dense(out.cpu(), lse.cpu(), cpu)
    big = spec.make_inputs(spec.shapes["b64_sq2_n128_l4096"], dtype=torch.bfloat16, device="cuda", generator=g)
    assert spec.flops(**big) == 2 * 64 * 2 * 128 * 4096 * 1088
    assert torch.isnan(big["kv_cache"]).any() and int((big["block_table"] == -1).sum()) == 64


@pytest.mark.parametrize("arg", ["block_table", "seq_lens", "kv_cache", "q_nope"])
def test_mixed_devices_through_the_dispatcher_raise(arg, gen):
    """One argument on the meta device sends ``torch.ops.ds.amla`` to the Meta (fake) kernel. The fake used to skip
    the checks and return empty tensors on q_nope's device: uninitialised memory as the result. It now runs the
    static checks and names the argument."""
    inp = make(gen, B=2, S_q=1, N=4, L=70)
    inp[arg] = inp[arg].to("meta")
    with pytest.raises(ValueError, match="must be on"):
        torch.ops.ds.amla(**inp)
