"""The Triton ``ds::amla`` kernel on CUDA (``pytest -m gpu``): the correctness matrix, cases A1–A7, AMLA numerics,
NaN / inf logits, determinism, CUDA-graph replay and torch.compile.

Matrix: bf16 and fp16 × N ∈ {8, 16, 32, 64, 128} × S_q ∈ {1, 2, 4} (causal) × block_size ∈ {16, 64, 128}, each a
batch of 8 whose seq_lens run from 0 to 32K mixed, random page order, NaN in every unused slot and page, unused
block_table entries −1 or a huge id, outputs and split partials poisoned (NaN). out against the fp32 reference
(reference/amla.py) with the tolerance table; lse against an fp64 logsumexp of the logical keys (the fp32
reference is itself up to ~7e-6 off at 32K keys, near the 1e-5 lse tolerance). At block_size 64 also the forced
single split, the multiply rescale and CANN's AMLA (c rounded, n re-chosen every block). Plus a seeded random
sweep of 40 shapes.
"""
from __future__ import annotations

import random

import pytest
import torch

import ops
import ops.triton.amla as tri
from reference import amla as ref
from tests.strategies import paged_amla_inputs
from tests.tolerances import assert_close, poisoned_empty

pytestmark = pytest.mark.gpu

SCALE = 0.1353
CANN = dict(round_c=True, lazy=-1.0)      # CANN's AMLA: c rounded + compensation, n re-chosen every block
VARIANTS = {"amla": {}, "amla-1split": dict(num_splits=1), "multiply": dict(rescale="multiply"), "amla-CANN": CANN}
LMAX = 32768


@pytest.fixture(autouse=True)
def _poisoned_outputs(monkeypatch):
    """Every output / split partial the launcher allocates starts as NaN (what is not written shows)."""
    monkeypatch.setattr(torch, "empty", poisoned_empty)


@pytest.fixture
def dev():
    return torch.device("cuda")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def lse_fp64(args, keys, causal=True):
    """lse [B, S_q, N] in fp64 from the logical keys ``keys`` = (c_kv, k_rope) [B, Lmax, ·] (the inputs' exact
    values): the "fp64 where cheap" reference for lse."""
    q_nope, q_rope, _, _, _, sl = args
    c_kv, k_rope = keys
    B, S_q, N, _ = q_nope.shape
    out = torch.full((B, S_q, N), float("-inf"), dtype=torch.float64, device=q_nope.device)
    for b, L in enumerate(sl.tolist()):
        if L <= 0:
            continue
        q = torch.cat([q_nope[b], q_rope[b]], -1).double()
        k = torch.cat([c_kv[b, :L], k_rope[b, :L]], -1).double()
        s = SCALE * torch.einsum("snd,ld->snl", q, k)
        if causal:   # token j sees keys [0, L − S_q + j]
            last = L - S_q + torch.arange(S_q, device=q.device)
            s = s.masked_fill(torch.arange(L, device=q.device)[None, None, :] > last[:, None, None], float("-inf"))
        out[b] = torch.logsumexp(s, -1)
    return out


def compare(args, keys, causal=True, **kw):
    """out against the fp32 reference (the tolerance table's bf16 / fp16 row), lse against fp64 ("lse" row), −inf
    rows where the reference has them. Returns (out, lse)."""
    out, lse = tri.amla_variant(*args, SCALE, causal, **kw)
    r_out, r_lse = ref.amla(*args, SCALE, causal)
    assert_close(out, r_out, "fp16" if args[0].dtype == torch.float16 else "bf16")
    assert_close(lse, lse_fp64(args, keys, causal), "lse", name="lse (vs fp64)")
    assert torch.equal(torch.isneginf(lse), torch.isneginf(r_lse))
    return out, lse


def mixed_lens(B, rng, Lmax):
    base = [0, 1, 2, rng.randint(3, 64), rng.randint(65, 2000), rng.randint(2000, 9000), Lmax,
            Lmax - rng.randint(1, 200)]
    rng.shuffle(base)
    return [min(x, Lmax) for x in base[:B]]


def _matrix():
    for dt in (torch.bfloat16, torch.float16):
        for N in (8, 16, 32, 64, 128):
            for S_q in (1, 2, 4):
                for bs in (16, 64, 128):
                    for v in (VARIANTS if bs == 64 else ("amla",)):
                        yield pytest.param(dt, N, S_q, bs, v, id=f"{str(dt)[6:]}-N{N}-Sq{S_q}-bs{bs}-{v}")


