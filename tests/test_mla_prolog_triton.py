"""Triton kernels of ds::mla_prolog (ops/triton/mla_prolog.py) vs the reference, every quant mode.

On a CPU-only machine this runs under TRITON_INTERPRET=1 (conftest) with fp16 / fp32 activations (the
interpreter computes bf16 tl.dot wrongly) and tiny dims (He 64, Hcq 96, N 2; DeepSeek's Hckv 512, D 128,
Dr 64 kept, plus odd dims that exercise every mask). With CUDA it runs the same tests on the GPU in bf16
(tests/gpu/check_mla_prolog.py runs it on the H200). Both config tables are exercised on the CPU: "ascend"
(what the interpreter picks: persistent loops, grid caps, split-K) and "cuda" (forced).

Every buffer the launcher allocates is poisoned (NaN / INT_MIN) so an unwritten element fails; caches
start as NaN (float) or random (int8), and rows that must not be written are compared bit for bit.
Field cases P1–P5 (docs/field_cases.md) are named in the test names.
"""
from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import ops
from ops import mla_prolog as M
from reference.deepseek import rope_sin_cos
from tests.tolerances import _EMPTY, assert_close, poisoned_empty

from ops.triton._common import forced_table, replaced_configs, resolve
from tests.conftest import requires_triton
from tests.mla_inputs import bits, clone_inputs as clone, mla_small

pytestmark = [requires_triton, pytest.mark.interpreter]
K = pytest.importorskip("ops.triton.mla_prolog")

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
DT = torch.bfloat16 if CUDA else torch.float16       # the interpreter's bf16 tl.dot is wrong
KIND = "bf16" if CUDA else "fp16"

@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    """Kernel outputs and workspaces start as NaN / INT_MIN."""
    monkeypatch.setattr(torch, "empty", poisoned_empty)


@pytest.fixture(params=["ascend", "cuda"] if not CUDA else ["cuda"])
def table(request):
    """Which config table the launcher uses (the CPU normally picks "ascend")."""
    with forced_table(request.param):
        yield request.param


@pytest.fixture
def stack():
    """An ExitStack closed after the test (forced tables, replaced configs)."""
    with contextlib.ExitStack() as s:
        yield s


def _kname(case: dict) -> str:
    """The name of a compile case's kernel (JITFunction / InterpretedFunction keep the Python function in .fn)."""
    return getattr(case["fn"], "fn", case["fn"]).__name__


def M_CONFIGS() -> dict:
    """A copy of the shipped mla_prolog tables ({backend: table})."""
    from ops.triton._common import load_configs
    return copy.deepcopy(load_configs("mla_prolog"))


def small(mode="bf16", T=6, N=2, *, dtype=DT, seed=0, **kw):
    return mla_small(mode, T, N, dtype=dtype, device=DEV, seed=seed, **kw)


def _guard_caches(inp, fill):
    """Move kv_cache / kr_cache into buffers one block larger on each side (the guard blocks: float ``fill``, random
    if None; random int8 for C8 caches); ``inp`` then holds the inner views. Returns {name: whole buffer}."""
    guards = {}
    for name in ("kv_cache", "kr_cache"):
        c = inp[name]
        shape = (c.shape[0] + 2,) + tuple(c.shape[1:])
        if not c.is_floating_point():
            buf = torch.randint(-127, 128, shape, dtype=c.dtype)
        else:
            buf = (torch.randn(shape) if fill is None else torch.full(shape, fill)).to(c.dtype)
        buf = buf.to(c.device)
        buf[1:-1] = c
        inp[name] = buf[1:-1]
        guards[name] = buf
    return guards


def _run_with_out_of_range_ids(inp, guards, slots):
    """(guards before, expected inputs, reference outputs, Triton outputs) of a call whose cache_index holds ids
    ≥ ``slots``: the reference runs with those ids as −1 (not written), the Triton kernel with them as they are."""
    before = {k: v.clone() for k, v in guards.items()}
    expect = clone(inp)
    expect["cache_index"] = torch.where(inp["cache_index"] >= slots, -1, inp["cache_index"])
    with ops.backend("reference"):
        want = M.mla_prolog(**expect)
    return before, expect, want, run(inp)


def run(inp, backend="triton"):
    with ops.backend(backend):
        return M.mla_prolog(**inp)


def _int8_close(out, ref, name, min_exact=0.99):
    """int8 outputs: at most 1 LSB off (fp32 sums in another order can cross a rounding tie), nearly all exact."""
    assert out.dtype == torch.int8 and out.shape == ref.shape, name
    if out.numel() == 0:
        return
    d = (out.long() - ref.long()).abs()
    assert int(d.max()) <= 1, f"{name}: int8 differs by {int(d.max())} LSB"
    # the off-by-one budget rounds up: a 64-element row (kr_cache at T = 1) may hold one value off by 1 LSB
    # (CI, seed 81, partial_c8: kr_cache 63 of 64 exact; the same code had passed the CI before)
    off, budget = int((d != 0).sum()), math.ceil(round((1 - min_exact) * d.numel(), 6))
    assert off <= budget, f"{name}: {off} of {d.numel()} int8 values off by 1 LSB (allowed {budget})"


def compare(inp, *, backend_ref="reference", views=None):
    """Run reference and Triton on copies of ``inp``; compare outputs and the whole caches. ``views``: inputs
    passed as they are, after the copy (``clone`` would make a strided view contiguous)."""
    a, b = clone(inp), clone(inp)
    a.update(views or {})
    b.update(views or {})
    ra = run(a, backend_ref)
    rb = run(b, "triton")
    q, qr, s = rb
    assert q.shape == ra[0].shape and qr.shape == ra[1].shape and s.shape == ra[2].shape
    assert q.dtype == ra[0].dtype and qr.dtype == ra[1].dtype and s.dtype == torch.float32
    kind = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "bf16"}[qr.dtype]
    if q.dtype == torch.int8:
        _int8_close(q, ra[0], "query")
        assert_close(s, ra[2], kind, name="dequant_scale_q_nope")
    else:
        assert_close(q, ra[0], kind, name="query")
    assert_close(qr, ra[1], kind, name="query_rope")
    idx = inp["cache_index"].reshape(-1).cpu()
    nslots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    w = idx[(idx >= 0) & (idx < nslots)]
    for name in ("kv_cache", "kr_cache"):
        ca, cb = a[name], b[name]
        fa, fb = ca.reshape(-1, ca.shape[-1]), cb.reshape(-1, cb.shape[-1])
        keep = torch.ones(fa.shape[0], dtype=torch.bool)
        keep[w] = False
        keep = keep.to(fa.device)
        src = inp[name].reshape(-1, ca.shape[-1])[keep]
        assert torch.equal(bits(fb[keep]), bits(src)), f"{name}: a row that must not be written changed"
        if len(w):
            if ca.dtype == torch.int8:
                _int8_close(fb[w.to(fb.device)], fa[w.to(fa.device)], name)
            else:
                assert_close(fb[w.to(fb.device)], fa[w.to(fa.device)], kind, name=name)
    return a, b, ra, rb


