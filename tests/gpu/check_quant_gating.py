#!/usr/bin/env python3
"""GPU correctness check of the Triton quant and gating kernels against the references (H200, bf16).

    python3 tests/gpu/check_quant_gating.py [--out tests/gpu/results/check_quant_gating.txt] [--quick]

Covers: dynamic_quant / rms_norm_dynamic_quant / quant_matmul / moe_gating_top_k with bf16 (and fp16,
fp32) inputs; field cases Q1–Q6 and G1–G6 (shared/cases.md); M ∈ {0,1,2,15,16,17,64,256,4096}; the
DeepSeek-V3 GEMM shapes and their TP splits (K or N ∈ {576,1152,1536,2048,2112,7168,16384,18432,24576});
weights K-major and row-major; the M = 1 streaming GEMV bucket (qkv_a, moe_gate: plan + bit-exact);
CUDA-graph capture + replay; torch.compile(fullgraph=True) through
``torch.ops.ds``. Verdicts:

* int8 outputs (x_int8) exact vs the reference run on the same GPU; scales bit-identical for
  dynamic_quant; for rms_norm_dynamic_quant ±1 LSB only at near-ties (|y/scale| within 1e-3 of .5,
  caused by the Σx² reduction order) — the count is printed;
* quant_matmul bf16 output: DESIGN bf16 tolerance (cos diff ≤ 1e-5, max err ≤ 2e-2·max|ref|) and the
  fraction of bit-identical elements is printed (the fp32 epilogue may contract a*b+c into an FMA);
* gating: expert ids exact, except swaps between experts whose biased scores tie to ~1 ulp (torch's
  sigmoid and Triton's exp differ by an ulp) — counted and printed; weights fp32 / bf16 tolerance.

Exit status 1 if any check fails. Output goes to stdout and to --out.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
if "--smoke" in sys.argv:  # must precede the first @triton.jit
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

try:  # the whole package; fall back to the kernel modules alone if another op is mid-edit
    import ops  # noqa: F401
    HAVE_OPS = True
except Exception as e:  # noqa: BLE001
    print(f"[warn] import ops failed ({type(e).__name__}: {e}); testing kernel modules directly")
    for name in ("ops", "ops.triton"):
        sys.modules.pop(name, None)
    pkg = types.ModuleType("ops")
    pkg.__path__ = [os.path.join(REPO, "ops")]
    sys.modules["ops"] = pkg
    HAVE_OPS = False

from ops.triton import moe_gating as TG  # noqa: E402
from ops.triton import quant as TQ  # noqa: E402
from reference import moe_gating as RG  # noqa: E402
from reference import quant as RQ  # noqa: E402

LINES: list[str] = []
FAILS: list[str] = []
_OUT_FILE: list = []  # the --out file, written line by line (a run cut short keeps what it printed)


def log(msg: str = "") -> None:
    print(msg, flush=True)
    LINES.append(msg)
    if _OUT_FILE:
        _OUT_FILE[0].write(msg + "\n")
        _OUT_FILE[0].flush()


def check(name: str, ok: bool, detail: str = "") -> None:
    log(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}")
    if not ok:
        FAILS.append(name)


def cos_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """DESIGN's cosine difference in fp64 (``ops.tolerances.cos_diff``)."""
    from ops.tolerances import cos_diff as _cd
    return _cd(a.double(), b.double())


