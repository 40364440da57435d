#!/usr/bin/env python3
"""Benchmark of the Triton ds::mla_prolog kernels vs the unfused PyTorch reference, on one GPU.

    python3 perf/bench_mla_prolog.py --out docs/perf/mla_prolog_results.md [--T 1,32,128] [--modes bf16,a8w8]
                                     [--sweep [--no_bench] [--jobs 12]] [--warm] [--budget_s S]

Config sweep in one command (~80-110 s on the H200 with 16 CPU cores):

    python3 perf/bench_mla_prolog.py --sweep --no_bench --budget_s 95 --out $OUT/mla_prolog_sweep3.md

The sweep times the JSON defaults (sweep 2 / 3 winners: row buckets per T, down split_k 4 / int8 BLOCK_M 64, the
fused row + query launch at T = 1) against the runner-up of each choice (SWEEP / SWEEP_MODE_T: the unfused launch at
T = 1, PRE_UK 0, 5 query stages, the other row warps / parts per T, int8 down tiles at T = 1 / 32), T = 1, 32, 128,
bf16 and a8w8. (The W_UK L2-prefetch programs, ``prefetch_tail``, query ``uk_l2`` and ``absorb_split`` lost in every
measurement and were removed from the kernels: docs/perf/mla_prolog.md, session 4.)

``--row_diag`` first profiles the row kernel (per-kernel µs at T = 1, the unfused launch) in bf16 / partial / a8w8
for a few row configs (ROW_DIAG): what the row kernel's time is made of (~10-15 s of the budget).

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
behind ops/triton/configs/mla_prolog.json): first it compiles every (mode, T, candidate) launch in
``--jobs`` processes at once (Triton's cache is on disk), then, alone on the GPU, per (mode, T) it times
the JSON's config and each candidate (``SWEEP``: one kernel's bucket overridden at a time) by the same
graph replay with rotated weights, checks each one's outputs and cache rows against the reference (a
wrong candidate is never picked), times the combination of the per-kernel bests and prints one
``WINNER <mode> T=<T> <kernel> (...): <config json>`` line per kernel — the bucket to put into the
JSON's "cuda" table (``_table`` names its list) — plus the per-kernel profile of the JSON and the winner.
``--no_bench`` skips the main table (reference timing, eager timing) to keep the sweep short. ``--warm``
only compiles.
"""
from __future__ import annotations

import argparse
import json
import math
import os
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

# sweep candidates: overrides of the bucket the JSON picks for (mode, T), one kernel at a time (the three
# launches are serial, so per-kernel gains add up; the combination of per-kernel bests is timed at the end).
# After sweep 3 the JSON holds every winner; these are the runners-up, so each JSON choice is re-checked against them
# in the same run.
SWEEP = {
    "query": [{"PRE_UK": 0}],
    "row": [],
    "down": [],
}
# query "fuse_row_max_t" 0: the row and query kernels as two launches again at T = 1 (the JSON fuses them there)
_UNFUSED = {"fuse_row_max_t": 0}
SWEEP_MODE_T = {  # extra candidates for (mode, token count)
    # (no row candidates at T = 1: the fused launch there has no row kernel of its own)
    ("bf16", 1): {"query": [_UNFUSED, {"num_stages": 5}]},
    ("bf16", 32): {"query": [{"num_stages": 5}], "row": [{"num_warps": 8}]},
    ("bf16", 128): {"row": [{"num_warps": 16, "parts": 1}]},
    # int8 down at T = 1 (6.4 us for 15 MB: 2.4 TB/s): more bytes in flight per program (BLOCK_K 256, 20 KB per
    # stage) or twice the programs (split_k 16, 3-4 K steps each); int8 query at T <= 32: 5 stages, or BLOCK_K 256
    # (53 KB per stage; the launcher lowers stages to fit shared memory)
    ("a8w8", 1): {"query": [_UNFUSED, {"num_stages": 5}, {"BLOCK_K": 256, "num_stages": 3}],
                  "down": [{"BLOCK_K": 256, "num_stages": 3}, {"split_k": 16}]},
    ("a8w8", 32): {"query": [{"num_stages": 5}], "row": [{"num_warps": 8}], "down": [{"BLOCK_K": 256, "num_stages": 3}]},
    ("a8w8", 128): {"row": [{"parts": 2, "num_warps": 8}]},
}
# the query candidates apply where the JSON's query bucket has one token tile per head (T <= 32); at T = 128 only
# the SWEEP_MODE_T ones
QUERY_MAX_T = 32