# ----------------------------------------------------------------------------------------------
# every mode, both config tables, token tiles and split-K
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("T", [1, 19])
def test_modes_match_reference(mode, T, table):
    compare(small(mode, T=T, seed=T))


@pytest.mark.parametrize("mode", ["bf16", "a8w8"])
def test_split_k_and_k_tail(mode, table):
    """He = 1000: several K splits (cuda table) and a K tail that is not a multiple of BLOCK_K."""
    compare(small(mode, T=3, He=1000, seed=4))


def test_fp32_activations():
    compare(small("bf16", T=5, dtype=torch.float32, seed=5))


def test_odd_dims_exercise_masks(table):
    """D, Dr/2, Hckv, Hcq not powers of two and not multiples of the tiles (BLOCK_D/R/C/K masks)."""
    compare(small("bf16", T=4, N=3, He=40, Hcq=72, Hckv=80, D=48, Dr=24, block_size=4, seed=6))
    compare(small("a8w8_c8", T=4, N=3, He=40, Hcq=72, Hckv=80, D=48, Dr=24, block_size=4, seed=7))


@given(T=st.integers(1, 20), N=st.integers(1, 3), bs=st.sampled_from([1, 16]), He=st.sampled_from([32, 64, 80]),
       mode=st.sampled_from(M.MODES), seed=st.integers(0, 2**16))
@example(T=17, N=1, bs=1, He=80, mode="a8w8_c8", seed=0)
@settings(max_examples=8)
def test_hypothesis_matches_reference(T, N, bs, He, mode, seed):
    compare(small(mode, T=T, N=N, He=He, Hcq=48, block_size=bs, seed=seed))


def test_3d_token_x():
    compare(small("a8w8_c8", B=3, S=2, seed=8))


def test_all_outputs_written_no_nan():
    inp = small("bf16", T=9, seed=9)
    q, qr, _ = run(inp)
    assert not torch.isnan(q).any() and not torch.isnan(qr).any()


def test_full_c8_zero_query_row_is_finite():
    """A head whose q_N row is all zero: dequant_scale_q_nope 0, query 0, query_rope finite (÷1)."""
    inp = small("a8w8_c8", T=3)
    inp["weight_uk"] = inp["weight_uk"].clone()
    inp["weight_uk"][1] = 0
    q, qr, s = run(inp)
    assert (q[:, 1] == 0).all() and (s[:, 1] == 0).all() and torch.isfinite(qr.float()).all()
    assert (s[:, 0] > 0).all()


