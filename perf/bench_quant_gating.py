#!/usr/bin/env python3
"""Benchmarks of the Triton quant / gating kernels vs the unfused PyTorch reference and cuBLAS, on one GPU.

    python3 perf/bench_quant_gating.py --out docs/perf/quant_gating_results.md [--sweep] [--json sweep.json]

Method (DESIGN §Performance methodology): every number is the median over 10 replays of a CUDA graph
holding ``calls`` back-to-back calls, divided by ``calls`` (no launch overhead, the way a serving engine
runs decode). Memory-bound cases rotate through enough input copies that they exceed 2× the L2 cache
(H200: 50 MB), so weights are streamed from HBM. Copy bandwidth is measured in the same run
(``dst.copy_(src)`` on 1 GiB, 2 bytes moved per byte copied) and weight-streaming efficiency is quoted
against it. TOPS = 2·M·N·K / t. The unfused references are the functions in reference/ (eager
PyTorch, captured in the same kind of graph); cuBLAS is ``torch._int_mm`` + the same fp32 epilogue in
PyTorch (M > 16 only: cuBLAS rejects M ≤ 16).

``--sweep`` also times candidate launch configs per shape (the data for ops/triton/configs/*.json) and
prints the best; without it only the configs in the JSON are timed. Eager dispatch overhead (host µs per
call: direct kernel call, ``DsOp`` fast path, ``torch.ops.ds``) is reported at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import torch  # noqa: E402

try:
    import ops  # noqa: F401
    HAVE_OPS = True
except Exception as e:  # noqa: BLE001
    print(f"[warn] import ops failed ({type(e).__name__}: {e}); timing kernel modules directly")
    sys.modules.pop("ops", None)
    pkg = types.ModuleType("ops")
    pkg.__path__ = [os.path.join(REPO, "ops")]
    sys.modules["ops"] = pkg
    HAVE_OPS = False

import triton  # noqa: E402

from ops.triton import moe_gating as TG  # noqa: E402
from ops.triton import quant as TQ  # noqa: E402
from reference import moe_gating as RG  # noqa: E402
from reference import quant as RQ  # noqa: E402

L2_BYTES = 50 * 2**20
OUT: list[str] = []
_OUT_FILE: list = []  # written line by line, so a run cut short keeps its numbers


def emit(line: str = "") -> None:
    print(line, flush=True)
    OUT.append(line)
    if _OUT_FILE:
        _OUT_FILE[0].write(line + "\n")
        _OUT_FILE[0].flush()


SWEEP_JSON: list[str] = []
FLOORS_ONLY = [False]  # --floors: only the shapes the issue sets floors for
SWEEP_DEADLINE = [float("inf")]  # time.time() after which no more sweep candidates are timed


def _dump_sweep(log: list) -> None:
    if SWEEP_JSON:
        with open(SWEEP_JSON[0], "w") as f:
            json.dump(log, f, indent=0)


def graph_time_us(fns, calls: int = 20, replays: int = 10) -> float:
    """Median µs per call of ``calls`` back-to-back calls (cycling through ``fns``) replayed in a CUDA graph."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fns[i % len(fns)]()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / calls)
    del g
    return statistics.median(ts)


def copies_for(nbytes: int) -> int:
    return max(1, min(16, -(-2 * L2_BYTES // max(nbytes, 1)) + 1))


def copy_bandwidth(dev) -> float:
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    t = graph_time_us([lambda: dst.copy_(src)], calls=5)
    return 2 * n / (t * 1e-6) / 1e9


# ----------------------------------------------------------------------------------------------
# quant_matmul
# ----------------------------------------------------------------------------------------------
def qmm_inputs(M, K, N, dev, ncopies, layout="kmajor"):
    g = torch.Generator(device=dev).manual_seed(0)
    sets = []
    for _ in range(ncopies):
        w = torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8)
        if layout == "kmajor":
            w = RQ.pack_weight(w, "cuda")
        x = torch.randint(-127, 128, (M, K), generator=g, device=dev, dtype=torch.int8)
        ws = torch.rand(N, generator=g, device=dev) * 1e-4
        xs = torch.rand(M, generator=g, device=dev) * 1e-2
        sets.append((x, w, ws, xs))
    return sets


def small_m_candidates(M):
    bm = 16 if M <= 16 else (32 if M <= 32 else (64 if M <= 64 else 128))
    c = []
    for bn, bk, st, wp in ((64, 256, 5, 4), (32, 512, 4, 4), (128, 256, 4, 4), (64, 512, 3, 4), (128, 128, 6, 4)):
        c.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, num_warps=wp, num_stages=st, split_k="auto"))
    c.append(dict(BLOCK_M=bm, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=5, split_k=1))
    if M > 64:
        c.append(dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4, split_k="auto"))
        c.append(dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4, split_k="auto"))
    return c


