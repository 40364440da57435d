"""ds::mla_prolog: reference vs an independent fp64 computation built from Hugging Face DeepseekV3 pieces,
field cases P1–P5, argument checks, registration (opcheck, torch.compile), FLOP formula.

The independent computation (``hf_expected``) materialises a ``DeepseekV3Attention`` (q_a_proj,
q_a_layernorm, q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj) from the op's weights, runs it
in fp64, rounds to the activation dtype at the documented rounding points, and applies HF's
``apply_rotary_pos_emb_interleave``. It shares no code with reference/mla_prolog.py.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

import ops
from ops import mla_prolog as M
from reference import mla_prolog as R
from tests.backends import backends_for
from tests.mla_inputs import bits, clone_inputs, mla_small
from tests.spec_checks import check_against_reference, spec_shapes
from tolerances import assert_close

from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention, DeepseekV3RotaryEmbedding, apply_rotary_pos_emb, apply_rotary_pos_emb_interleave)

HF_EPS = 1e-6   # HF's q_a_layernorm / kv_a_layernorm are built with the default eps 1e-6
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
QUANT_MODES = ("partial", "partial_c8", "a8w8", "a8w8_c8", "bf16_c8")


def small(mode="bf16", T=6, N=2, *, bs=16, dtype=torch.bfloat16, seed=0, device="cpu", **kw):
    return mla_small(mode, T, N, dtype=dtype, device=device, seed=seed, block_size=bs, eps=HF_EPS, **kw)


def run(inp, be=None):
    """mla_prolog on backend ``be`` (a tests.backends.Backend; None: the reference), skipped with the reason where
    that backend refuses these inputs."""
    with be.active() if be is not None else ops.backend("reference"):
        try:
            M.mla_prolog.select((), inp)
        except ops.BackendUnavailable as e:
            pytest.skip(str(e))
        return M.mla_prolog(**inp)


MLA = backends_for("mla_prolog")


# ----------------------------------------------------------------------------------------------
# the independent computation
# ----------------------------------------------------------------------------------------------
def hf_expected(inp):
    """fp64 expectation from HF DeepseekV3Attention pieces. Returns a dict of fp64 tensors:
    query [T,N,Hckv] (before any int8 quantisation), query_rope [T,N,Dr], kv [T,Hckv] and k_rope [T,Dr]
    (the cache rows before rounding/quantisation), q_pass [T,N,D], k_nope [T,N,D] (HF's non-absorbed
    key), plus the absorbed score reference S_nope[t,h,t'] = q_pass[t,h]·k_nope[t',h]."""
    x = inp["token_x"]
    lead = tuple(x.shape[:-1])
    T, He = math.prod(lead), x.shape[-1]
    N, D, Hckv = inp["weight_uk"].shape
    Dr = inp["kr_cache"].shape[-1]
    Hcq = inp["weight_dq"].shape[1]
    dt = inp["weight_uk"].dtype
    dev = x.device

    def r(t):
        return t.to(dt).to(torch.float64)

    def deq_w(w, s):  # per-channel
        return w.double() * (s.double().reshape(1, -1) if w.dtype == torch.int8 else 1.0)

    full = x.dtype == torch.int8
    x64 = x.reshape(T, He).double() * (inp["dequant_scale_x"].double().reshape(T, 1) if full else 1.0)
    cfg = DeepseekV3Config(hidden_size=He, q_lora_rank=Hcq, kv_lora_rank=Hckv, qk_nope_head_dim=D,
                           qk_rope_head_dim=Dr, v_head_dim=D, num_attention_heads=N, num_key_value_heads=N,
                           rope_interleave=True, attention_bias=False)
    attn = DeepseekV3Attention(cfg, layer_idx=0).to(device=dev, dtype=torch.float64)
    with torch.no_grad():
        attn.q_a_proj.weight.copy_(deq_w(inp["weight_dq"], inp.get("dequant_scale_w_dq")).T)
        attn.q_a_layernorm.weight.copy_(inp["rmsnorm_gamma_cq"].double())
        attn.q_b_proj.weight.copy_(deq_w(inp["weight_uq_qr"], inp.get("dequant_scale_w_uq_qr")).T)
        attn.kv_a_proj_with_mqa.weight.copy_(deq_w(inp["weight_dkv_kr"], inp.get("dequant_scale_w_dkv_kr")).T)
        attn.kv_a_layernorm.weight.copy_(inp["rmsnorm_gamma_ckv"].double())
        kvb = attn.kv_b_proj.weight.view(N, 2 * D, Hckv)
        kvb[:, :D].copy_(inp["weight_uk"].double())       # W_UK[h] = k_nope rows of kv_b_proj for head h
        attn.q_a_layernorm.variance_epsilon = inp["rmsnorm_epsilon_cq"]
        attn.kv_a_layernorm.variance_epsilon = inp["rmsnorm_epsilon_ckv"]

        cq = r(attn.q_a_proj(x64))
        cqn = attn.q_a_layernorm(cq)
        if inp["weight_uq_qr"].dtype == torch.int8:
            if inp.get("smooth_scales_cq") is not None:
                cqn = cqn * inp["smooth_scales_cq"].double().reshape(1, Hcq)
            s = cqn.abs().amax(-1, keepdim=True) / 127
            qv = torch.where(s > 0, torch.round(cqn / torch.where(s > 0, s, 1)).clamp(-127, 127), 0)
            q_states = r(attn.q_b_proj(qv * s))
        else:
            q_states = r(attn.q_b_proj(r(cqn)))
        q_states = q_states.view(T, N, D + Dr)
        q_pass, q_rot = torch.split(q_states, [D, Dr], dim=-1)

        compressed = r(attn.kv_a_proj_with_mqa(x64))
        kv_nope, k_rot = torch.split(compressed, [Hckv, Dr], dim=-1)
        kv = attn.kv_a_layernorm(kv_nope)                       # [T, Hckv]
        cos = inp["rope_cos"].reshape(T, Dr).double()
        sin = inp["rope_sin"].reshape(T, Dr).double()
        q_emb, k_emb = apply_rotary_pos_emb_interleave(q_rot, k_rot[:, None, :], cos, sin, unsqueeze_dim=1)
        query = torch.einsum("tnd,ndc->tnc", q_pass, inp["weight_uk"].double())
        k_nope = attn.kv_b_proj(r(kv)).view(T, N, 2 * D)[..., :D]
    return dict(query=query, query_rope=q_emb, kv=kv, k_rope=k_emb[:, 0], q_pass=q_pass, k_nope=k_nope,
                s_nope=torch.einsum("tnd,snd->tns", q_pass, k_nope))


def written(inp):
    """(token positions, slot ids) that must be written."""
    idx = inp["cache_index"].reshape(-1).cpu()
    pos = torch.nonzero(idx >= 0).reshape(-1)
    return pos, idx[pos]


def cache_rows(cache, slots):
    return cache.reshape(-1, cache.shape[-1])[slots.to(cache.device)]


def check_against_hf(inp, before, out, *, min_identical=None):
    """Compare op outputs + written cache rows with hf_expected; check unwritten rows are bit-identical."""
    exp = hf_expected(before)
    query, query_rope, dsq = out
    N, Hckv = query.shape[-2:]
    T = math.prod(query.shape[:-2])
    query, query_rope = query.reshape(T, N, Hckv), query_rope.reshape(T, N, query_rope.shape[-1])
    kind = "fp16" if query_rope.dtype == torch.float16 else "bf16"
    kvq, krq = inp["kv_cache"].dtype == torch.int8, inp["kr_cache"].dtype == torch.int8
    if query.dtype == torch.int8:
        # full + C8: per-(token, head) int8 query; scale = rowmax|q_N|/127, query_rope rescaled
        assert dsq.shape == (T, N, 1) and dsq.dtype == torch.float32
        assert_close(dsq, exp["query"].abs().amax(-1, keepdim=True) / 127, kind, name="dequant_scale_q_nope")
        lsb = (query.double() - exp["query"] / dsq.double()).abs().max().item() if T else 0.0
        assert lsb <= 0.5 + 0.3, f"int8 query off by {lsb} LSB from round(q_N / scale)"
        assert int(query.abs().max()) <= 127 if T else True
        qs = before["quant_scale_ckv"].double().reshape(-1)[0]
        assert_close(query_rope.double() * dsq.double() / qs, exp["query_rope"], kind, name="query_rope·scale/qs")
    else:
        assert dsq.shape == (0,) and dsq.dtype == torch.float32
        assert_close(query, exp["query"], kind, name="query")
        assert_close(query_rope, exp["query_rope"], kind, name="query_rope")
        if min_identical is not None and T:
            same = (query == exp["query"].to(query.dtype)).double().mean().item()
            assert same >= min_identical, f"only {same:.4f} of query elements bit-identical to the fp64 rounding-point model"
            same = (query_rope == exp["query_rope"].to(query.dtype)).double().mean().item()
            assert same >= min_identical, f"only {same:.4f} of query_rope elements bit-identical"

    pos, slots = written(before)
    kv_rows, kr_rows = cache_rows(inp["kv_cache"], slots), cache_rows(inp["kr_cache"], slots)
    if len(pos):
        for rows, want, is8, scale_name, name in ((kv_rows, exp["kv"], kvq, "quant_scale_ckv", "kv_cache"),
                                                  (kr_rows, exp["k_rope"], krq, "quant_scale_ckr", "kr_cache")):
            want = want[pos]
            if is8:
                y = (want * before[scale_name].double().reshape(1, -1)).clamp(-128, 127)
                err = (rows.double() - y).abs().max().item()
                assert err <= 0.5 + 0.3, f"{name}: int8 rows off by {err} LSB from the quantised fp64 value"
            else:
                assert_close(rows, want, kind, name=name)
        # absorbed score q_nope·k_nope = (q_pass W_UK)·c_kv, against HF's expanded k_nope
        if query.dtype != torch.int8 and not kvq:
            s_op = torch.einsum("tnc,sc->tns", query.double(), kv_rows.double())
            assert_close(s_op, exp["s_nope"][:, :, pos], kind, name="absorbed score")
        # P5: q_rope·k_rope against HF
        if query.dtype != torch.int8 and not krq:
            s_op = torch.einsum("tnr,sr->tns", query_rope.double(), kr_rows.double())
            r = lambda t: t.to(query_rope.dtype).double()  # noqa: E731  (both sides at the same rounding point)
            s_hf = torch.einsum("tnr,sr->tns", r(exp["query_rope"]), r(exp["k_rope"][pos]))
            assert_close(s_op, s_hf, kind, name="rope score")
    # unwritten rows untouched, bit for bit
    for name in ("kv_cache", "kr_cache"):
        flat_a = bits(inp[name]).reshape(-1, inp[name].shape[-1])
        flat_b = bits(before[name]).reshape(-1, inp[name].shape[-1])
        keep = torch.ones(flat_a.shape[0], dtype=torch.bool)
        keep[slots] = False
        keep = keep.to(flat_a.device)
        assert torch.equal(flat_a[keep], flat_b[keep]), f"{name}: a row that must not be written changed"


# ----------------------------------------------------------------------------------------------
# reference vs the independent computation, every mode
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", M.MODES)
def test_reference_vs_hf(mode, device):
    inp = small(mode, T=10, N=4, device=device)
    before = clone_inputs(inp)
    out = run(inp)
    check_against_hf(inp, before, out, min_identical=0.97)


@pytest.mark.parametrize("mode", ["bf16", "a8w8", "a8w8_c8"])
def test_reference_vs_hf_3d_input(mode):
    """token_x [B, S, He] → query [B, S, N, Hckv]; same numbers as the flattened [T, He] call."""
    inp = small(mode, B=3, S=2, N=2)
    flat = clone_inputs(inp)
    for k in ("token_x", "rope_sin", "rope_cos"):
        flat[k] = flat[k].reshape(6, -1)
    flat["cache_index"] = flat["cache_index"].reshape(6)
    if "dequant_scale_x" in flat:
        flat["dequant_scale_x"] = flat["dequant_scale_x"].reshape(6, 1)
    before = clone_inputs(inp)
    q, qr, s = run(inp)
    assert q.shape == (3, 2, 2, 512) and qr.shape == (3, 2, 2, 64)
    assert s.shape == ((6, 2, 1) if mode == "a8w8_c8" else (0,))
    q2, qr2, s2 = run(flat)
    assert torch.equal(q.reshape(6, 2, 512), q2) and torch.equal(qr.reshape(6, 2, 64), qr2) and torch.equal(s, s2)
    check_against_hf(inp, before, (q, qr, s))


def test_reference_vs_hf_deepseek_width():
    """One example at DeepSeek-V3's He=7168, Hcq=1536 (N=1 head, a TP shard would have 8+)."""
    inp = M.make_inputs(dict(T=3, N=1, He=7168, Hcq=1536, block_size=16, eps=HF_EPS), dtype=torch.bfloat16,
                        generator=torch.Generator().manual_seed(7))
    before = clone_inputs(inp)
    # correct rounding points give ~0.91 bit-identical here (fp32 vs fp64 sums over K=7168 flip a few
    # bf16 roundings); dropping one rounding point gives < 0.6
    check_against_hf(inp, before, run(inp), min_identical=0.85)