def bf16_close(out, ref) -> tuple[bool, str]:
    if out.numel() == 0:
        return out.shape == ref.shape, "empty"
    if torch.isnan(out).any():
        return False, "NaN in output"
    cd = cos_diff(out, ref)
    err = (out.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    same = (out == ref).float().mean().item()
    return cd <= 1e-5 and err <= 2e-2 * scale + 1e-30, f"cos_diff={cd:.1e} maxerr/max={err / max(scale, 1e-30):.1e} bit-identical={same:.4f}"


def poison_like_empty():
    """Make torch.empty return NaN / INT_MIN filled tensors so unwritten outputs are caught."""
    from tests.tolerances import poisoned_empty
    orig = torch.empty
    torch.empty = poisoned_empty
    return orig


# ----------------------------------------------------------------------------------------------
def check_dynamic_quant(dev, Ms, gen):
    log("\n## dynamic_quant")
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for K in (DQ_KS if dtype == torch.bfloat16 else DQ_KS[1::3]):
            bad = []
            for M in Ms:
                for smooth in (False, True):
                    x = (3 * torch.randn(M, K, generator=gen, device=dev)).to(dtype)
                    s = (0.5 + torch.rand(K, generator=gen, device=dev)) if smooth else None
                    q, sc = TQ.dynamic_quant(x, smooth_scales=s)
                    # reference on the CPU: on CUDA, torch's `amax / 127` (division by a Python scalar)
                    # multiplies by the reciprocal, 1 ulp off the IEEE quotient the spec names
                    rq, rs = RQ.dynamic_quant(x.cpu(), smooth_scales=s.cpu() if s is not None else None)
                    q, sc = q.cpu(), sc.cpu()
                    if not (torch.equal(q, rq) and torch.equal(sc, rs)):
                        d = (q.int() - rq.int()).abs().max().item() if q.numel() else 0
                        bad.append(f"M={M} smooth={smooth} maxLSB={d}")
            check(f"dynamic_quant {str(dtype)[6:]} K={K} M∈{Ms} exact", not bad, "; ".join(bad[:4]))
    # Q3 Q4 Q5 Q6 + NaN/inf rows in bf16
    s = 2.0 ** -4
    x = torch.tensor([[0.5, 1.5, -2.5, 2.5, -0.5, 3.5, -126.5, 127.0]], device=dev).mul(s).to(torch.bfloat16)
    q, sc = TQ.dynamic_quant(x)
    check("Q4 ties half-even bf16", q[0].tolist() == [0, 2, -2, 2, 0, 4, -126, 127] and sc.item() == s, str(q[0].tolist()))
    x = torch.randn(4, 7168, generator=gen, device=dev).to(torch.bfloat16)
    x[1] = 0
    x[2, 9] = -50.0
    x[3, 4] = float("nan")
    q, sc = TQ.dynamic_quant(x)
    check("Q3 zero row", sc[1].item() == 0 and (q[1] == 0).all().item())
    check("Q5 negative absmax → −127", q[2, 9].item() == -127 and q.min().item() >= -127)
    check("NaN row → scale NaN, q 0", torch.isnan(sc[3]).item() and (q[3] == 0).all().item())
    q, sc = TQ.dynamic_quant(torch.empty(0, 7168, device=dev, dtype=torch.bfloat16))
    check("Q6 zero tokens", q.shape == (0, 7168) and sc.shape == (0,))


def check_rms_norm_dynamic_quant(dev, Ms, gen):
    log("\n## rms_norm_dynamic_quant")
    # the interpreter truncates fp32 -> bf16 (residual_out would differ by an ulp): fp16 only under --smoke
    for dtype in (torch.bfloat16, torch.float16) if dev.type == "cuda" else (torch.float16,):
        for H in (RMS_HS if dtype == torch.bfloat16 else RMS_HS[-1:]):
            tie_diffs, total, msgs = 0, 0, []
            for M in Ms:
                for res, smooth in ((True, True), (False, False), (True, False)):
                    x = torch.randn(M, H, generator=gen, device=dev).to(dtype)
                    r = torch.randn(M, H, generator=gen, device=dev).to(dtype) if res else None
                    g = (0.5 + torch.rand(H, generator=gen, device=dev)).to(dtype)
                    s = (0.5 + torch.rand(H, generator=gen, device=dev)) if smooth else None
                    q, sc, ro = TQ.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r, smooth_scales=s)
                    rq, rs, rro = (t.to(dev) for t in RQ.rms_norm_dynamic_quant(
                        x.cpu(), g.cpu(), epsilon=1e-6, residual=r.cpu() if r is not None else None,
                        smooth_scales=s.cpu() if s is not None else None))  # CPU: IEEE scale (see above)
                    total += q.numel()
                    if not torch.equal(ro, rro):
                        msgs.append(f"M={M} residual_out differs")
                    if M and ((sc - rs).abs() > 2e-6 * rs.abs()).any():
                        msgs.append(f"M={M} scale rel err {((sc - rs).abs() / rs.abs()).max().item():.1e}")
                    d = (q.int() - rq.int()).abs()
                    if d.numel() and d.max() > 1:
                        msgs.append(f"M={M} {d.max().item()} LSB")
                    bad = d > 0
                    if bad.any():
                        sm = x.float() + (r.float() if r is not None else 0)
                        y = RQ.rms_norm(sm, g, 1e-6) * (s.float() if s is not None else 1)
                        t = (y.double() / rs.double()[:, None])[bad].abs()
                        if ((t - t.floor() - 0.5).abs() > 1e-3).any():
                            msgs.append(f"M={M} a 1-LSB difference away from a tie")
                        tie_diffs += int(bad.sum())
            check(f"rms_norm_dynamic_quant {str(dtype)[6:]} H={H}", not msgs,
                  f"{tie_diffs}/{total} elements ±1 LSB at near-ties; " + "; ".join(msgs[:4]))


DQ_KS = (576, 1368, 1536, 2048, 7168, 16384, 18432)
RMS_HS = (512, 1536, 7168, 16384)

# DeepSeek-V3 (K, N) per layer and TP splits
QMM_SHAPES = [
    ("qkv_a", 7168, 2112), ("kv_a", 7168, 576), ("q_b", 1536, 24576), ("q_b_tp8", 1536, 3072),
    ("o_proj", 16384, 7168), ("o_proj_tp8", 2048, 7168), ("o_proj_tp16", 1024, 7168),
    ("moe_gate", 7168, 2048), ("moe_gate_up", 7168, 4096), ("moe_down", 2048, 7168),
    ("dense_gate", 7168, 18432), ("dense_down", 18432, 7168), ("dense_gate_tp16", 7168, 1152),
    ("dense_down_tp16", 1152, 7168), ("Q2_k1368", 1368, 2112),
]