def large_m_candidates():
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=w, num_stages=s, split_k=1)
            for bm, bn, bk, w, s in ((128, 256, 128, 8, 4), (128, 256, 128, 8, 3), (256, 128, 128, 8, 4),
                                     (128, 128, 128, 8, 5), (128, 256, 64, 8, 6))]


def time_qmm(sets, config=None):
    fns = [lambda s=s: TQ.quant_matmul_config(*s, config=config) for s in sets]
    return graph_time_us(fns)


def bench_quant_matmul(dev, bw_gbs, sweep, sweep_log):
    emit("\n## quant_matmul (bf16 out, weights K-major = `pack_weight(w, 'cuda')`)\n")
    emit("| M | K | N | config (BM×BN×BK, warps, stages, split) | µs | TOPS | weight GB/s | % of copy BW | "
         "cuBLAS _int_mm + epilogue µs | unfused reference µs | row-major weight µs |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|")
    shapes = [(M, 7168, 2112) for M in (1, 16, 64, 128)] + [(M, 1536, 24576) for M in (1, 16, 64, 128)] + \
             [(4096, 7168, 2048)]
    if not FLOORS_ONLY[0]:
        shapes += [(M, 16384, 7168) for M in (16, 128)] + [(4096, 7168, 2112), (4096, 1536, 24576)]
    for M, K, N in shapes:
        try:
            nc = copies_for(K * N)
            sets = qmm_inputs(M, K, N, dev, nc)
            plan = TQ.plan_quant_matmul(M, N, K, dev)
            t = time_qmm(sets)
            best = (t, None)
            if sweep:
                cands = large_m_candidates() if M >= 1024 else small_m_candidates(M)
                for c in cands:
                    if time.time() > SWEEP_DEADLINE[0]:
                        emit("<!-- sweep budget spent -->")
                        break
                    try:
                        tc = time_qmm(sets, c)
                        p = TQ.plan_quant_matmul(M, N, K, dev, c)
                        sweep_log.append(dict(op="quant_matmul", M=M, K=K, N=N, config=c, split=p["SPLIT_K"], us=tc))
                        _dump_sweep(sweep_log)
                        emit(f"<!-- sweep M={M} K={K} N={N} {c} split={p['SPLIT_K']}: {tc:.2f} us -->")
                        if tc < best[0]:
                            best = (tc, c)
                    except Exception as e:  # noqa: BLE001
                        emit(f"<!-- sweep M={M} K={K} N={N} {c}: {type(e).__name__}: {str(e)[:200]} -->")
            cub = ""
            if M > 16:
                def cublas(s):
                    x, w, ws, xs = s
                    acc = torch._int_mm(x, w)
                    return (acc.float() * ws[None, :] * xs[:, None]).to(torch.bfloat16)
                try:
                    cub = f"{graph_time_us([lambda s=s: cublas(s) for s in sets]):.1f}"
                except Exception as e:  # noqa: BLE001
                    cub = f"n/a ({type(e).__name__})"
            ref = f"{graph_time_us([lambda s=s: RQ.quant_matmul(*s) for s in sets[:2]], calls=4):.1f}"
            row = ""
            if M <= 128 or M == 4096 and N == 2048:
                rsets = qmm_inputs(M, K, N, dev, nc, layout="rowmajor")
                row = f"{time_qmm(rsets):.1f}"
                del rsets
            cfg = f"{plan['BLOCK_M']}×{plan['BLOCK_N']}×{plan['BLOCK_K']}, {plan['num_warps']}, {plan['num_stages']}, {plan['SPLIT_K']}"
            tops = 2 * M * N * K / (t * 1e-6) / 1e12
            wgbs = K * N / (t * 1e-6) / 1e9
            emit(f"| {M} | {K} | {N} | {cfg} | {t:.2f} | {tops:.0f} | {wgbs:.0f} | {100 * wgbs / bw_gbs:.0f}% | {cub} | {ref} | {row} |")
            if best[1] is not None:
                bp = TQ.plan_quant_matmul(M, N, K, dev, best[1])
                emit(f"<!-- best M={M} K={K} N={N}: {best[0]:.2f} us with {best[1]} split={bp['SPLIT_K']} -->")
            del sets
        except Exception:  # noqa: BLE001
            emit(f"<!-- M={M} K={K} N={N} failed: {traceback.format_exc()[-600:]} -->")
        torch.cuda.empty_cache()