@pytest.mark.parametrize("pre,block_c,mode,dims", [
    (1, 128, "bf16", {}), (3, 64, "bf16", {}), (4, 128, "partial", {}), (2, 128, "a8w8_c8", {}),
    (3, 32, "bf16", dict(He=40, Hcq=72, Hckv=80, D=48, Dr=24, block_size=4)),
])
def test_pre_uk_chunks_loaded_before_the_k_loop(pre, block_c, mode, dims):
    """The "cuda" table's PRE_UK (W_UK chunks loaded before the K loop): 1–4 preloaded chunks, with and without
    chunks left for the loop after them, chunks past Hckv (masked), and the full + C8 mode (two passes over
    W_UK, where the launcher turns PRE_UK off)."""
    cfg = M_CONFIGS()
    for b in cfg["cuda"]["query"]["buckets"]:
        b["config"].update(PRE_UK=pre, BLOCK_C=block_c)
    with replaced_configs("mla_prolog", cfg), forced_table("cuda"):
        p = K.plan(5, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda", int8_query=mode != "bf16")
        assert p["query"]["PRE_UK"] == pre and p["query"]["BLOCK_C"] == block_c
        lp = K.make_launch(p, mode.startswith("a8w8"), mode != "bf16", mode.endswith("c8"), False, False, False, CUDA)
        assert lp.query_kw["PRE_UK"] == (0 if mode == "a8w8_c8" else pre)
        compare(small(mode, T=5, seed=20 + pre, **dims))


# ----------------------------------------------------------------------------------------------
# field cases
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bf16", "a8w8", "partial_c8"])
def test_P1_noncontiguous_inputs_and_packed_weights(mode):
    """token_x as a column slice of a wider tensor, transposed-storage rope tables, K-major (packed)
    int8 weights and a transposed-storage W_UK: results bit-identical to the contiguous call."""
    inp = small(mode, T=7, seed=11)
    b = clone(inp)
    x = b["token_x"]
    wide = torch.zeros(x.shape[0], x.shape[1] + 40, dtype=x.dtype, device=x.device)
    wide[:, 24:24 + x.shape[1]] = x
    b["token_x"] = wide[:, 24:24 + x.shape[1]]
    assert not b["token_x"].is_contiguous()
    b["rope_sin"] = b["rope_sin"].T.contiguous().T
    b["weight_uk"] = b["weight_uk"].transpose(1, 2).contiguous().transpose(1, 2)
    b = K.pack_weights(b, "cuda")
    if mode != "bf16":
        assert b["weight_uq_qr"].stride() == (1, b["weight_uq_qr"].shape[0])
    a = clone(inp)
    out_a, out_b = run(a), run(b)
    for u, v in zip(out_a, out_b):
        assert torch.equal(bits(u), bits(v))
    assert torch.equal(bits(a["kv_cache"]), bits(b["kv_cache"])) and torch.equal(bits(a["kr_cache"]), bits(b["kr_cache"]))


def test_pack_weights_layouts_and_unknown_backend():
    inp = small("a8w8", T=2, seed=3)
    cuda, asc = K.pack_weights(inp, "cuda"), K.pack_weights(inp, "ascend")
    for k in ("weight_dq", "weight_uq_qr", "weight_dkv_kr"):
        w = inp[k]
        assert torch.equal(cuda[k], w) and torch.equal(asc[k], w)          # logically the same weights
        assert cuda[k].stride() == (1, w.shape[0]) and asc[k].is_contiguous()
    with pytest.raises(ValueError, match=r"backend must be 'cuda' or 'ascend' \(the Ascend NPU's layout\), got 'CUDA'"):
        K.pack_weights(inp, "CUDA")                                          # was: silently row-major


@pytest.mark.parametrize("T", [1, 3])
def test_nan_token_gives_nan_query_scale(T, table):
    """Full A8W8 + C8 (the query quantised per (token, head)): a token whose activations are NaN (here its per-token
    scale) gets dequant_scale_q_nope NaN and query 0, as reference.quant's rule for a NaN row; the absmax's max
    dropped NaN and reported 0, the value of an all-zero row (a fresh-user audit)."""
    inp = small("a8w8_c8", T=T, seed=95 + T)
    t = T - 1
    inp["dequant_scale_x"][t] = float("nan")
    a, b = clone(inp), clone(inp)
    rq, rqr, rs = run(a, "reference")
    q, qr, sc = run(b, "triton")
    assert torch.isnan(rs[t]).all() and torch.isnan(sc[t]).all()
    assert torch.equal(q[t], rq[t]) and not q[t].any()
    assert torch.equal(torch.isnan(qr), torch.isnan(rqr))
    if t:
        _int8_close(q[:t], rq[:t], "query")
        assert_close(sc[:t], rs[:t], "fp32", name="dequant_scale_q_nope")


@pytest.mark.parametrize("T", [1, 6])
@pytest.mark.parametrize("mode", ["a8w8", "a8w8_c8"])
def test_P1_strided_per_token_scale(mode, T, table):
    """dequant_scale_x [T, 1] as a column of a wider tensor (stride 2) and as one scale expanded to every token
    (stride 0): the kernels read the scale at unit stride, so the launcher must not pass them the strided view
    (the expanded scale read past its one-element storage and wrote garbage into kr_cache; an audit finding)."""
    inp = small(mode, T=T, seed=90 + T)
    sx = inp["dequant_scale_x"].reshape(T)
    wide = torch.full((T, 2), 1e30, dtype=torch.float32, device=sx.device)   # column 1 must never be read
    wide[:, 0] = sx
    col = wide[:, :1]
    assert col.stride() == (2, 1)
    compare(inp, views={"dequant_scale_x": col})
    one = sx[:1].reshape(1, 1).expand(T, 1)
    assert T == 1 or one.stride() == (0, 1)
    compare(inp, views={"dequant_scale_x": one})


@pytest.mark.parametrize("mode", ["bf16", "partial_c8", "a8w8_c8"])
def test_P1_strided_caches_are_written_in_place(mode, table):
    """kv_cache / kr_cache whose last dim is not unit-stride: written in place (the "ascend" launcher
    writes a unit-stride copy and copies it back, "cuda" scatters through the stride), bit-identical to
    the contiguous call; the per-tensor C8 scale (a8w8_c8) is expanded on the "ascend" path."""
    inp = small(mode, T=7, seed=21)
    a, b = clone(inp), clone(inp)
    for name in ("kv_cache", "kr_cache"):
        b[name] = b[name].transpose(1, 3).contiguous().transpose(1, 3)
        assert b[name].stride(3) != 1 and torch.equal(bits(b[name]), bits(a[name]))
    kv_b, kr_b = b["kv_cache"], b["kr_cache"]
    out_a, out_b = run(a), run(b)
    for u, v in zip(out_a, out_b):
        assert torch.equal(bits(u), bits(v))
    assert b["kv_cache"] is kv_b and b["kr_cache"] is kr_b
    assert torch.equal(bits(a["kv_cache"]), bits(kv_b)) and torch.equal(bits(a["kr_cache"]), bits(kr_b))
    assert not torch.equal(bits(a["kv_cache"]), bits(inp["kv_cache"]))   # something was written


@pytest.mark.parametrize("mode", ["bf16", "partial_c8", "a8w8_c8"])
def test_P2_negative_cache_index_not_written(mode):
    inp = small(mode, T=9, cache_fill="random", seed=12)
    idx = inp["cache_index"].clone()
    idx[0], idx[4], idx[8] = -1, -1, -7
    idx[1] = 5
    inp["cache_index"] = idx
    a, b, _, _ = compare(inp)       # compares every cache row: written ones to the reference, others bit-identical
    assert not torch.equal(bits(b["kv_cache"]), bits(inp["kv_cache"]))


def test_P2_all_negative_writes_nothing():
    inp = small("bf16", T=5)
    inp["cache_index"] = torch.full_like(inp["cache_index"], -1)
    before = clone(inp)
    q, qr, _ = run(inp)
    assert q.shape == (5, 2, 512) and not torch.isnan(q).any()
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))
    assert torch.equal(bits(inp["kr_cache"]), bits(before["kr_cache"]))


def test_P3_bad_cache_index_raises_before_writing():
    inp = small("bf16", T=6)
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    inp["cache_index"] = torch.arange(6, device=DEV) * 3
    inp["cache_index"][3] = slots
    before = clone(inp)
    with pytest.raises(ValueError, match=rf"cache_index\[3\] = {slots} is out of range"):
        run(inp)
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))