def check_quant_matmul(dev, Ms, gen):
    od = torch.float16 if dev.type != "cuda" else torch.bfloat16   # the interpreter truncates fp32 -> bf16
    log(f"\n## quant_matmul ({str(od)[6:]} out, fp32 bias)")
    for name, K, N in QMM_SHAPES:
        w = torch.randint(-127, 128, (K, N), generator=gen, device=dev, dtype=torch.int8)
        wk = RQ.pack_weight(w, "cuda")
        ws = (0.5 + torch.rand(N, generator=gen, device=dev)) / (127.0 * K ** 0.5)
        bias = torch.randn(N, generator=gen, device=dev)
        msgs, worst = [], ""
        for M in Ms:
            x = torch.randint(-127, 128, (M, K), generator=gen, device=dev, dtype=torch.int8)
            xs = (0.5 + torch.rand(M, generator=gen, device=dev)) / 127.0
            ref = RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=od)
            layouts = [("kmajor", wk)] + ([("rowmajor", w)] if M in (1, 17, 256) else [])
            for lay, ww in layouts:
                out = TQ.quant_matmul(x, ww, ws, xs, bias=bias, out_dtype=od)
                ok, det = bf16_close(out, ref)
                plan = TQ.plan_quant_matmul(M, N, K, dev) if M else {}
                if not ok:
                    msgs.append(f"M={M} {lay} split={plan.get('SPLIT_K')}: {det}")
                elif M == max(Ms):
                    worst = det
        check(f"quant_matmul {name} K={K} N={N} M∈{Ms}", not msgs, "; ".join(msgs[:3]) or worst)
    # out dtypes, no bias
    x = torch.randint(-127, 128, (33, 7168), generator=gen, device=dev, dtype=torch.int8)
    w = RQ.pack_weight(torch.randint(-127, 128, (7168, 2112), generator=gen, device=dev, dtype=torch.int8))
    ws, xs = torch.rand(2112, device=dev) * 1e-4, torch.rand(33, device=dev) * 1e-2
    for od in (torch.float16, torch.float32):
        out = TQ.quant_matmul(x, w, ws, xs, out_dtype=od)
        ref = RQ.quant_matmul(x, w, ws, xs, out_dtype=od)
        ok, det = bf16_close(out, ref)
        check(f"quant_matmul out_dtype={od}", ok and out.dtype == od, det)
    # exact int32 accumulation at the extremes (K = 18432: 127²·K = 297,271,296)
    K = 18432
    x = torch.full((2, K), 127, dtype=torch.int8, device=dev)
    x[1] = -127
    w = RQ.pack_weight(torch.full((K, 64), -127, dtype=torch.int8, device=dev))
    out = TQ.quant_matmul(x, w, torch.ones(64, device=dev), torch.ones(2, device=dev), out_dtype=torch.float32)
    check("quant_matmul int32 extremes K=18432", out[0].eq(-127 * 127 * K).all().item() and out[1].eq(127 * 127 * K).all().item())


def check_fast_paths(dev, Ms, gen):
    """The CUDA-only paths of the configs: the reciprocal + Markstein quotient (row kernels, both buckets),
    the two-sweep row tiles, and the in-kernel split-K reduction (atomic tile counters)."""
    log("\n## CUDA fast paths (quotient, row tiles, in-kernel split-K)")
    if dev.type != "cuda":
        log("skip (GPU only; tests/test_quant_triton.py covers these paths under the interpreter)")
        return
    K = 7168
    s = 2.0 ** -5
    n = torch.randint(-127, 127, (K,), generator=gen, device=dev).float()
    t = (n + 0.5) * s
    t[0] = 127 * s
    rows = [t, torch.nextafter(t, torch.full_like(t, float("inf"))), torch.nextafter(t, torch.full_like(t, -float("inf"))),
            torch.randn(K, generator=gen, device=dev) * 1e-40, torch.randn(K, generator=gen, device=dev) * 2e-23,
            torch.randn(K, generator=gen, device=dev) * 1e37, torch.zeros(K, device=dev)]
    x = torch.stack(rows)
    x = torch.cat([x, 3 * torch.randn(300, K, generator=gen, device=dev)])     # 307 rows: the large-T bucket too
    for name, cfg in (("default", None), ("single", {"max_block_k": 8192, "block_m": 1, "num_warps": 8, "fast": True}),
                      ("chunked", {"max_block_k": 1024, "block_m": 2, "num_warps": 4, "fast": True})):
        for xx in (x[:7], x):
            q, sc = TQ.dynamic_quant_config(xx, config=cfg)
            rq, rs = RQ.dynamic_quant(xx.cpu())
            ok = torch.equal(q.cpu(), rq) and torch.equal(sc.cpu(), rs)
            check(f"dynamic_quant fast quotient {name} rows={xx.shape[0]} (ties ±1 ulp, subnormal/tiny/huge scales)", ok,
                  "" if ok else f"{int((q.cpu() != rq).sum())} int8 / {int((sc.cpu() != rs).sum())} scales differ")
    g = (0.5 + torch.rand(K, generator=gen, device=dev)).to(torch.bfloat16)
    xb = torch.randn(300, K, generator=gen, device=dev).to(torch.bfloat16)
    rb = torch.randn(300, K, generator=gen, device=dev).to(torch.bfloat16)
    for tiles in ({"max_block_k": 8192, "block_m": 1, "num_warps": 8}, {"max_block_k": 1024, "block_m": 1, "num_warps": 4}):
        a = TQ.rms_norm_dynamic_quant_config(xb, g, epsilon=1e-6, residual=rb, config=dict(tiles, fast=False))
        b = TQ.rms_norm_dynamic_quant_config(xb, g, epsilon=1e-6, residual=rb, config=dict(tiles, fast=True))
        check(f"rms_norm_dynamic_quant fast == div_rn path, tiles {tiles}", all(torch.equal(u, v) for u, v in zip(a, b)))
    for M, K, N in ((1, 7168, 2112), (16, 7168, 2112), (64, 7168, 2112), (128, 7168, 2112), (3, 1536, 1000)):
        x = torch.randint(-127, 128, (M, K), generator=gen, device=dev, dtype=torch.int8)
        w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=gen, device=dev, dtype=torch.int8))
        ws = torch.rand(N, generator=gen, device=dev) * 1e-4
        xs = torch.rand(M, generator=gen, device=dev) * 1e-2
        bias = torch.randn(N, generator=gen, device=dev)
        ref = RQ.quant_matmul(x, w, ws, xs)
        bm = 16 if M <= 16 else (64 if M <= 64 else 128)
        outs = {}
        for red in ("kernel", "atomic"):
            for sk in (3, 4, 7):
                cfg = dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4, split_k=sk, reduce=red)
                outs[(red, sk)] = [TQ.quant_matmul_config(x, w, ws, xs, config=cfg) for _ in range(3)]
        ok = all(torch.equal(o, ref) for v in outs.values() for o in v)
        ob = TQ.quant_matmul(x, w, ws, xs, bias=bias)
        okb = bf16_close(ob, RQ.quant_matmul(x, w, ws, xs, bias=bias))[0]
        check(f"quant_matmul split-K atomic == two-kernel == reference (bit-exact, 3 runs) M={M} K={K} N={N}", ok and okb)
    torch.cuda.synchronize()
    zero = all(int(buf.abs().sum().item()) == 0 for buf, _ in TQ._COUNTERS.values())
    check("split-K counters all back at zero", zero)