def sweep_candidates(T: int, mode: str = "bf16") -> list[tuple[str, dict]]:
    """(kernel, override) pairs for (mode, token count T) (the JSON's own choice is timed separately)."""
    out = []
    extra = SWEEP_MODE_T.get((mode, T), {})
    for kern in ("query", "row", "down"):  # most expected gain first (a budget cut drops the tail)
        base = SWEEP[kern] if kern != "query" or T <= QUERY_MAX_T else []
        for ov in base + extra.get(kern, []):
            out.append((kern, ov))
    return out


# row-kernel diagnosis (--row_diag): per-kernel device µs (torch.profiler) at T = 1 of these row configs in the
# modes that separate the A8W8 row kernel's extra work: "partial" = per-token int8 quant of cq without the
# int32 dequant, "a8w8" = both; "bf16" = neither. All with the row kernel as its own launch (fuse_row_max_t 0).
ROW_DIAG_MODES = ("bf16", "partial", "a8w8")
ROW_DIAG = [{"query": _UNFUSED}] + [{"query": _UNFUSED, "row": r} for r in
                                    ({"num_warps": 8}, {"parts": 1, "num_warps": 16}, {"parts": 1, "num_warps": 4})]


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
    """Median per-call µs of a CUDA graph holding fn_list's calls back to back (perf/timers.py ``graph_time_us``)."""
    from perf.timers import graph_time_us
    return graph_time_us(fn_list, calls=len(fn_list), replays=replays).p50_us


def copy_bandwidth() -> float:
    """Device copy bandwidth in bytes/s, read + written (perf/peaks.py ``copy_tbs``, the report's ceiling)."""
    from perf.peaks import copy_tbs
    return copy_tbs("cuda") * 1e12


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
    # the down GEMM is quant_matmul's streaming GEMV where down.gemv_max_t takes it (A8W8, T = 1)
    names = {"_row_query_kernel": "_row_query_kernel", "_down_kernel": "_down_kernel",
             "_qmm_gemv_kernel": "_down_kernel", "_row_kernel": "_row_kernel", "_query_kernel": "_query_kernel"}
    for e in prof.key_averages():
        for name, as_name in names.items():  # fused one first
            if name in e.key:
                tot = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
                out[as_name] = out.get(as_name, 0.0) + tot / max(e.count, 1)
                break
    return out


def kernel_us_text(kt: dict) -> str:
    """'down a, row b, query c' (or 'down a, row+query (one launch) d' for the fused launch)."""
    if "_row_query_kernel" in kt:
        return f"down {kt.get('_down_kernel', 0):.1f}, row+query (one launch) {kt['_row_query_kernel']:.1f}"
    return f"down {kt.get('_down_kernel', 0):.1f}, row {kt.get('_row_kernel', 0):.1f}, query {kt.get('_query_kernel', 0):.1f}"


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
    gemv = K.down_uses_gemv(inp["token_x"], inp["weight_dq"], inp["weight_dkv_kr"], 512, 64)
    p = K.plan(T, 7168, 1536, N, 128, 64, 512, torch.device("cuda"), int8_down=mode == "a8w8",
               int8_query=mode == "a8w8", gemv=gemv)
    cands = [("json", None)]
    if sweep:
        cands += [(f"{k} {ov}", {k: ov}) for k, ov in sweep_candidates(T, mode)]
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

    if "_row_query_kernel" in kt:   # the fused row + query launch (config fuse_row_max_t)
        row_col, query_col = "in the query launch", f"{kbw('_row_query_kernel', w_query)} (row + query, one launch)"
    else:
        row_col = f"{kt['_row_kernel']:.1f} µs" if "_row_kernel" in kt else "n/a"
        query_col = kbw('_query_kernel', w_query)
    rows.append(f"| {mode} | {T} | {N} | {wb / 1e6:.1f} | **{us:.1f}** | {gbs:.0f} | **{100 * gbs * 1e9 / cbw:.0f}%** | "
                f"{eager_ms * 1e3:.1f} | {ref_ms * 1e3:.0f} | {ref_ms * 1e3 / us:.0f}× | "
                f"{kbw('_down_kernel', w_down)} | {row_col} | {query_col} | {'GEMV (quant_matmul)' if gemv else 'split_k ' + str(p['down']['SPLIT_K'])}, grids {p['down']['grid'] or 'gemv'}/"
                f"{p['row']['grid']}/{p['query']['grid']} | {verdict} |")
    log(rows[-1])