@pytest.mark.parametrize("dt,N,S_q,bs,variant", list(_matrix()))
def test_matrix(dt, N, S_q, bs, variant, dev):
    rng = random.Random(f"{dt}-{N}-{S_q}-{bs}")
    lens = mixed_lens(8, rng, LMAX)
    args, keys = paged_amla_inputs(8, S_q, N, lens, bs, dt, dev, _gen(N * 1000 + S_q * 10 + bs),
                                   unused=-1 if (N + bs) % 2 == 0 else 2**31 - 1)
    compare(args, keys, **VARIANTS[variant])


DT = torch.bfloat16


def test_A1_zero_length_rows_all_zero_batch_empty_cache(dev):
    g = _gen(1)
    args, _ = paged_amla_inputs(3, 2, 16, [0, 0, 0], 64, DT, dev, g)
    out, lse = tri.amla_variant(*args, SCALE, True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
    e = (args[0], args[1], torch.zeros(0, 64, 1, 512, dtype=DT, device=dev),
         torch.zeros(0, 64, 1, 64, dtype=DT, device=dev), torch.zeros(3, 0, dtype=torch.int32, device=dev),
         torch.zeros(3, dtype=torch.int32, device=dev))
    out, lse = tri.amla_variant(*e, SCALE, True)
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
    args, keys = paged_amla_inputs(4, 2, 16, [0, 500, 0, 1], 64, DT, dev, g)
    compare(args, keys)


def test_A2_nan_in_unused_slots_and_pages_changes_nothing(dev):
    args, keys = paged_amla_inputs(3, 2, 16, [37, 5000, 64], 64, DT, dev, _gen(2))
    clean = list(args)
    clean[2], clean[3] = args[2].nan_to_num(0.0), args[3].nan_to_num(0.0)
    for rescale in ("amla", "multiply"):
        o1, l1 = tri.amla_variant(*args, SCALE, True, rescale=rescale)
        o2, l2 = tri.amla_variant(*clean, SCALE, True, rescale=rescale)
        assert torch.equal(o1, o2) and torch.equal(l1, l2), rescale
    compare(args, keys)


def test_A3_page_order_and_unused_entries_are_bit_identical(dev):
    lens = [3000, 77]
    args1, (ck, kr) = paged_amla_inputs(2, 2, 32, lens, 64, DT, dev, _gen(5), unused=-1)
    args2, _ = paged_amla_inputs(2, 2, 32, lens, 64, DT, dev, _gen(6), unused=2**31 - 1, c_kv=ck, k_rope=kr,
                                 q=(args1[0], args1[1]))
    assert not torch.equal(args1[4], args2[4])
    o1, l1 = tri.amla_variant(*args1, SCALE, True)
    o2, l2 = tri.amla_variant(*args2, SCALE, True)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


@pytest.mark.parametrize("num_splits", [None, 8, 64])
def test_A5_short_sequences_many_splits(num_splits, dev):
    args, keys = paged_amla_inputs(4, 1, 16, [1, 3, 7, 20], 16, DT, dev, _gen(7), extra_blocks=500)
    _, lse = compare(args, keys, num_splits=num_splits)
    assert torch.isfinite(lse).all()


@pytest.mark.parametrize("L", [2, 3, 64, 65])
def test_A6_mtp_causal(L, dev):
    args, keys = paged_amla_inputs(2, 2, 16, [L, L], 64, DT, dev, _gen(L))
    compare(args, keys)


def test_A7_block_sizes_agree(dev):
    lens = [5000, 129, 64]
    ck = kr = q = None
    for bs in (16, 64, 128):          # the same logical keys and queries paged with each block size
        args, (ck, kr) = paged_amla_inputs(3, 2, 16, lens, bs, DT, dev, _gen(bs), c_kv=ck, k_rope=kr, q=q)
        q = (args[0], args[1])
        compare(args, (ck, kr))


@pytest.mark.parametrize("variant", ["amla", "amla-CANN", "multiply"])
def test_exact_zero_columns_and_logits_climbing_over_170(variant, dev):
    L = 4096
    g = _gen(8)
    args, (ck, _) = paged_amla_inputs(1, 2, 16, [L], 64, DT, dev, g)
    ck = ck.clone()
    ck[0, :L // 2, :16] = 0
    kr = ((torch.arange(L, device=dev)[:, None].float() - (L - 1)) * (0.25 * 79 / (L - 1)) *
          torch.ones(64, device=dev)).to(DT)[None]
    args, keys = paged_amla_inputs(1, 2, 16, [L], 64, DT, dev, g, c_kv=ck, k_rope=kr,
                                   q=(args[0], torch.ones_like(args[1])))
    out, _ = compare(args, keys, **dict(VARIANTS[variant], num_splits=1))
    assert torch.isfinite(out).all() and (out[0, :, :, :16] != 0).all()


def test_nan_and_inf_logits_give_nan_rows_like_the_reference(dev, monkeypatch):
    """A NaN query element and a +inf key element: NaN rows exactly where the reference has them (never an empty
    row, never a finite value), other rows within tolerance; outputs pre-filled with 777, not NaN, so a NaN seen
    is computed."""
    args, _ = paged_amla_inputs(2, 2, 16, [3000, 700], 64, DT, dev, _gen(9))
    q_nope, kv, bt = args[0].clone(), args[2].clone(), args[4]
    q_nope[0, 1, 3, 5] = float("nan")                       # request 0, token 1, head 3
    k = 490                                                 # request 1, key k: c_kv[..., 7] = +inf
    kv[int(bt[1, k // 64]), k % 64, 0, 7] = float("inf")
    args = (q_nope, args[1], kv) + tuple(args[3:])
    r_out, r_lse = ref.amla(*args, SCALE, True)
    nan_rows = torch.isnan(r_lse)
    assert nan_rows[0, 1, 3] and nan_rows[1].any() and not nan_rows.all()
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(777.0))
    for kw in ({}, CANN, dict(rescale="multiply")):
        for ns in (None, 1, 4):
            out, lse = tri.amla_variant(*args, SCALE, True, num_splits=ns, **kw)
            assert torch.equal(torch.isnan(lse), nan_rows), (kw, ns)
            assert torch.equal(torch.isnan(out), torch.isnan(r_out)), (kw, ns)
            ok = ~nan_rows
            assert_close(out[ok].nan_to_num(0.0), r_out[ok].nan_to_num(0.0), "bf16")


def test_determinism(dev):
    args, _ = paged_amla_inputs(4, 2, 128, [9000, 0, 300, 20000], 64, DT, dev, _gen(10))
    o1, l1 = tri.amla_variant(*args, SCALE, True)
    o2, l2 = tri.amla_variant(*args, SCALE, True)
    assert torch.equal(o1, o2) and torch.equal(l1, l2)


def test_cuda_graph_replay_with_new_seq_lens(dev):
    args, keys = paged_amla_inputs(4, 2, 32, [4000, 100, 0, 32000], 64, DT, dev, _gen(11))
    static = list(args)
    tri.amla_variant(*static, SCALE, True)                  # compile outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = tri.amla_variant(*static, SCALE, True)
    static[5].copy_(torch.tensor([17, 100, 0, 31000], dtype=torch.int32, device=dev))   # within each request's pages
    g.replay()
    torch.cuda.synchronize()
    r_out, _ = ref.amla(*static, SCALE, True)
    assert_close(out, r_out, "bf16")
    assert_close(lse, lse_fp64(static, keys), "lse", name="lse (vs fp64)")


def test_torch_compile_fullgraph_through_torch_ops(dev):
    args, keys = paged_amla_inputs(2, 2, 16, [3000, 5], 64, DT, dev, _gen(12))
    with ops.backend("triton"):
        out, lse = torch.compile(lambda *xs: torch.ops.ds.amla(*xs, SCALE, True), fullgraph=True)(*args)
    r_out, _ = ref.amla(*args, SCALE, True)
    assert_close(out, r_out, "bf16")
    assert_close(lse, lse_fp64(args, keys), "lse", name="lse (vs fp64)")


def _sweep():
    rng = random.Random(99)
    for i in range(40):
        B = rng.randint(1, 6)
        S_q = rng.choice([1, 2, 3, 4])
        N = rng.choice([1, 3, 8, 16, 24, 32, 64, 100, 128])
        bs = rng.choice([16, 64, 128])
        lens = [rng.choice([0, 1, rng.randint(0, 80), rng.randint(0, 9000)]) for _ in range(B)]
        variant = rng.choice(["amla", "amla", "multiply", "amla-CANN"])
        ns = rng.choice([None, None, 1, rng.randint(2, 40)])
        dt = rng.choice([torch.bfloat16, torch.float16])
        yield pytest.param(i, B, S_q, N, bs, lens, variant, ns, dt,
                           id=f"{i}-{str(dt)[6:]}-B{B}-Sq{S_q}-N{N}-bs{bs}-{variant}-ns{ns}")


@pytest.mark.parametrize("i,B,S_q,N,bs,lens,variant,ns,dt", list(_sweep()))
def test_random_sweep(i, B, S_q, N, bs, lens, variant, ns, dt, dev):
    args, keys = paged_amla_inputs(B, S_q, N, lens, bs, dt, dev, _gen(1000 + i))
    compare(args, keys, **dict(VARIANTS[variant], num_splits=ns))