@given(T=st.integers(0, 12), N=st.sampled_from([1, 2, 8]), bs=st.sampled_from([1, 16, 128]),
       mode=st.sampled_from(M.MODES), fp16=st.booleans(), three_d=st.booleans(), seed=st.integers(0, 2**16))
@example(T=0, N=1, bs=16, mode="bf16", fp16=False, three_d=False, seed=0)
@example(T=1, N=8, bs=1, mode="a8w8_c8", fp16=False, three_d=False, seed=0)
@example(T=0, N=2, bs=16, mode="a8w8_c8", fp16=False, three_d=True, seed=0)
@settings(max_examples=15)   # ~1 s per example on 2 cores (fp64 HF modules)
def test_hypothesis_reference_vs_hf(T, N, bs, mode, fp16, three_d, seed):
    kw = dict(B=T, S=1) if three_d else dict(T=T)
    inp = small(mode, N=N, bs=bs, dtype=torch.float16 if fp16 else torch.bfloat16, seed=seed, **kw)
    before = clone_inputs(inp)
    check_against_hf(inp, before, run(inp))


# ----------------------------------------------------------------------------------------------
# field cases
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("be", MLA)
@pytest.mark.parametrize("mode", ["bf16", "a8w8", "partial_c8"])
def test_P1_noncontiguous_token_x(mode, be):
    inp = small(mode, T=7, N=2, dtype=be.dtype(torch.bfloat16), device=be.device)
    x = inp["token_x"]
    wide = torch.zeros(x.shape[0], x.shape[1] + 40, dtype=x.dtype, device=x.device)
    wide[:, 24:24 + x.shape[1]] = x
    view = wide[:, 24:24 + x.shape[1]]
    assert not view.is_contiguous() and torch.equal(view, x)
    a, b = clone_inputs(inp), clone_inputs(inp)
    b["token_x"] = view
    # also a transposed-storage rope table
    b["rope_sin"] = b["rope_sin"].T.contiguous().T
    out_a, out_b = run(a, be), run(b, be)
    for u, v in zip(out_a, out_b):
        assert torch.equal(bits(u), bits(v))
    assert torch.equal(bits(a["kv_cache"]), bits(b["kv_cache"])) and torch.equal(bits(a["kr_cache"]), bits(b["kr_cache"]))