@pytest.mark.parametrize("mode", ["bf16", "partial_c8"])
def test_P3_out_of_range_with_checks_off_never_writes_outside(mode, monkeypatch):
    """DS_OPS_CHECKS=0: ids ≥ num_blocks·block_size (and 2^40) are skipped by the kernel's masked stores.
    The caches are views into larger buffers with guard blocks on both sides that must stay untouched."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    inp = small(mode, T=6, seed=13)
    guards = {}
    for name in ("kv_cache", "kr_cache"):
        c = inp[name]
        buf = torch.empty((c.shape[0] + 2,) + tuple(c.shape[1:]), dtype=c.dtype, device=c.device)
        buf.copy_(torch.cat([c[:1], c, c[:1]]))
        inp[name] = buf[1:-1]
        guards[name] = buf
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    idx = inp["cache_index"].clone()
    idx[2], idx[4] = slots, 2**40
    idx[5] = slots + inp["kv_cache"].shape[1]      # would land in the upper guard block
    inp["cache_index"] = idx
    before, expect, want, got = _run_with_out_of_range_ids(inp, guards, slots)
    for u, v in zip(got, want):
        assert torch.equal(bits(u), bits(v)) or u.dtype != torch.int8 and torch.allclose(u.float(), v.float(), rtol=2e-2,
                                                                                         atol=2e-2)
    for name, buf in guards.items():
        assert torch.equal(bits(buf[0]), bits(before[name][0])) and torch.equal(bits(buf[-1]), bits(before[name][-1])), \
            f"{name}: a guard block outside the cache was written"


@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8"])
@pytest.mark.parametrize("lead", [dict(T=0), dict(B=2, S=0)])
def test_P4_zero_tokens(mode, lead):
    inp = small(mode, **lead)
    before = clone(inp)
    q, qr, s = run(inp)
    shp = tuple(inp["token_x"].shape[:-1])
    assert q.shape == shp + (2, 512) and qr.shape == shp + (2, 64)
    assert s.shape == ((0, 2, 1) if mode == "a8w8_c8" else (0,))
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))
    assert torch.equal(bits(inp["kr_cache"]), bits(before["kr_cache"]))


def _hf_rope():
    """(sin/cos [T, 64] for positions, apply_rotary_pos_emb_interleave) from HF transformers; where transformers
    is not installed (the GPU box), the same two functions transcribed from HF's modeling_deepseek_v3.py."""
    try:
        from transformers import DeepseekV3Config
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3RotaryEmbedding,
                                                                          apply_rotary_pos_emb_interleave)
        cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=2, qk_rope_head_dim=64, rope_interleave=True,
                               max_position_embeddings=8192)
        rot = DeepseekV3RotaryEmbedding(cfg)

        def sincos(pos):
            cos, sin = rot(torch.zeros(1), pos[None])
            return sin[0], cos[0]
        return sincos, apply_rotary_pos_emb_interleave
    except ImportError:
        def rotate_half(x):
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
            return torch.cat((-x2, x1), dim=-1)

        def apply_rotary_pos_emb_interleave(q, k, cos, sin, unsqueeze_dim=1):
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            b, h, s, d = q.shape
            q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
            b, h, s, d = k.shape
            k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

        def sincos(pos):
            return rope_sin_cos(pos, 64)
        return sincos, apply_rotary_pos_emb_interleave


def test_P5_rope_interleaved_in_rotate_half_out_matches_hf():
    """query_rope, the k_rope cache rows and q_rope·k_rope equal HF DeepSeek-V3's apply_rotary_pos_emb_interleave
    on the same (rounded) q_rot / k_rot, with HF's own sin/cos."""
    sincos, apply_rotary_pos_emb_interleave = _hf_rope()
    inp = small("bf16", T=8, seed=3)
    inp["cache_index"] = torch.arange(8, device=DEV) * 2 + 1
    sin, cos = sincos(torch.tensor([0, 1, 2, 17, 100, 1000, 4095, 8000]))
    inp["rope_cos"], inp["rope_sin"] = cos.to(DT).to(DEV), sin.to(DT).to(DEV)
    before = clone(inp)
    q, qr, _ = run(inp)
    b = {k: (v.double().cpu() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in before.items()}
    r = lambda t: t.to(DT).double()  # noqa: E731
    cq = r(b["token_x"] @ b["weight_dq"])
    cqn = r(cq / torch.sqrt(cq.pow(2).mean(-1, keepdim=True) + b["rmsnorm_epsilon_cq"]) * b["rmsnorm_gamma_cq"])
    q_rot = r(cqn @ b["weight_uq_qr"]).view(8, 2, 192)[..., 128:]
    k_rot = r(b["token_x"] @ b["weight_dkv_kr"])[:, 512:]
    # HF's layout is [batch, heads, seq, dim]: tokens as the batch axis, seq = 1
    q_hf, k_hf = apply_rotary_pos_emb_interleave(q_rot[:, :, None], k_rot[:, None, None], b["rope_cos"][:, None],
                                                 b["rope_sin"][:, None], unsqueeze_dim=1)
    q_hf, k_hf = q_hf[:, :, 0], k_hf[:, 0, 0]
    kr = inp["kr_cache"].reshape(-1, 64)[inp["cache_index"]].double().cpu()
    assert_close(kr, k_hf, KIND, name="k_rope cache rows (de-interleaved order)")
    assert_close(qr.double().cpu(), q_hf, KIND, name="query_rope")
    assert_close(torch.einsum("tnr,sr->tns", qr.double().cpu(), kr), torch.einsum("tnr,sr->tns", q_hf, k_hf),
                 KIND, name="q_rope·k_ropeᵀ")


# ----------------------------------------------------------------------------------------------
# dispatch, supports_reason, compile cases, plan
# ----------------------------------------------------------------------------------------------
def test_registered_op_and_eager_agree():
    inp = small("bf16", T=4, seed=14)
    a, b = clone(inp), clone(inp)
    with ops.backend("triton"):
        assert M.mla_prolog.select((), a)[0] == "triton"
        u = M.mla_prolog(**a)
        v = torch.ops.ds.mla_prolog(**b)
    for x, y in zip(u, v):
        assert torch.equal(bits(x), bits(y))


def test_supports_reason():
    inp = small("bf16", T=2)
    assert K.supports_reason(**inp) is None
    assert "PA_BSND" in K.supports_reason(**dict(inp, cache_mode="PA_NZ"))
    if not CUDA:
        bf = small("bf16", T=2, dtype=torch.bfloat16)
        assert "TRITON_INTERPRET" in K.supports_reason(**bf)
        with ops.backend("triton"), pytest.raises(ops.BackendUnavailable, match="bf16 tl.dot"):
            M.mla_prolog(**bf)


def test_empty_hidden_size_falls_back_to_the_reference():
    """He = 0 (token_x [T, 0]): the Triton plan split K by He and died in ZeroDivisionError (a review finding).
    supports_reason now names it, so "auto" runs the reference and an explicit "triton" raises
    BackendUnavailable before anything is written."""
    inp = small("bf16", T=3)
    for k in ("token_x", "weight_dq", "weight_dkv_kr"):          # He = 0: token_x [T, 0], the down weights [0, ·]
        inp[k] = inp[k][:, :0].contiguous() if k == "token_x" else inp[k][:0].contiguous()
    assert "He = 0" in K.supports_reason(**inp)
    ref = run(clone(inp), "reference")
    a = clone(inp)
    out = run(a, "auto")
    for x, y in zip(out, ref):
        assert torch.equal(bits(x), bits(y))
    b = clone(inp)
    with ops.backend("triton"), pytest.raises(ops.BackendUnavailable, match="He = 0"):
        M.mla_prolog(**b)
    assert torch.equal(bits(b["kv_cache"]), bits(inp["kv_cache"]))


def test_ascend_compile_cases_are_well_formed():
    import inspect
    cases = K.ascend_compile_cases()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)) and len(cases) >= 10
    assert {_kname(c) for c in cases} == {"_down_kernel", "_row_kernel", "_query_kernel"}
    for c in cases:
        params = list(inspect.signature(c["fn"].fn).parameters)
        assert list(c["signature"]) == params, c["name"]
        assert {k for k, v in c["signature"].items() if v == "constexpr"} == set(c["constexprs"]), c["name"]
    # Ascend tiles fit: the query kernel's largest fp32 accumulator ≤ 64 KiB (L0C is 128 KiB)
    for c in cases:
        ce = c["constexprs"]
        if _kname(c) == "_query_kernel":
            assert ce["BLOCK_M"] * max(ce["BLOCK_D"], ce["BLOCK_C"]) * 4 <= 64 * 1024


