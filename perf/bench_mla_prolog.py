#!/usr/bin/env python3
"""Benchmark of the Triton ds::mla_prolog kernels vs the unfused PyTorch reference, on one GPU.

    python3 perf/bench_mla_prolog.py --out docs/perf/mla_prolog_results.md [--T 1,32,128] [--modes bf16,a8w8]
                                     [--sweep] [--warm]

Shapes: DeepSeek-V3 (He 7168, Hcq 1536, Hckv 512, D 128, Dr 64), N = 128 heads, T tokens (decode),
PA_BSND caches with block_size 128. Modes: "bf16" (all weights bf16, ~121 MB) and "a8w8" (full A8W8:
int8 token_x / W_DQ / W_UQ_QR / W_DKV_KR with per-channel scales, bf16 W_UK, ~64 MB), int8 weights packed
K-major once (``ops.triton.mla_prolog.pack_weights``).

Method (DESIGN §Performance methodology): the main number is the median over 10 replays of a CUDA graph
holding back-to-back calls of the Triton launcher, divided by the number of calls (no launch gaps, the
way a serving engine runs decode). Calls rotate through enough weight copies that each replay streams
more than 2× the 50 MB L2, so weights come from HBM. "weight GB/s" = weight bytes / time (the bytes that
must be streamed; activations, scales and cache rows are < 1 % at T ≤ 128) and is quoted against the
copy bandwidth measured in the same run (``dst.copy_(src)`` on 1 GiB, 2 bytes moved per byte copied).
Also reported: eager time of the launcher with triton.testing.do_bench (events, L2 flushed; includes
launch gaps), the unfused PyTorch reference (reference/mla_prolog.py on the GPU, eager, do_bench) and
the per-kernel device time from torch.profiler. ``--sweep`` times candidate tiles per kernel (the data
behind ops/triton/configs/mla_prolog.json). ``--warm`` only compiles (run in parallel processes first so
the timing run finds Triton's disk cache warm).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

import torch  # noqa: E402
import triton  # noqa: E402

from ops import mla_prolog as M  # noqa: E402
from ops.triton import mla_prolog as K  # noqa: E402
from reference import mla_prolog as R  # noqa: E402

L2_BYTES = 50 * 2**20
WEIGHTS = ("weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr")

# sweep candidates: overrides of the bucket picked from the JSON (empty = the JSON's own choice)
DOWN_SWEEP = [{}, {"BLOCK_N": 128}, {"split_k": 16}]
QUERY_SWEEP = [{}, {"BLOCK_K": 128, "num_stages": 3}, {"BLOCK_K": 32, "num_stages": 6}]


def log(msg: str) -> None:
    print(msg, flush=True)


def make(mode: str, T: int, N: int, seed: int = 0) -> dict:
    shape = dict(M.SPEC.shapes.get(f"t{T}_n{N}_{mode}") or dict(T=T, N=N, He=7168, Hcq=1536, Hckv=512, D=128,
                                                                     Dr=64, block_size=128, mode=mode))
    shape.update(cache_fill="random")
    inp = M.make_inputs(shape, dtype=torch.bfloat16, device="cuda", generator=torch.Generator().manual_seed(seed))
    return K.pack_weights(inp, "cuda")


def weight_bytes(inp: dict) -> int:
    return sum(inp[k].numel() * inp[k].element_size() for k in WEIGHTS)


def rotations(inp: dict) -> list[dict]:
    """Copies of the weights so consecutive calls never find them in L2."""
    n = max(2, math.ceil(2 * L2_BYTES / weight_bytes(inp)) + 1)
    sets = [inp]
    for _ in range(n - 1):
        d = dict(inp)
        for k in WEIGHTS:
            w = inp[k]
            c = torch.empty_strided(w.shape, w.stride(), dtype=w.dtype, device=w.device)
            c.copy_(w)
            d[k] = c
        sets.append(d)
    return sets


def graph_us(fn_list, replays: int = 10) -> float:
    """Median per-call µs of a CUDA graph holding fn_list's calls back to back."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fn_list:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fn_list:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(fn_list))
    del g
    return statistics.median(times)


def copy_bandwidth() -> float:
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300)
    return 2 * src.numel() / (ms * 1e-3)


def kernel_call(inp: dict, overrides=None):
    return lambda: K.mla_prolog_config(**inp, overrides=overrides)