@pytest.mark.parametrize("be", MLA)
@pytest.mark.parametrize("fill", ["nan", "random"])
@pytest.mark.parametrize("mode", ["bf16", "partial_c8", "a8w8_c8"])
def test_P2_negative_cache_index_not_written(mode, fill, be):
    inp = small(mode, T=9, N=2, cache_fill=fill, dtype=be.dtype(torch.bfloat16), device=be.device)
    idx = inp["cache_index"].clone()
    idx[0], idx[4], idx[8] = -1, -1, -7          # −1 and any other negative id
    inp["cache_index"] = idx
    before = clone_inputs(inp)
    out = run(inp, be)
    pos, slots = written(before)
    assert len(pos) >= 1
    # the written rows are the computed values (not left NaN / stale)
    if inp["kv_cache"].dtype != torch.int8:
        assert not torch.isnan(cache_rows(inp["kv_cache"], slots)).any()
    check_against_hf(inp, before, out)


@pytest.mark.parametrize("be", MLA)
def test_P2_all_negative_writes_nothing(be):
    inp = small("bf16", T=5, dtype=be.dtype(torch.bfloat16), device=be.device)
    inp["cache_index"] = torch.full_like(inp["cache_index"], -1)
    before = clone_inputs(inp)
    q, qr, _ = run(inp, be)
    assert q.shape == (5, 2, 512) and not torch.isnan(q).any()
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))
    assert torch.equal(bits(inp["kr_cache"]), bits(before["kr_cache"]))