def test_plan_reads_shapes_only_and_fills_the_device():
    p = K.plan(1, 7168, 1536, 128, 128, 64, 512, torch.device("cpu"), backend_key="cuda", cores=132)
    d = p["down"]
    assert d["SPLIT_K"] > 1 and d["grid"] >= 132
    assert d["SPLIT_K"] * d["K_PER_SPLIT"] >= 7168 > (d["SPLIT_K"] - 1) * d["K_PER_SPLIT"]
    assert p["query"]["grid"] == 128
    # the row kernel: PARTS work items per token, one program each (the "cuda" table caps no grid)
    r = p["row"]
    assert r["n_row"] == r["PARTS"] and r["grid"] == r["n_row"]
    assert p["query"]["EV_W"] in ("evict_first", "")
    pa = K.plan(1, 7168, 1536, 128, 128, 64, 512, torch.device("cpu"), backend_key="ascend")
    assert pa["row"]["grid"] == pa["row"]["n_row"]
    assert pa["query"]["EV_W"] == ""
    # fp32 operands: fewer pipeline stages so shared memory fits (the H200 run 1 overflowed with 4 stages: 250 KB)
    p32 = K.plan(1, 7168, 1536, 128, 128, 64, 512, torch.device("cpu"), backend_key="cuda", cores=132, act_bytes=4)
    q, q32 = p["query"], p32["query"]
    assert q32["num_stages"] <= q["num_stages"]
    per_stage = (q32["BLOCK_M"] * q32["BLOCK_K"] + q32["BLOCK_K"] * (q32["BLOCK_D"] + q32["BLOCK_R"])) * 4
    assert (q32["num_stages"] - 1) * per_stage <= 200 * 1024
    p = K.plan(128, 7168, 1536, 128, 128, 64, 512, torch.device("cpu"), backend_key="ascend")
    assert p["down"]["grid"] <= 20 and p["query"]["grid"] <= 20 and p["row"]["grid"] <= 40


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="CUDA-graph capture needs a GPU")
def test_cuda_graph_capture(monkeypatch):
    monkeypatch.setattr(torch, "empty", _EMPTY)
    inp = small("a8w8", T=4, seed=15)
    ref = run(clone(inp))
    g_in = clone(inp)
    run(clone(inp))                                  # warm-up compiles
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run(clone(inp))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run(g_in)
    g.replay()
    torch.cuda.synchronize()
    for u, v in zip(out, ref):
        assert torch.equal(bits(u), bits(v))


@pytest.mark.parametrize("mode", ["bf16", "partial_c8"])
@pytest.mark.parametrize("row", [{"parts": 1}, {"parts": 2}, {"parts": 2, "num_warps": 8}])
def test_P2_P3_cuda_table_row_kernel_writes_nothing_else_with_checks_off(mode, row, monkeypatch, row_cfg, stack):
    """The "cuda" table's row kernel (one program per work item; PRE_UK chunks in the query kernel) with
    DS_OPS_CHECKS=0, −1 and out-of-range cache ids: the caches, held inside larger buffers with guard blocks,
    change only in the valid rows; every input stays bit-identical; the outputs match the reference."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    stack.enter_context(forced_table("cuda"))
    row_cfg("cuda", **row)
    inp = small(mode, T=7, seed=21)
    p = K.plan(7, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda")
    assert not p["query"]["FUSE_ROW"], "the row kernel must run as its own launch here"
    parts = row["parts"]
    assert p["row"]["n_row"] == 7 * parts == p["row"]["grid"] and p["row"]["PARTS"] == parts
    guards = _guard_caches(inp, None)
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    idx = inp["cache_index"].clone()
    idx[0], idx[3], idx[6] = -1, slots, slots + inp["kv_cache"].shape[1]
    inp["cache_index"] = idx
    before = {k: v.clone() for k, v in guards.items()}
    inputs_before = clone(inp)
    expect = clone(inp)
    expect["cache_index"] = torch.where(idx >= slots, -1, idx)
    with ops.backend("reference"):
        want = M.mla_prolog(**expect)
    got = run(inp)
    q, qr = got[0], got[1]
    if q.dtype == torch.int8:
        _int8_close(q, want[0], "query")
    else:
        assert_close(q, want[0], KIND, name="query")
    assert_close(qr, want[1], KIND, name="query_rope")
    for name, buf in guards.items():
        assert torch.equal(bits(buf[0]), bits(before[name][0])) and torch.equal(bits(buf[-1]), bits(before[name][-1])), \
            f"{name}: a guard block outside the cache was written"
    for k, v in inputs_before.items():
        if isinstance(v, torch.Tensor) and k not in ("kv_cache", "kr_cache"):
            same = torch.equal(inp[k], v) if v.element_size() == 8 else torch.equal(bits(inp[k]), bits(v))
            assert same, f"input {k} was modified"
    w = idx[(idx >= 0) & (idx < slots)].cpu()
    for name in ("kv_cache", "kr_cache"):
        f = inp[name].reshape(-1, inp[name].shape[-1])
        fb = inputs_before[name].reshape(-1, f.shape[-1])
        keep = torch.ones(f.shape[0], dtype=torch.bool)
        keep[w] = False
        keep = keep.to(f.device)
        assert torch.equal(bits(f[keep]), bits(fb[keep])), f"{name}: a row that must not be written changed"


# ----------------------------------------------------------------------------------------------
# row kernel with two work items per token (config "row": {"parts": 2}): (t, 0) = cq → cqn,
# (t, 1) = ckv / kr → caches, on separate programs
# ----------------------------------------------------------------------------------------------
def _section_override(stack, section, on_section):
    """``use(table, **entries)``: the launchers see config table ``table`` with ``entries`` set on every bucket of
    its ``section``, and on the section itself when ``on_section`` (plans forgotten on entry and exit)."""
    def use(table, **entries):
        cfg = M_CONFIGS()
        if on_section:
            cfg[table][section].update(entries)
        for b in cfg[table][section].get("buckets", []):          # per-T buckets override the section's keys
            b["config"].update(entries)
        stack.enter_context(replaced_configs("mla_prolog", cfg))
        return cfg
    return use


@pytest.fixture
def row_cfg(stack):
    """``row_cfg(table, **row)``: the row section and each of its buckets get ``row``."""
    return _section_override(stack, "row", on_section=True)


@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("T", [1, 19])
def test_row_parts2_modes_match_reference(mode, T, table, row_cfg):
    """Every mode with the row work split over two programs per token (outputs poisoned, unused cache slots
    NaN / random int8 and compared bit for bit: see compare)."""
    row_cfg(table, parts=2)
    p = K.plan(T, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key=table)
    assert p["row"]["PARTS"] == 2
    compare(small(mode, T=T, seed=40 + T))


@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8", "partial_c8"])
def test_row_parts2_persistent_loop_and_odd_dims(mode, table, row_cfg):
    """parts 2 with fewer row programs than work items (grid_cap 3: each program loops over (token, part)
    items of both kinds) and dims that are not powers of two (masks); split-K over He = 1000."""
    row_cfg(table, parts=2, grid_cap=3)
    p = K.plan(5, 40, 72, 3, 48, 24, 80, torch.device(DEV), backend_key=table)
    assert p["row"]["n_row"] == 3
    compare(small(mode, T=5, N=3, He=40, Hcq=72, Hckv=80, D=48, Dr=24, block_size=4, seed=41))
    compare(small(mode, T=4, He=1000, seed=42))


@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8"])
def test_P2_P3_row_parts2_out_of_range_never_writes(mode, table, row_cfg, monkeypatch):
    """parts 2: −1 and out-of-range cache ids (checks off) leave guard blocks around the caches and every
    unlisted row bit-identical; the kv / kr rows come from the second program of a token."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    row_cfg(table, parts=2)
    _out_of_range_never_writes(mode, seed=43)