def _check_against(ref: tuple, ref_caches: tuple, inp: dict, out: tuple) -> str | None:
    """None when ``out`` (and the caches in ``inp``) match the reference outputs; else why not."""
    from tolerances import assert_close
    try:
        assert_close(out[0], ref[0], "bf16", name="query")
        assert_close(out[1], ref[1], "bf16", name="query_rope")
        idx = inp["cache_index"].reshape(-1)
        w = idx[idx >= 0]
        assert_close(inp["kv_cache"].reshape(-1, 512)[w], ref_caches[0].reshape(-1, 512)[w], "bf16", name="kv rows")
        assert_close(inp["kr_cache"].reshape(-1, 64)[w], ref_caches[1].reshape(-1, 64)[w], "bf16", name="kr rows")
        return None
    except AssertionError as e:
        return str(e).splitlines()[0][:200]


def bucket_config(mode: str, T: int, kern: str, ov: dict | None) -> dict:
    """The JSON bucket (or row section) the launcher uses for (mode, T, kernel), with ``ov`` applied: what to
    paste into ops/triton/configs/mla_prolog.json["cuda"]."""
    cfg = K._all_configs()["cuda"][kern]
    if kern == "row" and not any(k.startswith("buckets") for k in cfg):
        b = dict(cfg)   # flat row section
    elif kern == "row":  # the row bucket for (mode, T): "buckets_int8" when token_x is int8 (a8w8)
        key = "buckets_int8" if mode == "a8w8" and "buckets_int8" in cfg else "buckets"
        b = dict(K._bucket(T, cfg[key]))
        b["_table"] = key
    else:  # a8w8 winners go to "buckets_int8" (the launcher's table for int8 operands; create it from
        # "buckets" where the JSON has none yet)
        key = "buckets_int8" if mode == "a8w8" else "buckets"
        b = dict(K._bucket(T, cfg.get(key, cfg["buckets"])))
        b["_table"] = key
    b.update(ov or {})
    return b