@pytest.mark.parametrize("be", MLA)
@pytest.mark.parametrize("call", ["eager", "registered"])
@pytest.mark.parametrize("bad", ["too_big", "huge", "duplicate", "duplicate_3d"])
def test_P3_bad_cache_index_raises_before_writing(bad, call, be):
    kw = dict(dtype=be.dtype(torch.bfloat16), device=be.device)
    inp = small("bf16", T=6, B=2, S=3, **kw) if bad == "duplicate_3d" else small("bf16", T=6, **kw)
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    idx = inp["cache_index"].reshape(-1).clone()
    idx[:] = torch.arange(6, device=idx.device) * 3
    if bad == "too_big":
        idx[3], want = slots, rf"cache_index\[3\] = {slots} is out of range"
    elif bad == "huge":
        idx[5], want = 2**40, rf"cache_index\[5\] = {2**40}"
    else:
        idx[1] = idx[4] = 7
        want = r"cache_index holds slot 7 more than once \(flat positions \[1, 4\]\)"
    inp["cache_index"] = idx.reshape(inp["cache_index"].shape)
    before = clone_inputs(inp)
    fn = M.mla_prolog if call == "eager" else torch.ops.ds.mla_prolog
    with be.active(), pytest.raises(ValueError, match=want):
        fn(**inp)
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))
    assert torch.equal(bits(inp["kr_cache"]), bits(before["kr_cache"]))


@pytest.mark.parametrize("be", MLA)
def test_P3_out_of_range_with_checks_off_never_writes_outside(monkeypatch, be):
    """With DS_OPS_CHECKS=0 there is no error, but every backend writes only in-range ids."""
    monkeypatch.setenv("DS_OPS_CHECKS", "0")
    inp = small("bf16", T=6, cache_fill="random", dtype=be.dtype(torch.bfloat16), device=be.device)
    slots = inp["kv_cache"].shape[0] * inp["kv_cache"].shape[1]
    inp["cache_index"][2] = slots + 5
    before = clone_inputs(inp)
    out = run(inp, be)
    before["cache_index"][2] = -1                    # expected: as if it were −1
    check_against_hf(inp, before, out)


@pytest.mark.parametrize("be", MLA)
@pytest.mark.parametrize("mode", ["bf16", "partial_c8", "a8w8_c8"])
@pytest.mark.parametrize("lead", [dict(T=0), dict(B=0, S=1), dict(B=2, S=0)])
def test_P4_zero_tokens(mode, lead, be):
    inp = small(mode, N=2, dtype=be.dtype(torch.bfloat16), device=be.device, **lead)
    before = clone_inputs(inp)
    q, qr, s = run(inp, be)
    shp = tuple(inp["token_x"].shape[:-1])
    assert q.shape == shp + (2, 512) and qr.shape == shp + (2, 64)
    assert s.shape == ((0, 2, 1) if mode == "a8w8_c8" else (0,))
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))
    assert torch.equal(bits(inp["kr_cache"]), bits(before["kr_cache"]))


