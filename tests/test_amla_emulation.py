"""The AMLA emulation (reference.amla.amla_blockwise): its measured error against an exact fp64 softmax, the
zero / denormal guard against CANN's, the −30 shift clamp, the integer rescale itself. Reference only: the
backends' results are tested in tests/test_amla.py, the Triton kernel's AMLA numerics in tests/test_amla_triton.py."""
from __future__ import annotations

import math

import pytest
import torch

from reference.amla import amla_blockwise, pow2_rescale
from tests.test_amla import DC, DR, SCALE, assert_matches_dense, dense_fp64, dense_rows, make, out_kind, paged, queries
from tests.tolerances import assert_close, cos_diff

DTYPES = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("rescale", ["amla", "multiply"])
def test_A5_blockwise_tiny_blocks_no_nan(rescale, gen):
    """The block emulation with blocks of 1 and 4 keys: blocks fully masked for a row (causal S_q = 2)
    and rows that see no key must give no NaN (no −inf − (−inf))."""
    inputs = make(gen, seq_lens=[1, 2, 5, 9, 20], S_q=2, N=2, block_size=16)
    for block_kv in (1, 4):
        out, lse = amla_blockwise(**inputs, block_kv=block_kv, rescale=rescale)
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        assert_matches_dense(out, lse, inputs, name=f"blockwise[{rescale}, block_kv={block_kv}]")



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
    """The clamp's effect made visible (removing the clamp passed the test above, whose spike key carries most of
    the output anyway). Block 0: logits 0 and c_kv rows of 1; block 1: logits ≈ 50 and
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
        got = pow2_rescale(vals, n_add, dn_t, torch.ones(1), "exponent")
        want = vals * 2.0**dn
        assert torch.equal(got.nan_to_num(nan=123.0), want.nan_to_num(nan=123.0)), (dn, got, want)
        assert torch.equal(torch.signbit(got[:, 3:5]), torch.signbit(vals[:, 3:5]))
    cann = pow2_rescale(vals, torch.tensor([-(2**23)]), torch.tensor([-1.0]), torch.ones(1), "cann")
    assert torch.isneginf(cann[0, 3]) and torch.equal(cann[0, :2], vals[0, :2] / 2)


def test_blockwise_rejects_bad_options(gen):
    inputs = make(gen, seq_lens=[3])
    with pytest.raises(ValueError, match="rescale"):
        amla_blockwise(**inputs, rescale="fma")
    with pytest.raises(ValueError, match="guard"):
        amla_blockwise(**inputs, guard="none")
    with pytest.raises(ValueError, match="block_kv"):
        amla_blockwise(**inputs, block_kv=0)