def profile_kernels(sets: list[dict], overrides=None) -> dict[str, float]:
    """Per-kernel average device µs over eager calls (rotating weights) from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    calls = [kernel_call(d, overrides) for d in sets] * 3
    for c in calls:
        c()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for c in calls:
            c()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        for name in ("_down_kernel", "_row_kernel", "_query_kernel"):
            if name in e.key:
                tot = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
                out[name] = tot / max(e.count, 1)
    return out


def check_correct(inp: dict) -> str:
    """Triton vs the reference on the same GPU inputs (bf16 tolerance; int8 ±1 LSB)."""
    from tolerances import assert_close
    a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    ra = R.mla_prolog(**a)
    rb = K.mla_prolog(**b)
    torch.cuda.synchronize()
    try:
        assert_close(rb[0], ra[0], "bf16", name="query")
        assert_close(rb[1], ra[1], "bf16", name="query_rope")
        idx = inp["cache_index"].reshape(-1)
        w = idx[idx >= 0]
        assert_close(b["kv_cache"].reshape(-1, 512)[w], a["kv_cache"].reshape(-1, 512)[w], "bf16", name="kv rows")
        assert_close(b["kr_cache"].reshape(-1, 64)[w], a["kr_cache"].reshape(-1, 64)[w], "bf16", name="kr rows")
        same = (rb[0] == ra[0]).double().mean().item()
        return f"ok ({same:.3f} of query bit-identical)"
    except AssertionError as e:
        return f"FAIL: {e}"


def bench(mode: str, T: int, N: int, cbw: float, sweep: bool, rows: list, sweep_rows: list, warm: bool) -> None:
    inp = make(mode, T, N)
    wb = weight_bytes(inp)
    p = K.plan(T, 7168, 1536, N, 128, 64, 512, torch.device("cuda"), int8_down=mode == "a8w8",
               int8_query=mode == "a8w8")
    cands = [("json", None)]
    if sweep:
        cands += [(f"down {d}", {"down": d}) for d in DOWN_SWEEP[1:]]
        cands += [(f"query {q}", {"query": q}) for q in QUERY_SWEEP[1:]]
    if warm:
        for name, ov in cands:
            try:
                K.mla_prolog_config(**inp, overrides=ov)
            except Exception as e:  # noqa: BLE001
                log(f"[warm] {mode} T={T} {name}: {type(e).__name__}: {e}")
        torch.cuda.synchronize()
        log(f"[warm] {mode} T={T}: {len(cands)} configs compiled")
        return
    verdict = check_correct(inp)
    log(f"{mode} T={T}: correctness {verdict}")
    sets = rotations(inp)
    calls = [kernel_call(d) for d in sets] * max(1, 8 // len(sets))
    us = graph_us(calls)
    eager_ms = triton.testing.do_bench(kernel_call(inp), warmup=20, rep=200)
    ref_ms = triton.testing.do_bench(lambda: R.mla_prolog(**inp), warmup=3, rep=100)
    try:
        kt = profile_kernels(sets)
    except Exception as e:  # noqa: BLE001
        kt = {}
        log(f"profiler failed: {e}")
    gbs = wb / (us * 1e-6) / 1e9
    w_down = sum(inp[k].numel() * inp[k].element_size() for k in ("weight_dq", "weight_dkv_kr"))
    w_query = wb - w_down

    def kbw(name, nbytes):
        t = kt.get(name)
        return f"{t:.1f} µs ({nbytes / (t * 1e-6) / 1e9:.0f} GB/s)" if t else "n/a"

    rows.append(f"| {mode} | {T} | {N} | {wb / 1e6:.1f} | **{us:.1f}** | {gbs:.0f} | **{100 * gbs * 1e9 / cbw:.0f}%** | "
                f"{eager_ms * 1e3:.1f} | {ref_ms * 1e3:.0f} | {ref_ms * 1e3 / us:.0f}× | "
                f"{kbw('_down_kernel', w_down)} | {kt.get('_row_kernel', float('nan')):.1f} µs | "
                f"{kbw('_query_kernel', w_query)} | split_k {p['down']['SPLIT_K']}, grids {p['down']['grid']}/"
                f"{p['row']['grid']}/{p['query']['grid']} | {verdict} |")
    log(rows[-1])


def sweep_shape(mode: str, T: int, N: int, cbw: float, sweep_rows: list) -> None:
    inp = make(mode, T, N)
    wb = weight_bytes(inp)
    sets = rotations(inp)
    us = graph_us([kernel_call(d) for d in sets] * max(1, 8 // len(sets)))
    sweep_rows.append(f"| {mode} | {T} | json | {us:.1f} | {100 * wb / (us * 1e-6) / cbw:.0f}% |")
    cands = [(f"down {d}", {"down": d}) for d in DOWN_SWEEP[1:]] + [(f"query {q}", {"query": q}) for q in QUERY_SWEEP[1:]]
    best = {}
    if cands:
        for name, ov in cands:
            try:
                t = graph_us([kernel_call(d, ov) for d in sets] * max(1, 8 // len(sets)))
            except Exception as e:  # noqa: BLE001
                sweep_rows.append(f"| {mode} | {T} | {name} | error {type(e).__name__} | |")
                continue
            sweep_rows.append(f"| {mode} | {T} | {name} | {t:.1f} | {100 * wb / (t * 1e-6) / cbw:.0f}% |")
            log(sweep_rows[-1])
            kind = name.split()[0]
            if t < best.get(kind, (us, None))[0]:
                best[kind] = (t, ov[kind])
        if best:
            ov = {k: v[1] for k, v in best.items()}
            t = graph_us([kernel_call(d, ov) for d in sets] * max(1, 8 // len(sets)))
            sweep_rows.append(f"| {mode} | {T} | best combined {ov} | {t:.1f} | {100 * wb / (t * 1e-6) / cbw:.0f}% |")
            log(sweep_rows[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="markdown file to write")
    ap.add_argument("--T", default="1,32,128")
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--modes", default="bf16,a8w8")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--warm", action="store_true", help="only compile every config (no timing)")
    ap.add_argument("--budget_s", type=float, default=1e9, help="skip remaining shapes after this many seconds")
    args = ap.parse_args()
    t0 = time.time()
    Ts = [int(t) for t in args.T.split(",")]
    modes = args.modes.split(",")
    cbw = 0.0 if args.warm else copy_bandwidth()
    if not args.warm:
        log(f"copy bandwidth {cbw / 1e12:.2f} TB/s")
    rows, sweep_rows = [], []
    for mode in modes:
        for T in Ts:
            if time.time() - t0 > args.budget_s:
                log(f"[budget] skipping {mode} T={T}")
                continue
            try:
                bench(mode, T, args.N, cbw, args.sweep and args.warm, rows, sweep_rows, args.warm)
            except Exception:  # noqa: BLE001
                log(f"{mode} T={T} failed:\n{traceback.format_exc()}")
                rows.append(f"| {mode} | {T} | {args.N} | error (see log) |")
            torch.cuda.empty_cache()
            write(args, cbw, rows, sweep_rows)
    if args.sweep and not args.warm:
        for mode in modes:
            for T in Ts:
                if time.time() - t0 > args.budget_s:
                    log(f"[budget] skipping sweep {mode} T={T}")
                    continue
                try:
                    sweep_shape(mode, T, args.N, cbw, sweep_rows)
                except Exception:  # noqa: BLE001
                    log(f"sweep {mode} T={T} failed:\n{traceback.format_exc()}")
                torch.cuda.empty_cache()
                write(args, cbw, rows, sweep_rows)
    if args.warm:
        return 0
    print(write(args, cbw, rows, sweep_rows))
    return 0


def write(args, cbw: float, rows: list, sweep_rows: list) -> str:
    if args.warm:
        return ""
    head = ["# ds::mla_prolog — Triton vs unfused PyTorch (generated by perf/bench_mla_prolog.py)", "",
            f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
            f"measured copy bandwidth {cbw / 1e12:.2f} TB/s.", "",
            f"Command: `python3 perf/bench_mla_prolog.py {' '.join(sys.argv[1:])}`", "",
            "| mode | T | N | weights MB | Triton µs (graph) | weight GB/s | % of copy BW | Triton µs (eager, "
            "launch gaps) | unfused PyTorch µs | speedup | down GEMM | row kernel | query GEMM + W_UK + RoPE | plan | "
            "correct vs reference |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    text = "\n".join(head + rows)
    if sweep_rows:
        text += "\n\nSweep (CUDA-graph µs per call; overrides of the JSON bucket):\n\n| mode | T | config | µs | % of copy BW |\n|---|---|---|---|---|\n"
        text += "\n".join(sweep_rows)
    text += "\n"
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