def _out_of_range_never_writes(mode, seed):
    """Caches inside larger NaN / random buffers (guard blocks), cache ids −1 and ≥ num_slots: only the valid
    rows change (bit for bit elsewhere), outputs and valid rows match the reference."""
    inp = small(mode, T=6, seed=seed)
    guards = _guard_caches(inp, float("nan"))
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    idx = inp["cache_index"].clone()
    idx[1], idx[2], idx[5] = -1, slots, slots + 3
    inp["cache_index"] = idx
    before, expect, want, got = _run_with_out_of_range_ids(inp, guards, slots)
    if got[0].dtype == torch.int8:
        _int8_close(got[0], want[0], "query")
    else:
        assert_close(got[0], want[0], KIND, name="query")
    assert_close(got[1], want[1], KIND, name="query_rope")
    for name, buf in guards.items():
        assert torch.equal(bits(buf[0]), bits(before[name][0])) and torch.equal(bits(buf[-1]), bits(before[name][-1])), \
            f"{name}: a guard block outside the cache was written"
        f, fe = inp[name].reshape(-1, buf.shape[-1]), expect[name].reshape(-1, buf.shape[-1])
        ok = idx[(idx >= 0) & (idx < slots)].cpu()
        keep = torch.ones(f.shape[0], dtype=torch.bool)
        keep[ok] = False
        keep = keep.to(f.device)
        assert torch.equal(bits(f[keep]), bits(before[name][1:-1].reshape(-1, buf.shape[-1])[keep])), \
            f"{name}: a row that must not be written changed"
        if f.dtype == torch.int8:
            _int8_close(f[ok.to(f.device)], fe[ok.to(f.device)], name)
        else:
            assert_close(f[ok.to(f.device)], fe[ok.to(f.device)], KIND, name=name)


# ----------------------------------------------------------------------------------------------
# query config entries on every bucket of a table
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def query_cfg(stack):
    """``query_cfg(table, **entries)``: every query bucket of config table ``table`` gets ``entries``."""
    return _section_override(stack, "query", on_section=False)


# ----------------------------------------------------------------------------------------------
# row config buckets per T and int8 ("row": {..., "buckets": [{"match": {"T": [lo, hi], "int8": bool}, ...}]})
# ----------------------------------------------------------------------------------------------
def test_row_buckets_by_T_int8_table_and_flat_form(table):
    """The row section's buckets are picked by T and int8 (int8 token_x), their entries override the section's
    keys; a flat section (the "ascend" table) is used as it is. Each pick runs against the reference (outputs
    poisoned, unused cache slots NaN)."""
    cfg = M_CONFIGS()
    sec = {k: v for k, v in cfg[table]["row"].items() if k != "buckets"}
    sec.update(num_warps=4, parts=1)
    cfg[table]["row"] = dict(sec, buckets=[
        {"match": {"T": [0, 2], "int8": False}, "config": {"parts": 2, "num_warps": 8}},
        {"match": {"int8": True}, "config": {"parts": 2}}, {"config": {}}])
    with replaced_configs("mla_prolog", cfg):
        def row(T, int8=False):
            return K.plan(T, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key=table, int8_down=int8)["row"]
        r1, r5, r5i = row(1), row(5), row(5, True)
        assert (r1["PARTS"], r1["num_warps"]) == (2, 8) and "match" not in r1
        assert (r5["PARTS"], r5["num_warps"]) == (1, 4)
        assert (r5i["PARTS"], r5i["num_warps"]) == (2, 4)
        assert resolve(sec, T=5, int8=True) == sec          # flat form: as it is
        compare(small("bf16", T=1, seed=70))
        compare(small("bf16", T=5, seed=71))
        compare(small("a8w8", T=5, seed=72))