def bench_quant_pipeline(dev):
    emit("\n## dynamic_quant + quant_matmul at M=4096, K=7168, N=2048 (bf16 activations)\n")
    M, K, N = 4096, 7168, 2048
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, generator=g, device=dev).to(torch.bfloat16)
    w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8))
    ws = torch.rand(N, generator=g, device=dev) * 1e-4
    q, sc = TQ.dynamic_quant(x)
    t_dq = graph_time_us([lambda: TQ.dynamic_quant(x)])
    t_mm = graph_time_us([lambda: TQ.quant_matmul(q, w, ws, sc)])

    def both():
        qq, ss = TQ.dynamic_quant(x)
        return TQ.quant_matmul(qq, w, ws, ss)
    t_both = graph_time_us([both])
    def both_ref():
        qq, ss = RQ.dynamic_quant(x)
        return RQ.quant_matmul(qq, w, ws, ss)
    t_ref = graph_time_us([both_ref], calls=3)
    fl = 2 * M * N * K
    emit("| what | µs | TOPS (2MNK / t) |")
    emit("|---|---|---|")
    emit(f"| dynamic_quant [4096, 7168] bf16 | {t_dq:.1f} | – ({3 * M * K / (t_dq * 1e-6) / 1e9:.0f} GB/s) |")
    emit(f"| quant_matmul | {t_mm:.1f} | {fl / (t_mm * 1e-6) / 1e12:.0f} |")
    emit(f"| dynamic_quant + quant_matmul | {t_both:.1f} | {fl / (t_both * 1e-6) / 1e12:.0f} (effective) |")
    emit(f"| unfused reference (dynamic_quant + quant_matmul) | {t_ref:.1f} | {fl / (t_ref * 1e-6) / 1e12:.0f} |")


def bench_row_quant(dev, bw_gbs):
    emit("\n## dynamic_quant / rms_norm_dynamic_quant (bf16 in; smooth scales; residual for the norm)\n")
    emit("| op | T | H | µs | GB/s | % of copy BW | unfused reference µs |")
    emit("|---|---|---|---|---|---|---|")
    for T in (1, 16, 128, 4096):
        for H in (7168, 1536):
            g = torch.Generator(device=dev).manual_seed(0)
            nbytes = T * H * 2
            nc = copies_for(nbytes * 2)
            xs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)]
            rs = [torch.randn(T, H, generator=g, device=dev).to(torch.bfloat16) for _ in range(nc)]
            gm = (torch.rand(H, generator=g, device=dev) + 0.5).to(torch.bfloat16)
            sm = torch.rand(H, generator=g, device=dev) + 0.5
            t = graph_time_us([lambda x=x: TQ.dynamic_quant(x, smooth_scales=sm) for x in xs])
            tr = graph_time_us([lambda x=x: RQ.dynamic_quant(x, smooth_scales=sm) for x in xs[:2]], calls=6)
            by = T * H * 3 + T * 4
            emit(f"| dynamic_quant | {T} | {H} | {t:.2f} | {by / (t * 1e-6) / 1e9:.0f} | {100 * by / (t * 1e-6) / 1e9 / bw_gbs:.0f}% | {tr:.1f} |")
            t = graph_time_us([lambda x=x, r=r: TQ.rms_norm_dynamic_quant(x, gm, epsilon=1e-6, residual=r, smooth_scales=sm)
                               for x, r in zip(xs, rs)])
            tr = graph_time_us([lambda x=x, r=r: RQ.rms_norm_dynamic_quant(x, gm, epsilon=1e-6, residual=r, smooth_scales=sm)
                                for x, r in zip(xs[:2], rs[:2])], calls=6)
            by = T * H * (2 + 2 + 2 + 1) + T * 4
            emit(f"| rms_norm_dynamic_quant | {T} | {H} | {t:.2f} | {by / (t * 1e-6) / 1e9:.0f} | {100 * by / (t * 1e-6) / 1e9 / bw_gbs:.0f}% | {tr:.1f} |")
            del xs, rs


DS = dict(k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)


