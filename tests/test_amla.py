"""ds::amla: the reference against an independent fp64 dense computation, the field cases A1–A7,
the AMLA emulation's measured error, registration (opcheck, torch.compile, FLOPs) and argument checks.

``run_amla(backend, inputs)`` and ``dense_fp64(inputs)`` are meant for reuse by other backends' tests
(tests/test_amla_triton.py). Everything runs on CPU in well under a minute: small N and L, real head
dims (Dc = 512, Dr = 64).
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, strategies as st

import ops
from ops import amla as amla_mod
from reference.amla import _pow2_rescale, amla as ref_amla, amla_blockwise
from tolerances import assert_close, cos_diff

DC, DR = 512, 64
SCALE = amla_mod.make_inputs({"B": 1, "S_q": 1, "N": 1, "L": 1})["softmax_scale"]   # DeepSeek-V3's scale
BACKENDS = ["reference"]
DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The reference and the block emulation issue many tiny matmuls; with 2 OpenMP threads on a busy
    2-core machine each one costs ~50 ms of spin-waiting (measured: 32 [16×576]·[576×64] products take
    1.8 s with 2 threads, 1 ms with 1). One thread for this module, restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------------------------------------
# helpers (reusable by other backends' tests)
# ----------------------------------------------------------------------------------------------
def run_amla(backend: str, inputs: dict, *, via: str = "call") -> tuple[torch.Tensor, torch.Tensor]:
    """Run ds::amla on ``inputs`` (make_inputs' keys) under ``backend``; via "call" (eager fast path,
    ops.amla.amla) or "op" (the registered torch.ops.ds.amla)."""
    fn = amla_mod.amla if via == "call" else torch.ops.ds.amla
    with ops.backend(backend):
        return fn(**inputs)


def dense_fp64(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Independent oracle: per request, gather every key by (page, slot) = (block_table[b, i // bs], i % bs)
    with advanced indexing, build dense K/V in fp64, mask explicitly, torch.softmax / logsumexp in fp64.
    Returns (out fp64 [B,S_q,N,Dc], lse fp64 [B,S_q,N]); rows without a key: 0 and −inf."""
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
    assert torch.all(out[empty] == 0), f"{name}: rows without a key must be exactly 0"


def make(gen, *, B=2, S_q=2, N=4, L=100, seq_lens=None, block_size=64, causal=True, dtype=torch.bfloat16, **kw):
    shape = dict(B=B, S_q=S_q, N=N, L=L, block_size=block_size, causal=causal, **kw)
    if seq_lens is not None:
        shape["seq_lens"] = list(seq_lens)
        shape["B"] = len(seq_lens)
    return amla_mod.make_inputs(shape, dtype=dtype, generator=gen)