@pytest.mark.parametrize("be", MLA)
def test_P5_rope_matches_hf_apply_rotary_pos_emb(be):
    """Interleaved RoPE pairs: q_rope·k_rope from the op equals HF's result, with sin/cos from HF's own
    DeepseekV3RotaryEmbedding and both HF formulations (view/transpose + apply_rotary_pos_emb, and
    apply_rotary_pos_emb_interleave); the caches hold k_rope in HF's (de-interleaved) output order."""
    dtype = be.dtype(torch.bfloat16)
    inp = small("bf16", T=8, N=2, dtype=dtype, seed=3, device=be.device)
    inp["cache_index"] = torch.arange(8, device=be.device) * 2 + 1
    T, Dr = 8, 64
    cfg = DeepseekV3Config(hidden_size=64, num_attention_heads=2, qk_rope_head_dim=Dr, rope_interleave=True,
                           max_position_embeddings=8192)
    rot = DeepseekV3RotaryEmbedding(cfg)
    positions = torch.tensor([[0, 1, 2, 17, 100, 1000, 4095, 8000]])
    cos, sin = rot(torch.zeros(1, dtype=torch.float32), positions)          # [1, T, Dr] cat(freqs, freqs)
    inp["rope_cos"], inp["rope_sin"] = cos[0].to(dtype).to(be.device), sin[0].to(dtype).to(be.device)
    before = clone_inputs(inp)
    q, qr, _ = run(inp, be)
    # q_rot / k_rot before RoPE (interleaved), from HF's projections in fp64 with the same rounding points
    c, s = inp["rope_cos"].double(), inp["rope_sin"].double()
    with torch.no_grad():
        q_rot_raw = _hf_q_rot(before)
        k_rot_raw = (inp["token_x"].double() @ inp["weight_dkv_kr"].double()).to(dtype).double()[:, 512:]

    def deint(t):
        b = t.shape[:-1]
        return t.view(*b, Dr // 2, 2).transpose(-1, -2).reshape(*b, Dr)
    # HF DeepSeek's original path (de-interleave with view/transpose, then apply_rotary_pos_emb) and the
    # newer apply_rotary_pos_emb_interleave
    q_a, k_a = apply_rotary_pos_emb(deint(q_rot_raw), deint(k_rot_raw)[:, None], c, s, unsqueeze_dim=1)
    q_b, k_b = apply_rotary_pos_emb_interleave(q_rot_raw, k_rot_raw[:, None], c, s, unsqueeze_dim=1)
    torch.testing.assert_close(q_a, q_b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k_a, k_b, rtol=1e-12, atol=1e-12)
    kr = inp["kr_cache"].reshape(-1, Dr)[inp["cache_index"]].double()
    kind = "fp16" if dtype == torch.float16 else "bf16"
    assert_close(torch.einsum("tnr,sr->tns", qr.double(), kr), torch.einsum("tnr,sr->tns", q_a, k_a[:, 0]), kind,
                 name="q_rope·k_ropeᵀ")
    assert_close(kr, k_a[:, 0], kind, name="k_rope cache rows (de-interleaved order)")
    assert_close(qr.double(), q_a, kind, name="query_rope")


def _hf_q_rot(inp):
    """q_rot (interleaved, before RoPE) via HF's q_a_proj → q_a_layernorm → q_b_proj, rounding points applied."""
    dt = inp["weight_uk"].dtype
    N, D, _ = inp["weight_uk"].shape
    x = inp["token_x"].double()
    cq = (x @ inp["weight_dq"].double()).to(dt).double()
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm
    norm = DeepseekV3RMSNorm(cq.shape[-1], eps=inp["rmsnorm_epsilon_cq"]).double().to(cq.device)
    with torch.no_grad():
        norm.weight.copy_(inp["rmsnorm_gamma_cq"].double())
        cqn = norm(cq).to(dt).double()
    q = (cqn @ inp["weight_uq_qr"].double()).to(dt).double().view(x.shape[0], N, -1)
    return q[..., D:]


_MLA_SPEC = [(nm, shape) for nm, shape in spec_shapes("mla_prolog", {"T": 2, "B": 1, "S": 2})
             if shape["He"] < 7168 or (shape.get("T") == 1 and shape.get("N") == 8 and shape["mode"] == "a8w8")]


@pytest.mark.parametrize("be", backends_for("mla_prolog", reference=False))
@pytest.mark.parametrize("shape_name,shape", _MLA_SPEC, ids=[c[0] for c in _MLA_SPEC])
def test_spec_inputs_match_the_reference(be, shape_name, shape):
    """The OpSpec's make_inputs for its named shapes (the DeepSeek width at one token, TP 16, A8W8; every mode at
    the small CPU shape): query, query_rope, the scales and both caches within the op's tolerance rows of the
    reference."""
    check_against_reference(be, "mla_prolog", shape, torch.bfloat16, torch.Generator().manual_seed(len(shape_name)))


def test_k_rope_cache_layout_is_deinterleaved():
    """Byte layout of a kr_cache row: [y0, y2, …, y62, y1, y3, …, y63] where (y2i, y2i+1) is the i-th rotated
    pair of the interleaved input; at position 0 (sin 0, cos 1) that is exactly deinterleave(k_rope input)."""
    inp = small("bf16", T=2, N=1, seed=5)
    inp["cache_index"] = torch.tensor([3, 13])
    inp["rope_sin"] = torch.zeros_like(inp["rope_sin"])
    inp["rope_cos"] = torch.ones_like(inp["rope_cos"])
    before = clone_inputs(inp)
    run(inp)
    kr_in = (before["token_x"].float() @ before["weight_dkv_kr"].float()).to(torch.bfloat16)[:, 512:]
    want = torch.cat([kr_in[:, 0::2], kr_in[:, 1::2]], dim=-1)
    got = inp["kr_cache"].reshape(-1, 64)[torch.tensor([3, 13])]
    assert torch.equal(bits(got), bits(want))


# ----------------------------------------------------------------------------------------------
# quantisation rules (exact)
# ----------------------------------------------------------------------------------------------
def test_round_half_even_and_saturation():
    y = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 300.0, -127.5, -128.5, -300.0, float("nan")])
    assert R.round_half_even_int8(y, -128, 127).tolist() == [0, 2, 2, 0, -2, -2, 126, 127, 127, -128, -128, -128, 0]
    assert R.round_half_even_int8(y, -127, 127).tolist()[9:12] == [-127, -127, -127]