def bench_gating(dev, sweep, sweep_log):
    emit("\n## moe_gating_top_k (E=256, 8 groups, top-4 groups, k=8, sigmoid, fp32 bias)\n")
    emit("| T | logits | µs (graph replay) | config (BLOCK_T, warps) | unfused reference µs (graph) | reference eager µs (events) |")
    emit("|---|---|---|---|---|---|")
    g = torch.Generator(device=dev).manual_seed(0)
    bias = 0.5 * torch.randn(256, generator=g, device=dev)
    cands = [dict(BLOCK_T=bt, num_warps=w) for bt, w in ((1, 1), (1, 2), (2, 2), (4, 2), (4, 4), (8, 4))]
    for T in (1, 16, 64, 128, 256, 4096):
        for dt in (torch.bfloat16, torch.float32):
            x = (2 * torch.randn(T, 256, generator=g, device=dev)).to(dt)
            t = graph_time_us([lambda: TG.moe_gating_top_k(x, 8, bias=bias, **DS)], calls=50)
            cfg = TG._all_configs()["cuda"]
            bt = max(1, min(cfg["tile_elems"] // 256, cfg["max_block_t"], triton.next_power_of_2(T)))
            if sweep and dt == torch.bfloat16 and T in (1, 64, 256, 4096):
                for c in cands:
                    if time.time() > SWEEP_DEADLINE[0]:
                        break
                    try:
                        tc = graph_time_us([lambda c=c: TG.moe_gating_top_k_config(x, 8, bias=bias, config=c, **DS)], calls=50)
                        sweep_log.append(dict(op="moe_gating_top_k", T=T, config=c, us=tc))
                        _dump_sweep(sweep_log)
                        emit(f"<!-- sweep gating T={T} {c}: {tc:.2f} us -->")
                    except Exception as e:  # noqa: BLE001
                        emit(f"<!-- sweep gating T={T} {c}: {type(e).__name__}: {str(e)[:200]} -->")
            tr = graph_time_us([lambda: RG.moe_gating_top_k(x, 8, bias=bias, **DS)], calls=10)
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                RG.moe_gating_top_k(x, 8, bias=bias, **DS)
            s0.record()
            for _ in range(20):
                RG.moe_gating_top_k(x, 8, bias=bias, **DS)
            s1.record()
            s1.synchronize()
            te = s0.elapsed_time(s1) * 1e3 / 20
            emit(f"| {T} | {str(dt)[6:]} | {t:.2f} | {bt}, {cfg['num_warps']} | {tr:.1f} | {te:.1f} |")


def bench_dispatch(dev):
    if not HAVE_OPS:
        return
    import ops as _ops
    emit("\n## eager dispatch overhead (host µs per call, T=16 gating; GPU work is ~3 µs and overlaps)\n")
    x = torch.randn(16, 256, device=dev)
    bias = torch.randn(256, device=dev) * 0.1
    rows = []
    with _ops.backend("triton"):
        for name, fn in (("direct kernel call (ops.triton.moe_gating)", lambda: TG.moe_gating_top_k(x, 8, bias=bias, **DS)),
                         ("DsOp eager fast path (ops.moe_gating.moe_gating_top_k)", lambda: _ops.moe_gating.moe_gating_top_k(x, 8, bias=bias, **DS)),
                         ("registered op (torch.ops.ds.moe_gating_top_k)", lambda: torch.ops.ds.moe_gating_top_k(x, 8, bias=bias, **DS))):
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            rows.append((name, (time.perf_counter() - t0) / 2000 * 1e6))
    emit("| path | µs / call |")
    emit("|---|---|")
    for n, t in rows:
        emit(f"| {n} | {t:.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "perf", "quant_gating_results.md"))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--json", default=None, help="write the sweep log here")
    ap.add_argument("--floors", action="store_true", help="quant_matmul: only the floor shapes")
    ap.add_argument("--sweep-budget", type=float, default=1e9, help="seconds of sweeping at most")
    ap.add_argument("--only", default="", help="comma list of sections: qmm,pipeline,rows,gating,dispatch")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _OUT_FILE.append(open(args.out, "w"))
    emit(f"# quant / gating benchmarks — {time.strftime('%Y-%m-%d %H:%M')}")
    emit(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
         f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs. Command: `python3 perf/bench_quant_gating.py "
         f"{' '.join(sys.argv[1:])}`. µs = median per call over CUDA-graph replays (inputs rotated past L2).")
    bw = copy_bandwidth(dev)
    emit(f"\nMeasured device copy bandwidth: **{bw:.0f} GB/s** (1 GiB dst.copy_(src)).")
    sweep_log: list[dict] = []
    SWEEP_DEADLINE[0] = time.time() + args.sweep_budget
    FLOORS_ONLY[0] = args.floors
    if args.json:
        SWEEP_JSON.append(args.json)
    only = set(filter(None, args.only.split(",")))
    t0 = time.time()
    for key, fn in (("gating", lambda: bench_gating(dev, args.sweep, sweep_log)),
                    ("qmm", lambda: bench_quant_matmul(dev, bw, args.sweep, sweep_log)),
                    ("pipeline", lambda: bench_quant_pipeline(dev)),
                    ("rows", lambda: bench_row_quant(dev, bw)),
                    ("dispatch", lambda: bench_dispatch(dev))):
        if only and key not in only:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001
            emit(f"\n<!-- section {key} failed:\n{traceback.format_exc()[-1500:]}\n-->")
        emit(f"\n<!-- {key} done at {time.time() - t0:.0f} s -->")
    _OUT_FILE[0].close()
    _dump_sweep(sweep_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