# decode GEMMs (M <= 128) of DeepSeek-V3 by the "cuda" bucket they take: q_b K1536 N24576 at M 65..128 takes the
# swap-AB 128x64x128 tile (bucket min_n 8192, max_k 2048), the dense MLP (K 7168) at N >= 8192 the swap bucket after it
DECODE_SHAPES = [("qkv_a", 7168, 2112), ("moe_gate", 7168, 2048), ("q_b", 1536, 24576), ("kv_b", 512, 32768), ("dense_gate", 7168, 18432),
                 ("dense_gate_up", 7168, 36864), ("moe_gate_up", 7168, 4096), ("o_proj", 16384, 7168)]
DECODE_MS = (1, 2, 15, 16, 17, 33, 64, 65, 100, 127, 128)
DECODE_MS_QUICK = (1, 16, 17, 32, 65, 100, 128)   # 17 and 32: the 32-row BN16 tile (session 11)


def check_decode_buckets(dev, Ms, gen):
    """Every decode bucket of the "cuda" table (M <= 128) on the DeepSeek shapes that reach it, M at and inside the
    bucket edges (65 / 100: a partial 128-row tile, rows past M masked): bf16 and fp32 out without bias bit-identical
    to the exact reference (the epilogue is two fp32 multiplies and one cast, nothing to contract), with bias within
    the bf16 tolerance (fp32 out and bias at M 1 and 100 only). Then the swap-AB path (``mma: "swap"``) with split-K
    (atomic with 14 splits, two-kernel) and a GROUP_M 2 split-K tile (the sweep checks its own candidates), and
    the table's plan for q_b at M 65..128. --quick: M ∈ DECODE_MS_QUICK."""
    log("\n## quant_matmul decode buckets (the cuda table) and the swap-AB path")
    smoke = dev.type != "cuda"   # --smoke: the "cuda" table under the interpreter on small analogues (code check)
    shapes = [("q_b_like", 256, 8192), ("dense_like", 2176, 8192), ("qkv_a_like", 512, 96)] if smoke else DECODE_SHAPES
    od0 = torch.float16 if smoke else torch.bfloat16   # the interpreter truncates fp32 -> bf16 (the reference rounds)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False   # the reference's fp32 chunk products must stay exact
    try:
        for M in (65, 100, 128):
            p = TQ.plan_quant_matmul(M, 24576, 1536, dev, backend_key="cuda")
            ok = (p.get("mma") == "swap" and (p["BLOCK_M"], p["BLOCK_N"], p["SPLIT_K"]) == (128, 64, 1)
                  and p.get("mask_m") and p.get("max_k") == 2048)
            check(f"q_b M={M} plan: swap-AB 128x64 one split, rows masked", ok, str({k: p.get(k) for k in (
                "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "SPLIT_K", "mma", "mask_m")}))
        p = TQ.plan_quant_matmul(128, 18432, 7168, dev, backend_key="cuda")
        check("dense_gate M=128 plan: the swap bucket after the q_b one (no max_k)",
              p.get("mma") == "swap" and p.get("max_k") is None and p.get("min_n") == 8192,
              f"{p['BLOCK_M']}x{p['BLOCK_N']}x{p['BLOCK_K']} split {p['SPLIT_K']} mma {p.get('mma', 'dot')}")
        for name, K, N in shapes:
            w = torch.randint(-127, 128, (K, N), generator=gen, device=dev, dtype=torch.int8)
            wk = RQ.pack_weight(w, "cuda")
            ws = (0.5 + torch.rand(N, generator=gen, device=dev)) / (127.0 * K ** 0.5)
            bias = torch.randn(N, generator=gen, device=dev)
            msgs, tiles = [], []
            dms = (1, 100) if smoke else DECODE_MS_QUICK if len(Ms) < 6 else DECODE_MS
            for M in dms:
                x = torch.randint(-127, 128, (M, K), generator=gen, device=dev, dtype=torch.int8)
                xs = (0.5 + torch.rand(M, generator=gen, device=dev)) / 127.0
                p = TQ.plan_quant_matmul(M, N, K, dev, backend_key="cuda")
                tiles.append(f"M{M}:{p['BLOCK_M']}x{p['BLOCK_N']}x{p['BLOCK_K']}/{p['SPLIT_K']}"
                             f"{'/' + p['mma'] if p.get('mma', 'dot') != 'dot' else ''}")
                for od in ((od0, torch.float32) if M in (1, 100) else (od0,)):
                    out = TQ.quant_matmul_config(x, wk, ws, xs, out_dtype=od, backend_key="cuda")
                    if not torch.equal(out, RQ.quant_matmul(x, w, ws, xs, out_dtype=od)):
                        msgs.append(f"M={M} {str(od)[6:]} not bit-identical")
                if M in (1, 100):
                    ok, det = bf16_close(TQ.quant_matmul_config(x, wk, ws, xs, bias=bias, out_dtype=od0, backend_key="cuda"),
                                         RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=od0))
                    if not ok:
                        msgs.append(f"M={M} bias: {det}")
            check(f"quant_matmul decode {name} K={K} N={N} M∈{dms} exact", not msgs,
                  "; ".join(msgs[:3]) or " ".join(tiles))
            del w, wk
        # swap-AB with split-K partials (the default buckets take it with one split only), a GROUP_M 2 split-K tile
        sw = dict(GROUP_M=1, mma="swap", mask_m=True)
        cases = [
            (16, 7168, 2112, dict(sw, BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=6, split_k=4, reduce="atomic")),
            (9, 7168, 2112, dict(sw, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=6, split_k=14,
                                 reduce="atomic")),
            (40, 1536, 3072, dict(sw, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, split_k=3, reduce="kernel")),
            (128, 7168, 2112, dict(sw, BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, split_k="auto",
                                   reduce="atomic")),
            (100, 1536, 24576, dict(sw, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=3, split_k=1)),
            (100, 7168, 2112, dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=256, GROUP_M=2, num_warps=4, num_stages=4, split_k=2,
                                   reduce="atomic")),   # GROUP_M 2 with a partial second M tile and split-K
        ]
        for M, K, N, cfg in cases:
            if smoke:
                K, N = min(K, 700), min(N, 300)
            w = torch.randint(-127, 128, (K, N), generator=gen, device=dev, dtype=torch.int8)
            wk = RQ.pack_weight(w, "cuda")
            ws = torch.rand(N, generator=gen, device=dev) * 1e-4
            x = torch.randint(-127, 128, (M, K), generator=gen, device=dev, dtype=torch.int8)
            xs = torch.rand(M, generator=gen, device=dev) * 1e-2
            ref = RQ.quant_matmul(x, w, ws, xs, out_dtype=od0)
            outs = [TQ.quant_matmul_config(x, wk, ws, xs, config=cfg, out_dtype=od0, backend_key="cuda") for _ in range(3)]
            ok = all(torch.equal(o, ref) for o in outs)
            p = TQ.plan_quant_matmul(M, N, K, dev, cfg, backend_key="cuda")
            check(f"quant_matmul {cfg.get('mma', 'dot')} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} "
                  f"s{cfg['num_stages']} w{cfg['num_warps']} split {p['SPLIT_K']} {cfg.get('reduce', '')} M={M} K={K} N={N} "
                  f"bit-identical (3 runs)", ok)
        if not smoke:
            torch.cuda.synchronize()
        check("split-K counters all back at zero (decode buckets)",
              all(int(buf.abs().sum().item()) == 0 for buf, _ in TQ._COUNTERS.values()))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


# M = 1 and M = 2 decode GEMMs with N <= 2560 take the "cuda" table's narrow streaming-GEMV buckets (mma
# "gemv_stream", _qmm_gemv_kernel, dp4a on a K-major weight): M = 1 6.03 us for qkv_a on the H200 (sweep 7, m1_gemv);
# M = 2 4-row tiles, 4 warps, 4 programs per SM with the register double buffer (prefetch): 6.71 vs 8.38 us (sweep 8).
# Wider N with K >= 2048 take the wide ones (session 12, quant_sweep23: the same tiles, 8 programs per SM at M = 2).
GEMV_SHAPES = [("qkv_a", 7168, 2112), ("moe_gate", 7168, 2048), ("moe_down", 2048, 7168), ("moe_gate_up", 7168, 4096)]
GEMV_SHAPES_SMOKE = [("qkv_a_like", 2052, 48), ("moe_gate_like", 1030, 40)]   # K tail; K % 4 != 0 (no dp4a)
GEMV_MS = (1, 2)   # the M the gemv_stream buckets of the table serve


def check_gemv_decode(dev, Ms, gen):
    """The table's M = 1 and M = 2 routes: the plan is that M's gemv_stream bucket (one split, dp4a; M = 2 with
    prefetch), narrow for N <= 2560, wide for larger N with K >= 2048; for N <= 2560, M 3..16 keep the mask_m BN16
    tile; N = 2561 with K = 1536 (q_b's K) leaves all of them; the launcher runs _qmm_gemv_kernel once per call with
    that M's bucket; fp32 and bf16 out without bias bit-identical
    to the reference (3 runs), K-major (dp4a where K % 4 == 0) and row-major (int8 loads) weights alike; with bias
    within the bf16 tolerance."""
    log("\n## quant_matmul M = 1 / M = 2 streaming GEMV (the cuda table's first two buckets)")
    smoke = dev.type != "cuda"
    od0 = torch.float16 if smoke else torch.bfloat16   # the interpreter truncates fp32 -> bf16 (the reference rounds)
    cfg = TQ._all_configs()["cuda"]["quant_matmul"]
    gemv = [b for b in cfg["buckets"] if b.get("mma") == "gemv_stream"]
    for M in GEMV_MS:
        for b in (b for b in gemv if int(b["max_m"]) == M):
            check(f"cuda table: quant_matmul gemv_stream bucket {cfg['buckets'].index(b)} for M = {M}, dp4a, one split"
                  f"{', prefetch' if M == 2 else ''}", b.get("dp4a") is True and b.get("split_k") == 1
                  and bool(b.get("prefetch")) == (M == 2), str(b))
    calls = []
    launch = TQ._launch_gemv_stream
    TQ._launch_gemv_stream = lambda *a, **kw: calls.append(a[6]) or launch(*a, **kw)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for name, K, N in (GEMV_SHAPES_SMOKE if smoke else GEMV_SHAPES):
            bad = []
            for M in (3, 4, 16) if N <= 2560 else ():
                q = TQ.plan_quant_matmul(M, N, K, dev, backend_key="cuda")
                if not (q.get("mask_m") and q.get("mma", "dot") == "dot"
                        and (q["BLOCK_M"], q["BLOCK_N"], q["SPLIT_K"]) == (16, 16, 1)):
                    bad.append(f"M={M}: {q['BLOCK_M']}x{q['BLOCK_N']} split {q['SPLIT_K']} mma {q.get('mma')}")
            for M in GEMV_MS:
                q = TQ.plan_quant_matmul(M, 2561, 1536, dev, backend_key="cuda")
                if q.get("mma") == "gemv_stream" or q.get("mask_m"):
                    bad.append(f"N=2561 K=1536 M={M}: {q.get('mma')} mask_m {q.get('mask_m')}")
            check(f"{name} M 3/4/16 plan: mask_m 16x16 one split (N <= 2560); N 2561 K 1536 at M 1/2: neither",
                  not bad, "; ".join(bad))
            w = torch.randint(-127, 128, (K, N), generator=gen, device=dev, dtype=torch.int8)
            ws = (0.5 + torch.rand(N, generator=gen, device=dev)) / (127.0 * K ** 0.5)
            bias = torch.randn(N, generator=gen, device=dev)
            for M in GEMV_MS:
                b = next(b for b in gemv if int(b["max_m"]) == M and ("max_n" in b) == (N <= 2560))
                p = TQ.plan_quant_matmul(M, N, K, dev, backend_key="cuda")
                keys = ("max_m", "BLOCK_N", "BLOCK_K", "num_warps", "programs_per_sm", "dp4a", "prefetch")
                ok = (TQ._bucket(M, cfg, N, K) is b and p.get("mma") == "gemv_stream" and p["SPLIT_K"] == 1
                      and all(p.get(k) == b.get(k) for k in keys))
                check(f"{name} K={K} N={N} M={M} plan: gemv_stream {p['BLOCK_N']}x{p['BLOCK_K']} split {p['SPLIT_K']}"
                      f"{' prefetch' if p.get('prefetch') else ''}", ok, str({k: p.get(k) for k in keys + ("mma",)}))
                x = torch.randint(-127, 128, (M, K), generator=gen, device=dev, dtype=torch.int8)
                xs = (0.5 + torch.rand(M, generator=gen, device=dev)) / 127.0
                for lay, ww in (("kmajor", RQ.pack_weight(w, "cuda")), ("rowmajor", w)):
                    dp4a = TQ._gemv_stream_dp4a_ok(x, ww, int(p["BLOCK_K"]))
                    want_dp4a = lay == "kmajor" and K % 4 == 0
                    msgs = [] if dp4a == want_dp4a else [f"dp4a layout check {dp4a}, want {want_dp4a}"]
                    det = ""
                    calls.clear()
                    for od in (od0, torch.float32):
                        ref = RQ.quant_matmul(x, w, ws, xs, out_dtype=od)
                        for _ in range(3):
                            out = TQ.quant_matmul_config(x, ww, ws, xs, out_dtype=od, backend_key="cuda")
                            if not torch.equal(out, ref):
                                msgs.append(f"{str(od)[6:]} not bit-identical")
                    ok, det = bf16_close(TQ.quant_matmul_config(x, ww, ws, xs, bias=bias, out_dtype=od0,
                                                                backend_key="cuda"),
                                         RQ.quant_matmul(x, w, ws, xs, bias=bias, out_dtype=od0))
                    if not ok:
                        msgs.append(f"bias: {det}")
                    if len(calls) != 7 or any(c.get("mma") != "gemv_stream" or int(c.get("max_m", 0)) != M
                                              for c in calls):
                        msgs.append(f"{len(calls)} gemv_stream launches of 7 calls (bucket max_m {M} each)")
                    check(f"quant_matmul {name} K={K} N={N} M={M} {lay} gemv_stream (dp4a "
                          f"{'on' if dp4a and not smoke else 'off'}) exact, 3 runs", not msgs,
                          "; ".join(dict.fromkeys(msgs)) or det)
    finally:
        TQ._launch_gemv_stream = launch
        torch.backends.cuda.matmul.allow_tf32 = tf32


def _ids_match_up_to_ties(idx, ridx, x, bias, kw) -> tuple[bool, int]:
    """Rows whose ids differ are allowed only if the swapped experts' biased scores tie to ~1 ulp."""
    diff_rows = (idx != ridx).any(1).nonzero().flatten().tolist()
    if not diff_rows:
        return True, 0
    s = torch.sigmoid(x.double()) if kw.get("norm_type", 0) == 1 else torch.softmax(x.double(), -1)
    b = s + (bias.double() if bias is not None else 0)
    for r in diff_rows:
        bk = b[r, idx[r].long()]
        br = b[r, ridx[r].long()]
        if not torch.allclose(bk, br, rtol=1e-6, atol=1e-7):
            return False, len(diff_rows)
    return True, len(diff_rows)


DS = dict(k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)


def check_gating(dev, Ts, gen):
    log("\n## moe_gating_top_k")

    def run(x, k=8, tag="", **kw):
        kw = {**DS, **kw}
        y, idx, n = TG.moe_gating_top_k(x, k, **kw)
        ry, ridx, rn = RG.moe_gating_top_k(x, k, **kw)
        ok_ids, nswap = _ids_match_up_to_ties(idx, ridx, x, kw.get("bias"), kw)
        T = x.shape[0]
        msgs = []
        if not ok_ids:
            msgs.append(f"ids differ in {nswap} rows (not ties)")
        if T:
            if not ((idx >= 0) & (idx < x.shape[1])).all() or any(len(set(r)) != k for r in idx.tolist()):
                msgs.append("ids not distinct/in range")
            if not torch.isfinite(y).all():
                msgs.append("non-finite y")
            same = ~(idx != ridx).any(1)
            if same.any():
                tol = 1e-5 if x.dtype == torch.float32 else 1e-2
                e = ((y[same].double() - ry[same].double()).abs().max() / ry[same].double().abs().max().clamp_min(1e-30)).item()
                if e > tol:
                    msgs.append(f"y rel err {e:.1e}")
            fin = torch.isfinite(rn)
            if not torch.equal(fin, torch.isfinite(n)) or ((n[fin] - rn[fin]).abs() > 1e-5 * rn[fin].abs().max()).any():
                msgs.append("norm_out differs")
        check(f"gating {tag} T={T} {str(x.dtype)[6:]}", not msgs, "; ".join(msgs) + (f" ({nswap} tie swaps)" if nswap else ""))
        return y, idx

    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for T in (Ts if dtype == torch.bfloat16 else Ts[-3:]):
            x = (2 * torch.randn(T, 256, generator=gen, device=dev)).to(dtype)
            run(x, tag="deepseek", bias=0.5 * torch.randn(256, generator=gen, device=dev))
    x = torch.randn(64, 256, generator=gen, device=dev).to(torch.bfloat16)
    b = torch.where(torch.rand(256, generator=gen, device=dev) < 0.5, -0.5, 0.5)
    y, idx = run(x, tag="G1 bias ±0.5", bias=b)
    s = torch.sigmoid(x.double()).gather(1, idx.long())
    check("G1 weights unbiased", torch.allclose(y.double(), (s / s.sum(1, keepdim=True) * 2.5), rtol=1e-2))
    y, idx = run(x, tag="G2 bias −2", bias=torch.full((256,), -2.0, device=dev))
    check("G2 ≤ 4 groups used", all(len(set((r // 32).tolist())) <= 4 for r in idx.cpu()))
    x3 = torch.full((1, 256), -6.0, device=dev)
    x3[0, 0] = 6.0
    for g in range(1, 5):
        x3[0, 32 * g: 32 * g + 2] = 3.0
    y, idx = run(x3.to(torch.bfloat16), tag="G3 top-2 sum", bias=torch.zeros(256, device=dev))
    check("G3 groups 1–4 by top-2 sum", set((idx[0] // 32).tolist()) <= {1, 2, 3, 4})
    x4 = torch.randn(5, 256, generator=gen, device=dev)
    x4[0] = float("nan")
    x4[1] = float("inf")
    x4[2, :128] = float("nan")
    x4[3] = float("-inf")
    x4[4, 40:] = float("nan")
    run(x4.to(torch.bfloat16), tag="G4 NaN/inf rows", bias=0.1 * torch.randn(256, generator=gen, device=dev))
    y, idx = run(torch.zeros(4, 256, device=dev, dtype=torch.bfloat16), tag="G5 all equal", bias=torch.zeros(256, device=dev))
    check("G5 ids 0..7", idx.tolist() == [list(range(8))] * 4)
    for k in (6, 8):
        xk = torch.randn(256, 256, generator=gen, device=dev)
        y, idx = run(xk, k=k, tag=f"G6 k={k}", bias=0.3 * torch.randn(256, generator=gen, device=dev))
        check(f"G6 Σw = 2.5 (k={k})", torch.allclose(y.sum(1), torch.full_like(y.sum(1), 2.5), rtol=2e-6))
    run(torch.randn(64, 64, generator=gen, device=dev), k=6, tag="softmax flat", k_group=1, group_count=1,
        group_select_mode=0, norm_type=0, routed_scaling_factor=1.0, bias=None)
    run(torch.randn(64, 512, generator=gen, device=dev).to(torch.bfloat16), tag="E512 G16", k_group=4, group_count=16,
        bias=0.2 * torch.randn(512, generator=gen, device=dev))


def check_graphs_and_compile(dev, gen):
    log("\n## CUDA graphs / torch.compile")
    x = torch.randn(16, 7168, device=dev).to(torch.bfloat16)
    r = torch.randn(16, 7168, device=dev).to(torch.bfloat16)
    g = torch.rand(7168, device=dev).to(torch.bfloat16) + 0.5
    w = RQ.pack_weight(torch.randint(-127, 128, (7168, 2112), device=dev, dtype=torch.int8))
    ws = torch.rand(2112, device=dev) * 1e-4
    logits = torch.randn(16, 256, device=dev)
    bias = torch.randn(256, device=dev) * 0.1

    def step():
        q, sc, ro = TQ.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r)
        o = TQ.quant_matmul(q, w, ws, sc)
        y, idx, _ = TG.moe_gating_top_k(logits, 8, bias=bias, **DS)
        return o, y, idx

    eager = step()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    graph.replay()
    torch.cuda.synchronize()
    check("CUDA graph capture + replay = eager", all(torch.equal(a, b) for a, b in zip(outs, eager)))
    if not HAVE_OPS:
        log("skip torch.compile (import ops failed)")
        return
    import ops as _ops

    def f(x, r, g, w, ws, logits, bias):
        q, sc, ro = torch.ops.ds.rms_norm_dynamic_quant(x, g, epsilon=1e-6, residual=r)
        o = torch.ops.ds.quant_matmul(q, w, ws, sc)
        y, idx, _ = torch.ops.ds.moe_gating_top_k(logits, 8, bias=bias, **DS)
        return o, y, idx
    with _ops.backend("triton"):
        try:
            cf = torch.compile(f, fullgraph=True)
            outc = cf(x, r, g, w, ws, logits, bias)
            check("torch.compile(fullgraph) through torch.ops.ds = eager", all(torch.equal(a, b) for a, b in zip(outc, eager)))
        except Exception as e:  # noqa: BLE001
            check("torch.compile(fullgraph) through torch.ops.ds", False, f"{type(e).__name__}: {e}"[:300])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "gpu", "results", "check_quant_gating.txt"))
    ap.add_argument("--quick", action="store_true", help="fewer M / T values")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes: checks the script runs")
    args = ap.parse_args()
    global QMM_SHAPES, DQ_KS, RMS_HS
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        QMM_SHAPES, DQ_KS, RMS_HS = [("tiny", 300, 96), ("tiny_wide", 1368, 40)], (576, 1368), (512,)
        args.quick = True
    dev = torch.device("cpu" if args.smoke else "cuda")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _OUT_FILE.append(open(args.out, "w"))
    import triton
    log(f"# check_quant_gating  {time.strftime('%Y-%m-%d %H:%M:%S')}")
    log(f"device={torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu (interpreter smoke run)'}  torch={torch.__version__}  triton={triton.__version__}")
    Ms = [0, 1, 17, 256] if args.quick else [0, 1, 2, 15, 16, 17, 64, 256, 4096]
    gen = torch.Generator(device=dev).manual_seed(0)
    if dev.type == "cpu":
        torch.set_num_threads(2)
    t0 = time.time()
    for fn, arg in ((check_dynamic_quant, Ms), (check_rms_norm_dynamic_quant, Ms), (check_quant_matmul, Ms),
                    (check_fast_paths, Ms), (check_decode_buckets, Ms), (check_gemv_decode, Ms),
                    (check_gating, Ms), (check_graphs_and_compile, None)):
        orig_empty = poison_like_empty() if arg is not None else None
        try:
            if arg is not None:
                fn(dev, arg, gen)
            elif dev.type == "cuda":
                fn(dev, gen)
        except Exception:  # noqa: BLE001
            check(fn.__name__, False, "exception:\n" + traceback.format_exc())
        finally:
            if orig_empty is not None:
                torch.empty = orig_empty
    log(f"\n{len(FAILS)} failed checks in {time.time() - t0:.0f} s: {FAILS}")
    _OUT_FILE[0].close()
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