def test_dynamic_quant_rules():
    y = torch.tensor([[0.0, 0.0, 0.0, 0.0],            # all-zero row → q 0, scale 0
                      [-4.0, 1.0, 2.0, 0.0],            # absmax negative → −127, never −128
                      [127 * 0.5 / 127 * 2, 0.5 * 2 / 127 * 4, 1.5 * 2 / 127 * 4, -2.5 * 2 / 127 * 4],
                      [1.0, float("nan"), 0.0, 0.0]])
    y[2, 0] = 2.0 * 4  # row max 8 → scale 8/127; elements at 0.5, 1.5, −2.5 steps
    y[2, 1], y[2, 2], y[2, 3] = 0.5 * 8 / 127, 1.5 * 8 / 127, -2.5 * 8 / 127
    q, s = R.dynamic_quant_int8(y)
    assert q[0].tolist() == [0, 0, 0, 0] and s[0] == 0
    assert q[1, 0] == -127 and s[1] == 4 / 127
    assert q[2].tolist() == [127, 0, 2, -2]
    assert torch.isnan(s[3]) and torch.isfinite(s[:3]).all()


def test_int8_matmul_exact():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (5, 3000), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (3000, 7), generator=g, dtype=torch.int8)
    a[0] = -128
    b[:, 0] = -128                                       # 3000·2^14 > 2^24: naive fp32 would round
    want = (a.long() @ b.long()).to(torch.int32).float()
    assert torch.equal(R.int8_matmul(a, b), want)


@pytest.mark.parametrize("mode", ["partial_c8", "a8w8_c8", "bf16_c8"])
def test_C8_cache_saturates_to_full_int8_range(mode):
    """Static C8 scales too large for the data: cache values saturate to [−128, 127] (a saturating cast),
    both ends reached, and unsaturated values still round to nearest."""
    inp = small(mode, T=12, N=1, skip_frac=0.0)
    inp["quant_scale_ckv"] = inp["quant_scale_ckv"] * 20
    if inp.get("quant_scale_ckr") is not None:
        inp["quant_scale_ckr"] = inp["quant_scale_ckr"] * 20
    before = clone_inputs(inp)
    out = run(inp)
    _, slots = written(before)
    rows = cache_rows(inp["kv_cache"], slots)
    assert (rows == -128).any() and (rows == 127).any()
    check_against_hf(inp, before, out)


def test_full_c8_zero_query_row_is_finite():
    """A head whose q_N row is all zero: dequant_scale_q_nope 0, query 0, query_rope finite (÷1)."""
    inp = small("a8w8_c8", T=3, N=2)
    inp["weight_uk"] = inp["weight_uk"].clone()
    inp["weight_uk"][1] = 0
    q, qr, s = run(inp)
    assert (q[:, 1] == 0).all() and (s[:, 1] == 0).all() and torch.isfinite(qr.float()).all()
    assert (s[:, 0] > 0).all()