def sweep_shape(mode: str, T: int, N: int, cbw: float, sweep_rows: list, winners: list, t_end: float) -> None:
    """Time the JSON config and every candidate of :func:`sweep_candidates` by CUDA-graph replay with rotated
    weights, check each against the reference, and pick per kernel the fastest correct one (ties within 1 %
    keep the JSON); then time the combination of the per-kernel winners."""
    inp = make(mode, T, N)
    wb = weight_bytes(inp)
    sets = rotations(inp)
    a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    ref = R.mla_prolog(**a)
    ref_caches = (a["kv_cache"], a["kr_cache"])

    def measure(ov):
        b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
        out = K.mla_prolog_config(**b, overrides=ov)
        torch.cuda.synchronize()
        bad = _check_against(ref, ref_caches, b, out)
        if bad:
            return None, bad
        return graph_us([kernel_call(d, ov) for d in sets] * max(1, 8 // len(sets))), None

    def row(name, t, bad=None):
        if bad:
            sweep_rows.append(f"| {mode} | {T} | {name} | WRONG: {bad} | |")
        else:
            sweep_rows.append(f"| {mode} | {T} | {name} | {t:.1f} | {100 * wb / (t * 1e-6) / cbw:.0f}% |")
        log(sweep_rows[-1])

    try:
        base, bad = measure(None)
    except Exception as e:  # noqa: BLE001  (the candidates are still worth timing)
        base, bad = float("inf"), f"error {type(e).__name__}: {str(e)[:160]}"
    row("json", base, bad)
    if bad:
        base = float("inf")
    best: dict[str, tuple[float, dict]] = {}
    for kern, ov in sweep_candidates(T, mode):
        if time.time() > t_end:
            log(f"[budget] {mode} T={T}: stopping the sweep early")
            break
        try:
            t, bad = measure({kern: ov})
        except Exception as e:  # noqa: BLE001  (compile failure, shared memory overflow, ...)
            sweep_rows.append(f"| {mode} | {T} | {kern} {json.dumps(ov)} | error {type(e).__name__}: {str(e)[:120]} | |")
            log(sweep_rows[-1])
            continue
        row(f"{kern} {json.dumps(ov)}", t, bad)
        if bad is None and t < 0.99 * min(base, best.get(kern, (float("inf"),))[0]):
            best[kern] = (t, ov)
    # final choice: the fastest correct of the JSON, each kernel's best alone, and all of them combined
    finals = [(base, {})] + [(t, {k: ov}) for k, (t, ov) in best.items()]
    if len(best) > 1:
        comb = {k: v[1] for k, v in best.items()}
        t, bad = measure(comb)
        row(f"combined {json.dumps(comb)}", t, bad)
        if bad is None:
            finals.append((t, comb))
    t_comb, comb = min(finals, key=lambda f: f[0])
    pct = 100 * wb / (t_comb * 1e-6) / cbw
    for name, ov in (("json", None), ("winner", comb or None)):
        if time.time() > t_end or (name == "winner" and not comb):
            break
        try:  # where the time goes: per-kernel device µs (torch.profiler, eager calls, rotating weights)
            kt = profile_kernels(sets, ov)
            sweep_rows.append(f"| {mode} | {T} | {name}: per-kernel µs | {kernel_us_text(kt)} | |")
            log(sweep_rows[-1])
        except Exception as e:  # noqa: BLE001
            log(f"profiler failed: {e}")
    for kern in ("down", "row", "query"):
        cfg = bucket_config(mode, T, kern, comb.get(kern))
        tag = "changed" if kern in comb else "json kept"
        winners.append(f"WINNER {mode} T={T} {kern} ({tag}; call {t_comb:.1f} µs = {pct:.0f}% of copy BW, json "
                       f"{base:.1f} µs): {json.dumps(cfg)}")
        log(winners[-1])


def row_diag(N: int, sweep_rows: list, t_end: float) -> None:
    """Per-kernel µs (eager profile, rotating weights) of each ROW_DIAG config in each ROW_DIAG_MODES mode at
    T = 1, each checked against the reference first (a wrong one is reported, not profiled)."""
    for mode in ROW_DIAG_MODES:
        inp = make(mode, 1, N)
        sets = rotations(inp)
        a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
        ref = R.mla_prolog(**a)
        for ov in ROW_DIAG:
            if time.time() > t_end:
                log("[budget] row diag stopped")
                return
            name = f"row diag {json.dumps(ov['row']) if ov and 'row' in ov else 'json'}, unfused"
            try:
                b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
                out = K.mla_prolog_config(**b, overrides=ov)
                torch.cuda.synchronize()
                bad = _check_against(ref, (a["kv_cache"], a["kr_cache"]), b, out)
                if bad:
                    sweep_rows.append(f"| {mode} | 1 | {name} | WRONG: {bad} | |")
                else:
                    kt = profile_kernels(sets, ov)
                    sweep_rows.append(f"| {mode} | 1 | {name}: per-kernel µs | {kernel_us_text(kt)} | |")
            except Exception as e:  # noqa: BLE001
                sweep_rows.append(f"| {mode} | 1 | {name} | error {type(e).__name__}: {str(e)[:120]} | |")
            log(sweep_rows[-1])
        del sets
        torch.cuda.empty_cache()


def _warm_jobs(modes, Ts, diag: bool = False) -> list[tuple[str, int, dict | None]]:
    jobs = []
    if diag:
        jobs += [(m, 1, ov) for m in ROW_DIAG_MODES for ov in ROW_DIAG]
    for mode in modes:
        for T in Ts:
            jobs.append((mode, T, None))
            jobs += [(mode, T, {k: ov}) for k, ov in sweep_candidates(T, mode)]
    return jobs


def warm_part(modes, Ts, part: int, parts: int, N: int, diag: bool = False) -> None:
    """Compile a contiguous share of the sweep's (mode, T, candidate) launches (fills Triton's disk cache)."""
    jobs = _warm_jobs(modes, Ts, diag)
    n = len(jobs)
    mine = jobs[part * n // parts:(part + 1) * n // parts]
    cur, inp = None, None
    for mode, T, ov in mine:
        if cur != (mode, T):
            cur, inp = (mode, T), make(mode, T, N)
        try:
            K.mla_prolog_config(**inp, overrides=ov)
        except Exception as e:  # noqa: BLE001
            log(f"[warm] {mode} T={T} {ov}: {type(e).__name__}: {str(e)[:200]}")
    torch.cuda.synchronize()
    log(f"[warm] part {part}/{parts}: {len(mine)} launches compiled")


def precompile(args, modes, Ts) -> None:
    """Run :func:`warm_part` in ``--jobs`` processes at once (Triton compiles on the CPU; its cache is on disk)."""
    import subprocess
    procs = []
    for i in range(args.jobs):
        c = [sys.executable, os.path.abspath(__file__), "--warm", "--sweep", "--modes", ",".join(modes), "--T",
             ",".join(map(str, Ts)), "--N", str(args.N), "--part", f"{i}/{args.jobs}"] + (["--row_diag"] if args.row_diag else [])
        procs.append(subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        try:
            out, _ = p.communicate(timeout=args.warm_timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n[warm] killed after --warm_timeout_s"
        for line in out.splitlines():
            if line.startswith("[warm]") or "Error" in line:
                log(line)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="markdown file to write")
    ap.add_argument("--T", default="1,32,128")
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--modes", default="bf16,a8w8")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--warm", action="store_true", help="only compile every config (no timing)")
    ap.add_argument("--budget_s", type=float, default=1e9, help="skip remaining shapes after this many seconds")
    ap.add_argument("--jobs", type=int, default=14, help="--sweep: parallel compile processes (0 = compile inline)")
    ap.add_argument("--warm_timeout_s", type=float, default=55.0, help="--sweep: wait at most this for the compiles")
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--row_diag", action="store_true", help="--sweep: first profile the row kernel configs of ROW_DIAG "
                    "in the modes ROW_DIAG_MODES at T = 1 (per-kernel µs, ~10 s)")
    ap.add_argument("--no_bench", action="store_true", help="--sweep only: skip the main table (reference timing, profile)")
    args = ap.parse_args()
    t0 = time.time()
    Ts = [int(t) for t in args.T.split(",")]
    modes = args.modes.split(",")
    if args.warm and args.part:
        i, n = (int(v) for v in args.part.split("/"))
        warm_part(modes, Ts, i, n, args.N, args.row_diag)
        return 0
    if args.sweep and not args.warm:
        if args.jobs > 0:
            precompile(args, modes, Ts)
            log(f"[{time.time() - t0:.0f}s] precompiled the sweep in {args.jobs} processes")
    cbw = 0.0 if args.warm else copy_bandwidth()
    if not args.warm:
        log(f"copy bandwidth {cbw / 1e12:.2f} TB/s")
    rows, sweep_rows, winners = [], [], []
    for mode in modes:
        for T in Ts:
            if args.sweep and args.no_bench and not args.warm:
                continue
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
    if args.sweep and not args.warm and args.row_diag:
        try:
            row_diag(args.N, sweep_rows, t0 + args.budget_s)
        except Exception:  # noqa: BLE001
            log(f"row diag failed:\n{traceback.format_exc()}")
        write(args, cbw, rows, sweep_rows, winners)
    if args.sweep and not args.warm:
        shapes = [(m, T) for m in modes for T in Ts]
        for i, (mode, T) in enumerate(shapes):
                left = t0 + args.budget_s - time.time()
                if left <= 0:
                    log(f"[budget] skipping sweep {mode} T={T}")
                    continue
                try:  # each remaining shape gets an equal share of what is left of the budget
                    sweep_shape(mode, T, args.N, cbw, sweep_rows, winners, time.time() + left / (len(shapes) - i))
                except Exception:  # noqa: BLE001
                    log(f"sweep {mode} T={T} failed:\n{traceback.format_exc()}")
                torch.cuda.empty_cache()
                write(args, cbw, rows, sweep_rows, winners)
    if args.warm:
        return 0
    text = write(args, cbw, rows, sweep_rows, winners)
    print(text)
    log(f"[{time.time() - t0:.0f}s] done")
    return 1 if "FAIL" in text else 0


def write(args, cbw: float, rows: list, sweep_rows: list, winners: list | None = None) -> str:
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
    if winners:
        text += "\n\nWinners (per kernel; the JSON bucket / row section with the winning override applied):\n\n```\n"
        text += "\n".join(winners) + "\n```"
    text += "\n"
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