def paged(q_nope, q_rope, kvs, krs, block_size, gen, *, permute=True, unused=-1, garbage=float("nan"),
          extra_blocks=2, spare_pages=2, causal=True) -> dict:
    """ds::amla inputs holding the given per-request dense rows kvs[b] [L_b, Dc], krs[b] [L_b, Dr] in a
    paged cache (random page order unless permute=False); unused slots/pages = ``garbage``, unused
    block_table entries = ``unused``."""
    dtype = q_nope.dtype
    pages_per = [-(-k.shape[0] // block_size) for k in kvs]
    nb = sum(pages_per) + spare_pages
    order = torch.randperm(nb, generator=gen) if permute else torch.arange(nb)
    kv = torch.full((nb, block_size, 1, kvs[0].shape[-1] if kvs else DC), garbage, dtype=dtype)
    kr = torch.full((nb, block_size, 1, krs[0].shape[-1] if krs else DR), garbage, dtype=dtype)
    bt = torch.full((len(kvs), max(pages_per, default=0) + extra_blocks), unused, dtype=torch.int32)
    start = 0
    for b, (k, r) in enumerate(zip(kvs, krs)):
        for i in range(pages_per[b]):
            p = int(order[start + i])
            bt[b, i] = p
            rows = slice(i * block_size, min((i + 1) * block_size, k.shape[0]))
            n = rows.stop - rows.start
            kv[p, :n, 0] = k[rows]
            kr[p, :n, 0] = r[rows]
        start += pages_per[b]
    return dict(q_nope=q_nope, q_rope=q_rope, kv_cache=kv, kr_cache=kr, block_table=bt,
                seq_lens=torch.tensor([k.shape[0] for k in kvs], dtype=torch.int32), softmax_scale=SCALE, causal=causal)


def dense_rows(gen, lens, dtype, *, scale=1.0):
    kvs = [(torch.randn(L, DC, generator=gen) * scale).to(dtype) for L in lens]
    krs = [(torch.randn(L, DR, generator=gen) * scale).to(dtype) for L in lens]
    return kvs, krs


def queries(gen, B, S_q, N, dtype):
    return (torch.randn(B, S_q, N, DC, generator=gen).to(dtype), torch.randn(B, S_q, N, DR, generator=gen).to(dtype))


# ----------------------------------------------------------------------------------------------
# reference vs fp64 dense
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_matches_dense_fp64(backend, dtype, causal, gen):
    inputs = make(gen, seq_lens=[300, 1, 129, 64], S_q=2, N=8, dtype=dtype, causal=causal)
    out, lse = run_amla(backend, inputs)
    assert_matches_dense(out, lse, inputs)
    out2, lse2 = run_amla(backend, inputs, via="op")
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


def test_out_is_fresh_and_inputs_untouched(gen):
    inputs = make(gen, seq_lens=[70, 3])
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    out, lse = run_amla("reference", inputs)
    for k, v in before.items():
        assert torch.equal(inputs[k].nan_to_num(7.0), v.nan_to_num(7.0)), f"{k} was modified"
    assert out.data_ptr() not in {v.data_ptr() for v in inputs.values() if isinstance(v, torch.Tensor)}


# ----------------------------------------------------------------------------------------------
# field cases (shared/cases.md)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_A1_zero_length_rows(backend, gen):
    inputs = make(gen, seq_lens=[0, 37, 0, 5], S_q=2)
    out, lse = run_amla(backend, inputs)
    for b in (0, 2):
        assert torch.all(out[b] == 0) and torch.all(torch.isneginf(lse[b]))
    assert_matches_dense(out, lse, inputs)
    # the other rows are unaffected by the empty ones: same as running them alone
    for b in (1, 3):
        alone = dict(inputs, q_nope=inputs["q_nope"][b:b + 1], q_rope=inputs["q_rope"][b:b + 1],
                     block_table=inputs["block_table"][b:b + 1], seq_lens=inputs["seq_lens"][b:b + 1])
        o1, l1 = run_amla(backend, alone)
        assert torch.equal(o1[0], out[b]) and torch.equal(l1[0], lse[b])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_blocks", [0, 3])
def test_A1_all_rows_empty(backend, num_blocks, gen):
    """A padded CUDA-graph batch: every seq_len 0, also with an empty cache ([0, bs, 1, 576]) and an
    empty or all −1 block table. out = 0 and lse = −inf everywhere; nothing is read."""
    qn, qr = queries(gen, 3, 2, 4, torch.bfloat16)
    inputs = dict(q_nope=qn, q_rope=qr,
                  kv_cache=torch.full((num_blocks, 64, 1, DC), float("nan"), dtype=torch.bfloat16),
                  kr_cache=torch.full((num_blocks, 64, 1, DR), float("nan"), dtype=torch.bfloat16),
                  block_table=torch.full((3, 0 if num_blocks == 0 else 2), -1, dtype=torch.int32),
                  seq_lens=torch.zeros(3, dtype=torch.int32), softmax_scale=SCALE, causal=True)
    out, lse = run_amla(backend, inputs)
    assert out.shape == (3, 2, 4, DC) and torch.all(out == 0)
    assert lse.shape == (3, 2, 4) and torch.all(torch.isneginf(lse))


@pytest.mark.parametrize("backend", BACKENDS)
def test_A2_nan_in_unused_slots(backend, gen):
    """NaN in the unused tail slots, unused pages and other requests' pages: identical to a clean cache."""
    inputs = make(gen, seq_lens=[100, 37, 64, 1], block_size=64, spare_pages=3)
    assert torch.isnan(inputs["kv_cache"]).any() and torch.isnan(inputs["kr_cache"]).any()
    clean = dict(inputs)
    for name in ("kv_cache", "kr_cache"):
        c = inputs[name]
        clean[name] = torch.where(torch.isnan(c), torch.randn(c.shape, generator=gen).to(c.dtype), c)
    out, lse = run_amla(backend, inputs)
    out_c, lse_c = run_amla(backend, clean)
    assert torch.equal(out, out_c) and torch.equal(lse, lse_c)
    assert not torch.isnan(out).any()
    # each request alone in a cache where everything it does not own is NaN (also other requests' rows)
    bs = inputs["kv_cache"].shape[1]
    for b, L in enumerate(inputs["seq_lens"].tolist()):
        own = torch.zeros(inputs["kv_cache"].shape[:2], dtype=torch.bool)
        for i in range(L):
            own[int(inputs["block_table"][b, i // bs]), i % bs] = True
        iso = dict(clean)
        for name in ("kv_cache", "kr_cache"):
            iso[name] = clean[name].masked_fill(~own[:, :, None, None], float("nan"))
        o_b, l_b = run_amla(backend, iso)
        assert torch.equal(o_b[b], out[b]) and torch.equal(l_b[b], lse[b])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unused", [-1, 2147480000, -2147483648])
def test_A3_page_permutation_and_garbage_table_entries(backend, unused, gen):
    lens = [200, 65, 7]
    qn, qr = queries(gen, 3, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, lens, torch.bfloat16)
    ordered = paged(qn, qr, kvs, krs, 64, gen, permute=False, unused=-1)
    shuffled = paged(qn, qr, kvs, krs, 64, gen, permute=True, unused=unused)
    assert not torch.equal(ordered["block_table"], shuffled["block_table"])
    o1, l1 = run_amla(backend, ordered)
    o2, l2 = run_amla(backend, shuffled)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    assert_matches_dense(o2, l2, shuffled)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("S_q", [1, 2])
@pytest.mark.parametrize("N", [8, 16, 32, 64, 128])
def test_A4_tp_head_counts(backend, N, S_q, gen):
    inputs = make(gen, seq_lens=[70, 33], S_q=S_q, N=N, block_size=16)
    out, lse = run_amla(backend, inputs)
    assert out.shape == (2, S_q, N, DC)
    assert_matches_dense(out, lse, inputs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("S_q", [1, 2])
def test_A5_very_short_sequences(backend, S_q, gen):
    inputs = make(gen, seq_lens=list(range(1, 21)), S_q=S_q, N=4, block_size=16)
    out, lse = run_amla(backend, inputs)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert_matches_dense(out, lse, inputs)


@pytest.mark.parametrize("rescale", ["amla", "multiply"])
def test_A5_blockwise_tiny_blocks_no_nan(rescale, gen):
    """The block emulation with blocks of 1 and 4 keys: blocks fully masked for a row (causal S_q = 2)
    and rows that see no key must give no NaN (no −inf − (−inf))."""
    inputs = make(gen, seq_lens=[1, 2, 5, 9, 20], S_q=2, N=2, block_size=16)
    for block_kv in (1, 4):
        out, lse = amla_blockwise(**inputs, block_kv=block_kv, rescale=rescale)
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        assert_matches_dense(out, lse, inputs, name=f"blockwise[{rescale}, block_kv={block_kv}]")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("L", [1, 2, 3, 64, 65])
def test_A6_mtp_causal_visibility(backend, L, gen):
    """S_q = 2 causal: query j sees exactly keys [0, L − 2 + j]."""
    qn, qr = queries(gen, 1, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, [L], torch.bfloat16)
    base = paged(qn, qr, kvs, krs, 16, gen)
    out, lse = run_amla(backend, base)
    assert_matches_dense(out, lse, base)
    if L == 1:
        assert torch.all(out[0, 0] == 0) and torch.all(torch.isneginf(lse[0, 0]))
    for key in (L - 1, L - 2):
        if key < 0:
            continue
        kv2, kr2 = [kvs[0].clone()], [krs[0].clone()]
        kv2[0][key] = torch.randn(DC, generator=gen).to(torch.bfloat16) * 3
        kr2[0][key] = torch.randn(DR, generator=gen).to(torch.bfloat16) * 3
        gen_same = torch.Generator().manual_seed(0)
        o_a, _ = run_amla(backend, paged(qn, qr, kvs, krs, 16, gen_same))
        gen_same = torch.Generator().manual_seed(0)
        o_b, _ = run_amla(backend, paged(qn, qr, kv2, kr2, 16, gen_same))
        for j in range(2):
            sees = key <= L - 2 + j
            changed = not torch.equal(o_a[0, j], o_b[0, j])
            assert changed == sees, f"L={L}: query {j} {'should' if sees else 'must not'} see key {key}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_A7_block_sizes_agree(backend, gen):
    lens = [100, 257, 31, 128]
    qn, qr = queries(gen, 4, 2, 4, torch.bfloat16)
    kvs, krs = dense_rows(gen, lens, torch.bfloat16)
    results = {}
    for bs in (16, 64, 128):
        inputs = paged(qn, qr, kvs, krs, bs, gen)
        results[bs] = run_amla(backend, inputs)
        assert_matches_dense(*results[bs], inputs, name=f"block_size {bs}")
    for bs in (64, 128):
        if backend == "reference":   # same rows, same math: bit-identical
            assert torch.equal(results[bs][0], results[16][0]) and torch.equal(results[bs][1], results[16][1])
        assert_close(results[bs][0], results[16][0].float(), "bf16")
        assert_close(results[bs][1], results[16][1], "lse")


# ----------------------------------------------------------------------------------------------
# Hypothesis over the supported domain
# ----------------------------------------------------------------------------------------------
@st.composite
def amla_cases(draw):
    B = draw(st.integers(1, 3))
    S_q = draw(st.integers(1, 4))
    N = draw(st.sampled_from([1, 3, 8, 16]))
    block_size = draw(st.sampled_from([16, 64, 128]))
    L = st.one_of(st.just(0), st.integers(1, 4), st.sampled_from([block_size - 1, block_size, block_size + 1]),
                  st.integers(0, 300))
    lens = draw(st.lists(L, min_size=B, max_size=B))
    return dict(S_q=S_q, N=N, block_size=block_size, seq_lens=lens, causal=draw(st.booleans()),
                dtype=draw(st.sampled_from(DTYPES)), seed=draw(st.integers(0, 2**31 - 1)))


@given(amla_cases())
@example(dict(S_q=4, N=3, block_size=16, seq_lens=[0, 2, 17], causal=True, dtype=torch.float16, seed=1))
@example(dict(S_q=1, N=1, block_size=128, seq_lens=[0], causal=False, dtype=torch.bfloat16, seed=2))
def test_hypothesis_reference_and_blockwise(case):
    gen = torch.Generator().manual_seed(case.pop("seed"))
    inputs = make(gen, **case)
    out, lse = run_amla("reference", inputs)
    assert_matches_dense(out, lse, inputs)
    o_b, l_b = amla_blockwise(**inputs, block_kv=64)
    assert_matches_dense(o_b, l_b, inputs, name="blockwise[amla]")


# ----------------------------------------------------------------------------------------------
# the AMLA emulation: measured error vs exact softmax
# ----------------------------------------------------------------------------------------------
def _trend_inputs(gen, dtype, L, trend, q_scale=1.0):
    """Scores that rise along the sequence (trend > 0), so the running max and n change in most blocks
    and every rescale carries a Δn and a cof compensation; q_scale < 1 flattens the attention."""
    qn, qr = queries(gen, 2, 2, 8, dtype)
    qn, qr = (qn.float() * q_scale).to(dtype), (qr.float() * q_scale).to(dtype)
    kvs, krs = dense_rows(gen, [L, L - 37], dtype)
    if trend:
        qr[..., 0] = 4.0
        for k in krs:
            k[:, 0] = (trend * 10.0 * torch.arange(k.shape[0]) / L).to(dtype)
    return paged(qn, qr, kvs, krs, 64, gen)


def _err(out, ref):
    return cos_diff(out, ref), ((out.double() - ref).abs().max() / ref.abs().max()).item()


# Measured (fp32 output of the emulation vs the fp64 dense softmax; 2 requests of L = 2048 / 2011 keys,
# N = 8, S_q = 2, causal; block_kv 64 and 512; flat, rising (trend 3) and flattened (q·0.3) logits):
#   bf16: cos diff 1.6e-7 … 8.4e-7, max|err| 4.1e-4 … 1.5e-3 of max|ref|  (multiply variant: same range)
#   fp16: cos diff 2.4e-9 … 1.3e-8, max|err| 5.1e-5 … 1.8e-4 of max|ref|  (multiply variant: same range)
#   lse:  ≤ 4.1e-6 abs (the same fp32 statistics in both variants)
# AMLA's integer rescale + cof compensation costs no more than the P → bf16/fp16 rounding both variants
# share (AMLA/multiply cos-diff ratio ≤ 1.5 measured). Bounds below: about 2× the worst measurement.
EMULATION_BOUND = {torch.bfloat16: (2e-6, 3e-3), torch.float16: (3e-8, 4e-4)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_kv,trend,q_scale", [(512, 0.0, 1.0), (64, 0.0, 1.0), (64, 3.0, 1.0), (64, 0.0, 0.3)])
def test_amla_emulation_error_bounded(dtype, block_kv, trend, q_scale, gen):
    inputs = _trend_inputs(gen, dtype, 2048, trend, q_scale)
    ref_out, ref_lse = dense_fp64(inputs)
    cos_bound, rel_bound = EMULATION_BOUND[dtype]
    errs = {}
    for rescale in ("amla", "multiply"):
        out, lse = amla_blockwise(**inputs, block_kv=block_kv, rescale=rescale, out_dtype=torch.float32)
        errs[rescale] = _err(out, ref_out)
        assert errs[rescale][0] <= cos_bound and errs[rescale][1] <= rel_bound, (rescale, errs[rescale])
        assert_close(lse, ref_lse, "lse", name=f"{rescale}.lse")
        rounded, _ = amla_blockwise(**inputs, block_kv=block_kv, rescale=rescale)
        assert_close(rounded, ref_out, out_kind(dtype), name=rescale)
    # AMLA is within a small factor of the plain FlashAttention rescale
    assert errs["amla"][0] <= 3 * errs["multiply"][0] + 1e-9, errs


def _jump_inputs(gen, *, block0_scale, zero_col=None, denormal_col=None, spike=None):
    """One request, 3 blocks of 64 keys: block 0's keys scaled by block0_scale (small logits), then
    normal keys, so the running max jumps at block 1 (Δn < 0). Optional: a c_kv column that is exactly
    0 / denormal (1e-39, a bf16 subnormal) in block 0 only; a key in block 1 whose logit is ``spike``
    above the others."""
    L = 192
    qn, qr = queries(gen, 1, 2, 4, torch.bfloat16)
    kv = torch.randn(L, DC, generator=gen)
    kr = torch.randn(L, DR, generator=gen)
    kv[:64] *= block0_scale
    kr[:64] *= block0_scale
    if zero_col is not None:
        kv[:64, zero_col] = 0.0
    if denormal_col is not None:
        kv[:64, denormal_col] = 1e-39
    if spike is not None:
        # every head's q_rope = e₀ and key 100's k_rope = (spike/scale)·e₀: its logit is spike + q_nope·c_kv
        qr.zero_()
        qr[..., 0] = 1.0
        kr[100] = 0.0
        kr[100, 0] = spike / SCALE
    return paged(qn, qr, [kv.to(torch.bfloat16)], [kr.to(torch.bfloat16)], 64, gen)


def test_amla_zero_and_denormal_columns_survive(gen):
    """A c_kv column that is exactly 0 (and one that is denormal) in the first block and non-zero later.
    Our guarded integer add keeps it; the shipped CANN guard (|O| > 1e10 → 0) drops the column —
    asserted too, so this test would fail without the guard."""
    inputs = _jump_inputs(gen, block0_scale=0.05, zero_col=7, denormal_col=9)
    ref_out, _ = dense_fp64(inputs)
    assert ref_out[..., 7].abs().min() > 1e-3 and ref_out[..., 9].abs().min() > 1e-3
    ours, lse = amla_blockwise(**inputs, block_kv=64, out_dtype=torch.float32)
    assert_close(ours.to(torch.bfloat16), ref_out, "bf16")
    for col in (7, 9):
        err = (ours[..., col].double() - ref_out[..., col]).abs().max().item()
        assert err <= 3e-3 * ref_out.abs().max().item(), (col, err)
    cann, _ = amla_blockwise(**inputs, block_kv=64, guard="cann", out_dtype=torch.float32)
    assert torch.all(cann[..., 7] == 0) and torch.all(cann[..., 9] == 0), "expected CANN's guard to drop the columns"
    other = [c for c in range(DC) if c not in (7, 9)]
    assert torch.allclose(cann[..., other], ours[..., other], rtol=0, atol=1e-6)


def test_amla_shift_clamped_at_minus_30(gen):
    """A logit spike of +50 in block 1 after near-zero logits: the true Δn ≈ −72 is clamped to −30, so
    block 0's output is over-weighted by 2^42 relative to exact, yet only ≈ 2^−30·l₀ ≈ 6e−8 of the spike's
    weight — no NaN/inf, and inside the emulation bound."""
    inputs = _jump_inputs(gen, block0_scale=1e-3, spike=50.0)
    ref_out, ref_lse = dense_fp64(inputs)
    assert ref_lse.min() > 35.0                       # the spike dominates every row
    for guard in ("exponent", "cann"):
        out, lse = amla_blockwise(**inputs, block_kv=64, guard=guard, out_dtype=torch.float32)
        assert torch.isfinite(out).all()
        cd, rel = _err(out, ref_out)
        assert cd <= EMULATION_BOUND[torch.bfloat16][0] and rel <= EMULATION_BOUND[torch.bfloat16][1], (guard, cd, rel)
        assert_close(lse, ref_lse, "lse")


def test_amla_shift_clamp_overweights_the_old_block_as_cann_does(gen):
    """The clamp's effect made visible (mutation audit, session 9: removing the clamp passed the test above, whose
    spike key carries most of the output anyway). Block 0: logits 0 and c_kv rows of 1; block 1: logits ≈ 50 and
    c_kv rows of 0. The exact output is e^-50 ≈ 2e-22 (block 0's weight); with Δn ≈ −72 clamped to −30, block 0 is
    over-weighted by 2^42, as in CANN's kernel, so the emulation gives ≈ 2^42 times the exact output."""
    qn = torch.zeros(1, 1, 2, DC, dtype=torch.bfloat16)
    qr = torch.zeros(1, 1, 2, DR, dtype=torch.bfloat16)
    qr[..., 0] = 1.0
    kv = torch.zeros(128, DC)
    kv[:64] = 1.0
    kr = torch.zeros(128, DR)
    kr[64:, 0] = 50.0 / SCALE
    inputs = paged(qn, qr, [kv.to(torch.bfloat16)], [kr.to(torch.bfloat16)], 64, gen)
    ref_out, _ = dense_fp64(inputs)
    s1 = SCALE * float(kr.to(torch.bfloat16)[64, 0].double())          # block 1's logit after bf16 rounding
    dn_true = -round(s1 / math.log(2))                                   # n = rint(−m/ln2): 0 for block 0
    assert dn_true < -60
    for guard in ("exponent", "cann"):
        out, _ = amla_blockwise(**inputs, block_kv=64, guard=guard, out_dtype=torch.float32)
        ratio = out.double() / ref_out
        assert torch.allclose(torch.log2(ratio), torch.full_like(ratio, -30.0 - dn_true), atol=1e-3), (guard, ratio)


def test_pow2_rescale_is_exact_exponent_arithmetic():
    """The integer add is exact multiplication by 2^Δn for normal values; the guard keeps zeros, −0,
    denormals, inf and NaN right; the unguarded (CANN) add turns 0 into −inf for Δn = −1."""
    special = torch.tensor([1.0, -3.5, 1e-30, 0.0, -0.0, 1e-40, -2e-39, float("inf"), float("nan"), 3e38])
    # every binade near the bottom of the normal range (exponent field 1..40), random significands, ± signs:
    # the ones whose exponent field is ≤ |Δn| would wrap into denormals/zero under a bare integer add
    expo = torch.arange(1, 41, dtype=torch.float32)
    sig = 1.0 + torch.rand(40, generator=torch.Generator().manual_seed(5))
    low = torch.ldexp(sig, (expo - 127).to(torch.int32))
    vals = torch.cat([special, low, -low])[None, :]
    for dn in (0.0, -1.0, -7.0, -30.0):
        dn_t = torch.tensor([dn])
        n_add = torch.tensor([int(dn) * 2**23])
        got = _pow2_rescale(vals, n_add, dn_t, torch.ones(1), "exponent")
        want = vals * 2.0**dn
        assert torch.equal(got.nan_to_num(nan=123.0), want.nan_to_num(nan=123.0)), (dn, got, want)
        assert torch.equal(torch.signbit(got[:, 3:5]), torch.signbit(vals[:, 3:5]))
    cann = _pow2_rescale(vals, torch.tensor([-(2**23)]), torch.tensor([-1.0]), torch.ones(1), "cann")
    assert torch.isneginf(cann[0, 3]) and torch.equal(cann[0, :2], vals[0, :2] / 2)


def test_blockwise_rejects_bad_options(gen):
    inputs = make(gen, seq_lens=[3])
    with pytest.raises(ValueError, match="rescale"):
        amla_blockwise(**inputs, rescale="fma")
    with pytest.raises(ValueError, match="guard"):
        amla_blockwise(**inputs, guard="none")
    with pytest.raises(ValueError, match="block_kv"):
        amla_blockwise(**inputs, block_kv=0)


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
    name, mutate, exc, match = case
    if via == "op" and name == "scale bool":
        pytest.skip("the dispatcher converts a bool to the schema's float before the check sees it")
    # two requests, block_size 16, 3 block_table columns; request 0 uses 2 pages, the third column is −1
    inputs = make(gen, seq_lens=[20, 5], block_size=16, extra_blocks=1)
    assert inputs["block_table"].shape == (2, 3)
    with pytest.raises(exc, match=match):
        run_amla("reference", mutate(inputs), via=via)


def test_short_causal_rows_allowed(gen):
    """seq_len < S_q is valid: the first S_q − L query tokens see no key (out 0, lse −inf)."""
    inputs = make(gen, seq_lens=[2, 0], S_q=4)
    out, lse = run_amla("reference", inputs)
    assert torch.all(torch.isneginf(lse[0, :2])) and torch.all(out[0, :2] == 0)
    assert torch.isfinite(lse[0, 2:]).all()
    assert_matches_dense(out, lse, inputs)


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
        run_amla("reference", inputs, via="op")
    assert counter.get_total_flops() == want
    isz = 2
    assert amla_mod.bytes_moved(**inputs) == (57 * (DC + DR) * isz + 3 * 2 * 2 * (DC + DR) * isz
                                              + 3 * 2 * 2 * DC * isz + 3 * 2 * 2 * 4)
    # DeepSeek decode shape of DESIGN (2·B·S_q·N·L·1088)
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
    # the CPU shapes run on the reference
    for name, shape in spec.shapes.items():
        if shape.get("cpu"):
            inp = spec.make_inputs(shape, dtype=torch.bfloat16, device="cpu", generator=gen)
            out, lse = run_amla("reference", inp)
            assert_matches_dense(out, lse, inp, name=name)


def test_triton_supports_hook_never_raises(gen):
    inputs = make(gen, seq_lens=[5])
    reason = amla_mod._triton_supports(**inputs)
    assert reason is None or isinstance(reason, str)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reference_on_cuda_matches_cpu():
    """GPU smoke for the reference half: make_inputs on the device, the reference on CUDA tensors equals
    the CPU run, and a DeepSeek named shape builds with the DESIGN FLOP count."""
    spec = ops.SPECS["amla"]
    g = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(spec.shapes["cpu_b4_sq1_n16_varlen"], dtype=torch.bfloat16, device="cuda", generator=g)
    out, lse = run_amla("reference", inputs, via="op")
    assert out.is_cuda and lse.is_cuda
    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    out_c, lse_c = run_amla("reference", cpu)
    assert_close(out.cpu(), out_c.float(), "bf16")
    assert_close(lse.cpu(), lse_c, "lse")
    assert_matches_dense(out.cpu(), lse.cpu(), cpu)
    big = spec.make_inputs(spec.shapes["b64_sq2_n128_l4096"], dtype=torch.bfloat16, device="cuda", generator=g)
    assert spec.flops(**big) == 2 * 64 * 2 * 128 * 4096 * 1088
    assert torch.isnan(big["kv_cache"]).any() and int((big["block_table"] == -1).sum()) == 64


@pytest.mark.parametrize("arg", ["block_table", "seq_lens", "kv_cache", "q_nope"])
def test_mixed_devices_through_the_dispatcher_raise(arg, gen):
    """One argument on the meta device sends ``torch.ops.ds.amla`` to the Meta (fake) kernel. The fake used to skip
    the checks and return empty tensors on q_nope's device: uninitialised memory as the result (new-user finding,
    session 8). It now runs the static checks and names the argument."""
    inp = make(gen, B=2, S_q=1, N=4, L=70)
    inp[arg] = inp[arg].to("meta")
    with pytest.raises(ValueError, match="must be on"):
        torch.ops.ds.amla(**inp)