# ----------------------------------------------------------------------------------------------
# argument checks
# ----------------------------------------------------------------------------------------------
BAD = [
    ("bf16", lambda d: d.update(cache_mode="PA_NZ"), ValueError, r"cache_mode 'PA_NZ' is not supported.*PA_BSND"),
    ("bf16", lambda d: d.update(cache_index=d["cache_index"].int()), TypeError, "cache_index must have dtype"),
    ("bf16", lambda d: d.update(weight_dq=d["weight_dq"][:-1]), ValueError, "weight_dq must have shape"),
    ("bf16", lambda d: d.update(weight_uq_qr=d["weight_uq_qr"][:, :-2]), ValueError, "weight_uq_qr must have shape"),
    # a wrong weight_dq width shows as a weight_uq_qr mismatch: the message says where Hcq comes from
    ("bf16", lambda d: d.update(weight_dq=d["weight_dq"][:, :-8]), ValueError, "is weight_dq's width"),
    # a token_x of the wrong width shows as a weight mismatch: the message says He comes from token_x
    ("bf16", lambda d: d.update(token_x=d["token_x"][:, :-1]), ValueError, r"weight_dq must have shape \[63, \*\] \(He = token_x"),
    ("bf16", lambda d: d.update(rope_sin=d["rope_sin"][:-1]), ValueError, "rope_sin must have shape"),
    ("bf16", lambda d: d.update(kr_cache=d["kr_cache"][:-1]), ValueError, "kr_cache must have shape"),
    ("bf16", lambda d: d.update(kv_cache=d["kv_cache"].squeeze(2)), ValueError, "kv_cache must have 4 dimensions"),
    ("bf16", lambda d: d.update(weight_dq=d["weight_dq"].half()), TypeError, "weight_dq must have dtype"),
    ("bf16", lambda d: d.update(weight_dq=d["weight_dq"].to(torch.int8)), TypeError, "weight_dq must be"),
    ("bf16", lambda d: d.update(smooth_scales_cq=torch.ones(96)), ValueError, "smooth_scales_cq must be None"),
    ("bf16", lambda d: d.update(quant_scale_ckv=torch.ones(512)), ValueError, "quant_scale_ckv must be None"),
    ("bf16", lambda d: d.update(rmsnorm_epsilon_cq=-1.0), ValueError, "rmsnorm_epsilon_cq"),
    ("partial", lambda d: d.update(dequant_scale_w_uq_qr=None), ValueError, "dequant_scale_w_uq_qr is required"),
    ("partial", lambda d: d.update(dequant_scale_w_uq_qr=d["dequant_scale_w_uq_qr"][:, :-1]), ValueError,
     "dequant_scale_w_uq_qr must have shape"),
    ("partial", lambda d: d.update(dequant_scale_w_uq_qr=d["dequant_scale_w_uq_qr"].double()), TypeError,
     "dequant_scale_w_uq_qr must have dtype"),
    ("a8w8", lambda d: d.update(dequant_scale_x=None), ValueError, "dequant_scale_x .* is required"),
    ("a8w8", lambda d: d.update(dequant_scale_x=d["dequant_scale_x"][:-1]), ValueError, "dequant_scale_x must have shape"),
    ("a8w8", lambda d: d.update(weight_dkv_kr=d["weight_dkv_kr"].bfloat16()), TypeError, "weight_dkv_kr must be int8"),
    ("a8w8", lambda d: d.update(dequant_scale_w_dq=None), ValueError, "dequant_scale_w_dq is required"),
    ("partial_c8", lambda d: d.update(quant_scale_ckr=None), ValueError, "quant_scale_ckr is required"),
    ("partial_c8", lambda d: d.update(kr_cache=d["kr_cache"].bfloat16()), TypeError, "kr_cache must be int8"),
    ("a8w8_c8", lambda d: d.update(quant_scale_ckv=torch.ones(1, 512)), ValueError, "quant_scale_ckv must have shape"),
    ("a8w8_c8", lambda d: d.update(quant_scale_ckr=torch.ones(64)), ValueError, "quant_scale_ckr must be None"),
]


@pytest.mark.parametrize("mode,mutate,exc,match", BAD, ids=[f"{b[0]}-{b[3][:28]}" for b in BAD])
def test_bad_arguments_raise_clearly(mode, mutate, exc, match):
    inp = small(mode, T=4)
    mutate(inp)
    before = {k: clone_inputs(inp)[k] for k in ("kv_cache", "kr_cache")}
    with pytest.raises(exc, match=match):
        M.mla_prolog(**inp)
    assert torch.equal(bits(inp["kv_cache"]), bits(before["kv_cache"]))


@pytest.mark.parametrize("mode,mutate,exc,match", BAD, ids=[f"{b[0]}-{b[3][:28]}" for b in BAD])
def test_bad_arguments_raise_after_a_good_call(mode, mutate, exc, match):
    # the eager path skips the static checks of an argument set that passed before (ops/mla_prolog._STATIC_OK):
    # a good call first, then each bad variant must still raise, before anything is written
    good = small(mode, T=4)
    with ops.backend("reference"):
        M.mla_prolog(**clone_inputs(good))
    bad = clone_inputs(good)
    mutate(bad)
    before = bad["kv_cache"].clone()
    for _ in range(2):                      # a failed check is never remembered
        with pytest.raises(exc, match=match):
            M.mla_prolog(**bad)
    assert torch.equal(bits(bad["kv_cache"]), bits(before))


def test_static_checks_memoised_on_dtype_shape_device(monkeypatch):
    calls = []
    real = M._check_static
    monkeypatch.setattr(M, "_check_static", lambda *a, **k: calls.append(1) or real(*a, **k))
    M._STATIC_OK.clear()
    with ops.backend("reference"):
        M.mla_prolog(**small("bf16", T=4))
        M.mla_prolog(**small("bf16", T=4, seed=1))          # same metadata, new data: not re-checked
        assert len(calls) == 1
        M.mla_prolog(**small("bf16", T=5))                  # another shape
        M.mla_prolog(**dict(small("bf16", T=4), rmsnorm_epsilon_cq=1e-3))   # another scalar
        assert len(calls) == 3
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as fm:
        fake = fm.from_tensor(torch.zeros(2))
    assert M._static_key((fake,), ()) is None               # traced calls are always checked
    assert M._static_key(([1, 2],), ()) is None              # a non-tensor argument: checked (and rejected)
    assert M._static_key((), ([1e-6],)) is None              # an unhashable scalar too


@pytest.mark.parametrize("bad", [dict(rmsnorm_epsilon_cq=[1e-6]), dict(rmsnorm_epsilon_ckv={"eps": 1}),
                                 dict(cache_mode=["PA_BSND"])])
def test_unhashable_scalars_get_the_clear_error(bad):
    # review finding: the static-check memo hashed the scalars first, so these raised "unhashable type: 'list'"
    err = ValueError if "cache_mode" in bad else TypeError       # a non-number epsilon is a type error
    with pytest.raises(err, match=f"{next(iter(bad))}"):
        M.mla_prolog(**dict(small("bf16", T=4), **bad))