# ----------------------------------------------------------------------------------------------
# the "cuda" table as shipped; unknown config keys
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8"])
def test_P2_P3_cuda_defaults_out_of_range_never_writes(mode, monkeypatch, stack):
    """The "cuda" table as shipped (row buckets, PRE_UK, evict-first W_UQ_QR), checks off: −1 / out-of-range cache
    ids never written (guard blocks around the caches, unlisted rows bit for bit)."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    stack.enter_context(forced_table("cuda"))
    _out_of_range_never_writes(mode, seed=62)


@pytest.mark.parametrize("table_key", ["cuda", "ascend"])
@pytest.mark.parametrize("sec,key,value", [("row", "prefetch_uk", 1), ("row", "prefetch_tail", 1),
                                           ("row", "PF_BLOCK", 8192), ("row", "prefetch_programs_per_core", 2),
                                           ("query", "uk_l2", 1), ("query", "uk_l2_rows", 8),
                                           ("query", "absorb_split", 2), ("query", "k_split", 2),
                                           ("query", "split_rope", 1), ("query", "early_uk", 1),
                                           ("query", "fuse_row_wait_max_t", 32), ("row", "pdl", 1),
                                           ("query", "pdl", 1)])
def test_unknown_switches_raise_not_ignored(table_key, sec, key, value, query_cfg, row_cfg, stack):
    """A key the launcher does not know (a typo, or a switch that no longer exists) in an override, a table section
    or a bucket is a ValueError naming it (a sweep must never time a silent no-op as if it were the switch)."""
    dims = (1, 64, 96, 2, 128, 64, 512, torch.device("cpu"))
    want = rf"unknown mla_prolog {sec} config key\(s\) \['{key}'\]"
    with pytest.raises(ValueError, match=want):
        K.plan(*dims, backend_key=table_key, overrides={sec: {key: value}})
    (row_cfg if sec == "row" else query_cfg)(table_key, **{key: value})
    with pytest.raises(ValueError, match=want):
        K.plan(*dims, backend_key=table_key)
    stack.enter_context(forced_table(table_key))
    with pytest.raises(ValueError, match=want):
        run(small("bf16", T=2, seed=63))


def test_unknown_down_key_raises():
    """A down-section override naming a key the down kernel does not take (pdl, max_t) is an error."""
    for key in ("pdl", "max_t"):
        with pytest.raises(ValueError, match=rf"unknown mla_prolog down config key\(s\) \['{key}'\]"):
            K.plan(1, 64, 96, 2, 128, 64, 512, torch.device("cpu"), overrides={"down": {key: 1}})


# ----------------------------------------------------------------------------------------------
# row + query kernels in one launch (config "query": {"fuse_row_max_t": n}, CUDA, T ≤ n and one token tile)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", M.MODES)
@pytest.mark.parametrize("T", [1, 5])
def test_fused_row_query_modes_match_reference(mode, T, query_cfg, monkeypatch, stack):
    """fuse_row_max_t: one _row_query_kernel launch (every query program recomputes the cq → cqn rows into the
    shared buffer, then its (head, tile) item; T more programs write the kv / kr cache rows) in every mode;
    outputs and the cqn buffer poisoned, unused cache slots NaN / random int8 compared bit for bit."""
    query_cfg("cuda", fuse_row_max_t=8)
    stack.enter_context(forced_table("cuda"))
    p = K.plan(T, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda", int8_query=mode != "bf16")
    lp = K.make_launch(p, mode.startswith("a8w8"), mode != "bf16", mode.endswith("c8"), False, False, False, CUDA)
    assert p["query"]["FUSE_ROW"] and lp.fuse_grid == (lp.query_grid[0] + T,)
    compare(small(mode, T=T, seed=80 + T))


@pytest.mark.parametrize("entries", [dict(fuse_row_max_t=8), dict(fuse_row_max_t=8, PRE_UK=1, BLOCK_C=64)])
@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8", "partial"])
def test_fused_row_query_odd_dims_split_k_and_options(mode, entries, query_cfg, monkeypatch, stack):
    """Fused launch with the default / fewer PRE_UK chunks and narrower ones, dims that are not powers of two
    (masks) and split-K over He 1000."""
    query_cfg("cuda", **entries)
    stack.enter_context(forced_table("cuda"))
    compare(small(mode, T=3, N=3, He=40, Hcq=72, Hckv=80, D=48, Dr=24, block_size=4, seed=81))
    compare(small(mode, T=2, He=1000, seed=82))


def test_fused_row_query_only_where_it_applies(query_cfg):
    """Not fused above fuse_row_max_t, when T needs more than one token tile, or on the "ascend" table."""
    query_cfg("cuda", fuse_row_max_t=64, BLOCK_M=16)

    def fused(T, table="cuda", **kw):
        return K.plan(T, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key=table, **kw)["query"]["FUSE_ROW"]
    assert fused(1) and fused(16) and not fused(17)
    assert not fused(1, "ascend", overrides={"query": {"fuse_row_max_t": 64}})
    assert not K.plan(1, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda",
                      overrides={"query": {"fuse_row_max_t": 0}})["query"]["FUSE_ROW"]


@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8", "partial_c8"])
def test_P2_P3_fused_row_query_out_of_range_never_writes(mode, query_cfg, monkeypatch, stack):
    """Fused launch, checks off: −1 / out-of-range cache ids never written (guard blocks, unlisted rows bit for bit)."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    query_cfg("cuda", fuse_row_max_t=8)
    stack.enter_context(forced_table("cuda"))
    _out_of_range_never_writes(mode, seed=83)


# ----------------------------------------------------------------------------------------------
# epsilons and RoPE tables that matter (mutation-audit findings)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8"])
def test_distinct_large_epsilons(table, mode):
    """rmsnorm_epsilon_cq / _ckv large enough to change the result and different from each other: the defaults (1e-5
    for both, against mean(x²) ≈ 1) hid an epsilon dropped, added outside the sqrt, or handed to the other norm."""
    inp = small(mode, T=5)
    inp["rmsnorm_epsilon_cq"], inp["rmsnorm_epsilon_ckv"] = 0.05, 2.0
    compare(inp)


def test_rope_reads_every_column_of_sin_and_cos(table):
    """sin / cos whose two halves differ (the op takes [T, Dr] and the reference reads every column): make_inputs'
    half-duplicated tables hid a kernel that reads cos[j] where cos[j + Dr/2] belongs (mutation audit)."""
    inp = small("bf16", T=5)
    g = torch.Generator().manual_seed(7)
    for k in ("rope_sin", "rope_cos"):
        inp[k] = (2 * torch.rand(inp[k].shape, generator=g) - 1).to(inp[k].dtype).to(inp[k].device)
    compare(inp)


@pytest.mark.parametrize("mode", ["partial_c8", "a8w8_c8"])
def test_c8_cache_saturation_bit_exact_at_both_ends(mode):
    """C8 caches with scales 20× too large: every element the reference saturates (−128 or 127) is exactly that in
    the Triton cache (compare()'s ±1 LSB tolerance for rounding ties would accept −127 for −128), and both ends are
    reached."""
    inp = small(mode, T=8, N=1, seed=3)
    inp["quant_scale_ckv"] = inp["quant_scale_ckv"] * 20
    if inp.get("quant_scale_ckr") is not None:
        inp["quant_scale_ckr"] = inp["quant_scale_ckr"] * 20
    a, b = clone(inp), clone(inp)
    run(a, "reference")
    run(b, "triton")
    idx = inp["cache_index"].reshape(-1)
    idx = idx[idx >= 0]
    for name in ("kv_cache", "kr_cache"):
        if a[name].dtype != torch.int8:
            continue
        ra = a[name].reshape(-1, a[name].shape[-1])[idx]
        rb = b[name].reshape(-1, b[name].shape[-1])[idx]
        sat = (ra == -128) | (ra == 127)
        assert (ra == -128).any() and (ra == 127).any(), name
        assert torch.equal(rb[sat], ra[sat]), f"{name}: saturated values differ"