# ----------------------------------------------------------------------------------------------
# registration: opcheck, torch.compile, FLOP formula, spec
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["bf16", "partial_c8", "a8w8_c8"])
def test_R1_opcheck(mode):
    inp = small(mode, T=4, N=2)
    args = [inp.pop(k) for k in ("token_x", "weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr",
                                 "rmsnorm_gamma_cq", "rmsnorm_gamma_ckv", "rope_sin", "rope_cos", "kv_cache", "kr_cache")]
    with ops.backend("reference"):
        torch.library.opcheck(torch.ops.ds.mla_prolog.default, args, inp)


def test_R1_opcheck_defaults_and_zero_tokens():
    inp = small("bf16", T=0, N=1)
    args = [inp.pop(k) for k in ("token_x", "weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr",
                                 "rmsnorm_gamma_cq", "rmsnorm_gamma_ckv", "rope_sin", "rope_cos", "kv_cache", "kr_cache")]
    with ops.backend("reference"):
        torch.library.opcheck(torch.ops.ds.mla_prolog.default, args, {"cache_index": inp["cache_index"]})


@pytest.mark.parametrize("via", ["torch.ops", "DsOp"])
@pytest.mark.parametrize("mode", ["bf16", "a8w8_c8"])
def test_R2_torch_compile_fullgraph(mode, via):
    inp = small(mode, T=5, N=2)
    eager_in, comp_in = clone_inputs(inp), clone_inputs(inp)
    ref = run(eager_in)
    fn = torch.ops.ds.mla_prolog if via == "torch.ops" else M.mla_prolog

    def f(d):
        q, qr, s = fn(**d)
        return q, qr * 1, s                      # something after the op, in the same graph

    torch._dynamo.reset()
    with ops.backend("reference"):
        out = torch.compile(f, fullgraph=True, backend="aot_eager")(comp_in)
    for u, v in zip(out, ref):
        assert torch.equal(bits(u), bits(v))
    assert torch.equal(bits(comp_in["kv_cache"]), bits(eager_in["kv_cache"]))   # the mutation happened
    assert torch.equal(bits(comp_in["kr_cache"]), bits(eager_in["kr_cache"]))
    assert not torch.equal(bits(comp_in["kv_cache"]), bits(inp["kv_cache"]))


def test_flop_formula_registered():
    from torch.utils.flop_counter import FlopCounterMode
    inp = small("bf16", T=3, N=2)
    with FlopCounterMode(display=False) as fc, ops.backend("reference"):
        torch.ops.ds.mla_prolog(**inp)
    T, He, Hcq, N, D, Hckv, Dr = 3, 64, 96, 2, 128, 512, 64
    want = 2 * T * (He * Hcq + Hcq * N * (D + Dr) + N * D * Hckv + He * (Hckv + Dr))
    assert M.flops(**inp) == want
    assert fc.get_total_flops() == want


def test_bytes_moved_counts():
    inp = small("bf16", T=3, N=2)
    e = 2
    T, He, Hcq, N, D, Hckv, Dr = 3, 64, 96, 2, 128, 512, 64
    w = (He * Hcq + Hcq * N * (D + Dr) + N * D * Hckv + He * (Hckv + Dr) + Hcq + Hckv) * e
    act = (T * He + 2 * T * Dr) * e + T * 8
    out = (T * N * (Hckv + Dr)) * e + T * (Hckv + Dr) * e
    assert M.bytes_moved(**inp) == w + act + out


def test_spec_shapes_and_deepseek_shape_runs():
    s = M.SPEC.shapes
    for T in (1, 32, 128):
        for N in (128, 64, 32, 16, 8):
            for mode in ("bf16", "a8w8"):
                assert s[f"t{T}_n{N}_{mode}"]["He"] == 7168 and s[f"t{T}_n{N}_{mode}"]["Hcq"] == 1536
    assert ops.SPECS["mla_prolog"] is M.SPEC
    for name in ("t1_n8_bf16", "t1_n8_a8w8"):
        inp = M.make_inputs(s[name], dtype=torch.bfloat16, generator=torch.Generator().manual_seed(1))
        q, qr, _ = run(inp)
        assert q.shape == (1, 8, 512) and torch.isfinite(q.float()).all() and torch.isfinite(qr.float()).all()
        assert 0.2 < q.float().std().item() < 5 and 0.2 < qr.float().std().item() < 5     # activations O(1)


def test_make_inputs_fresh_and_valid():
    a = small("a8w8_c8", T=16, N=2, seed=1)
    b = small("a8w8_c8", T=16, N=2, seed=2)
    assert not torch.equal(a["token_x"], b["token_x"])
    idx = a["cache_index"]
    v = idx[idx >= 0]
    assert len(v.unique()) == len(v) and (idx == -1).any() or len(idx) < 8
    M._check(**a)


def test_make_inputs_refuses_an_odd_rope_dim():
    """A fuzzing finding: an odd Dr failed in a raw reshape instead of naming Dr."""
    with pytest.raises(ValueError, match="Dr .* must be even"):
        M.make_inputs(dict(T=2, N=1, He=16, Hcq=16, Hckv=16, D=16, Dr=5, block_size=4))