# ----------------------------------------------------------------------------------------------
# down GEMM on quant_matmul's streaming GEMV ("cuda" table, full A8W8, T ≤ down.gemv_max_t)
# ----------------------------------------------------------------------------------------------
# a "gemv_stream" bucket the interpreter can run (no dp4a inline asm): what quant_matmul's table gives on CUDA
_GEMV_PLAN = dict(BLOCK_N=4, BLOCK_K=128, num_warps=1, programs_per_sm=1, dp4a=False, prefetch=True, SPLIT_K=1)


@pytest.fixture
def down_gemv(monkeypatch, stack):
    """``down_gemv(gemv_max_t)``: the "cuda" table with ``down.gemv_max_t`` set, quant's table answering with
    :data:`_GEMV_PLAN` for any shape (the CPU has no CUDA plan); returns the list of GEMV launches (x, weights, part)."""
    from ops.triton import quant as TQ
    launches = []
    real = TQ.gemv_stream_int32

    def spy(x, weights, part, plan):
        launches.append((x.shape, tuple(w.shape for w in weights), part.shape))
        return real(x, weights, part, plan)

    def use(gmax):
        cfg = M_CONFIGS()
        cfg["cuda"]["down"]["gemv_max_t"] = gmax
        stack.enter_context(replaced_configs("mla_prolog", cfg))
        stack.enter_context(forced_table("cuda"))
        monkeypatch.setattr(TQ, "gemv_stream_plan", lambda M_, N_, K_, dev: dict(_GEMV_PLAN))
        monkeypatch.setattr(TQ, "gemv_stream_int32", spy)
        return launches
    return use


@pytest.mark.parametrize("mode,T,fused", [("a8w8", 1, True), ("a8w8_c8", 1, True), ("a8w8", 2, False),
                                          ("a8w8_c8", 3, False)])
def test_down_gemv_matches_reference(mode, T, fused, down_gemv):
    """The down GEMM as ONE streaming-GEMV launch over [W_DQ ‖ W_DKV_KR] (K-major): outputs and caches against the
    reference (poisoned workspace, so an unwritten partial fails), the row kernels planned unsplit, and the same
    bits as the down kernel's split path (int32 sums are exact in any order). T 1: the fused row + query launch;
    T 2–3 (gemv_max_t 4): the separate row and query launches."""
    launches = down_gemv(4)
    inp = K.pack_weights(small(mode, T=T, seed=90 + T, He=1000), "cuda")   # He 1000: a K tail in the GEMV
    _, b, _, rb = compare(inp)
    assert launches == [((T, 1000), ((1000, 96), (1000, 576)), (T, 672))]
    p = K.plan(T, 1000, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda", int8_down=True, int8_query=True,
               gemv=True)
    assert p["down"]["GEMV"] and p["down"]["SPLIT_K"] == 1 and bool(p["query"]["FUSE_ROW"]) == fused
    c = clone(inp)
    rc = K.mla_prolog_config(**c, overrides={"down": {"gemv_max_t": 0}})   # the down kernel, split
    assert len(launches) == 1
    for u, v in zip(rb, rc):
        assert torch.equal(bits(u), bits(v))
    for name in ("kv_cache", "kr_cache"):
        assert torch.equal(bits(b[name]), bits(c[name])), name


def test_down_gemv_only_where_it_applies(down_gemv):
    """The GEMV takes the down GEMM only for int8 token_x on the "cuda" table at T ≤ gemv_max_t with K-major int8
    weights of equal strides; elsewhere the down kernel runs (and the results still match the reference)."""
    launches = down_gemv(1)

    def gemv_used(inp, **kw):   # (no clone: it would make a strided weight dense)
        n = len(launches)
        K.mla_prolog_config(**inp, **kw)
        return len(launches) > n
    packed = K.pack_weights(small("a8w8", T=1, seed=95), "cuda")
    assert gemv_used(packed)
    assert not gemv_used(K.pack_weights(small("a8w8", T=2, seed=95), "cuda"))      # T > gemv_max_t
    assert not gemv_used(packed, backend_key="ascend")                              # not the "cuda" table
    assert not gemv_used(K.pack_weights(small("partial", T=1, seed=95), "cuda"))   # float token_x
    assert not gemv_used(K.pack_weights(small("a8w8", T=1, seed=95), "ascend"))    # row-major int8 weights
    odd = dict(packed)
    odd["weight_dkv_kr"] = torch.empty_strided(odd["weight_dkv_kr"].shape, (1, 72), dtype=torch.int8,
                                               device=DEV).copy_(packed["weight_dkv_kr"])   # other strides
    assert odd["weight_dkv_kr"].stride() == (1, 72) and not gemv_used(odd)
    # a "down" override selects the down kernel (a sweep of its split_k times it), unless it names gemv_max_t
    assert not gemv_used(packed, overrides={"down": {"split_k": 2}})
    assert gemv_used(packed, overrides={"down": {"split_k": 2, "gemv_max_t": 1}})
    assert gemv_used(packed, overrides={"query": {"num_stages": 2}})
    # down_uses_gemv says which plan launches: plan(gemv=True) is unsplit, its grid left to quant_matmul's plan
    args = (packed["token_x"], packed["weight_dq"], packed["weight_dkv_kr"], 512, 64)
    assert K.down_uses_gemv(*args) and not K.down_uses_gemv(*args, overrides={"down": {"split_k": 2}})
    assert not K.down_uses_gemv(*args, backend_key="ascend") and not K.down_uses_gemv(packed["token_x"][:0], *args[1:])
    p = K.plan(1, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda", int8_down=True, int8_query=True,
               gemv=True)
    assert p["down"]["GEMV"] and p["down"]["SPLIT_K"] == 1 and p["down"]["grid"] == 0
    assert not K.plan(1, 64, 96, 2, 128, 64, 512, torch.device(DEV), backend_key="cuda", int8_down=True)["down"]["GEMV"]
    compare(odd, views={"weight_dkv_kr": odd["weight_dkv_kr"]})   # the fallback is still right
