"""Shared helpers of tests/gpu/check_amla.py and perf/bench_amla.py (GPU; also runs on CPU under
TRITON_INTERPRET=1 with --smoke): paged inputs with NaN everywhere unused, output poisoning, parallel
pre-compilation of the Triton variants a run will need, the unfused PyTorch baseline."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import ops.triton.amla as tri  # noqa: E402


def poison_allocations() -> None:
    """Every output / partial buffer the launcher allocates starts as NaN (checks that all is written)."""
    def _empty(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    tri._empty = _empty


def paged_inputs(B, S_q, N, lens, bs, dtype, device, gen, *, unused=-1, extra_blocks=2, spare=3, Dc=512, Dr=64,
                 c_kv=None, k_rope=None, q=None):
    """Random queries and a paged cache (random page order) holding per-request keys; every unused slot of
    a last page and every spare page is NaN; unused block_table entries hold ``unused``. ``c_kv``/``k_rope``
    [B, Lmax, D] / ``q`` (q_nope, q_rope) may be given to page the same logical data differently."""
    lens = [int(x) for x in lens]
    Lmax = max(lens + [1])
    if c_kv is None:
        c_kv = torch.randn(B, Lmax, Dc, generator=gen, device=device).to(dtype)
        k_rope = torch.randn(B, Lmax, Dr, generator=gen, device=device).to(dtype)
    if q is None:
        q = (torch.randn(B, S_q, N, Dc, generator=gen, device=device).to(dtype),
             torch.randn(B, S_q, N, Dr, generator=gen, device=device).to(dtype))
    per = [-(-L // bs) for L in lens]
    max_blocks = max(per + [0]) + extra_blocks
    nb = sum(per) + spare
    order = torch.randperm(nb, generator=gen, device=device)
    kv = torch.full((nb, bs, 1, Dc), float("nan"), dtype=dtype, device=device)
    kr = torch.full((nb, bs, 1, Dr), float("nan"), dtype=dtype, device=device)
    bt = torch.full((B, max_blocks), unused, dtype=torch.int32, device=device)
    start = 0
    for b, (L, n) in enumerate(zip(lens, per)):
        if n == 0:
            continue
        pages = order[start:start + n]
        start += n
        bt[b, :n] = pages.to(torch.int32)
        full = torch.full((n * bs, Dc), float("nan"), dtype=dtype, device=device)
        full[:L] = c_kv[b, :L]
        kv[pages] = full.view(n, bs, 1, Dc)
        fr = torch.full((n * bs, Dr), float("nan"), dtype=dtype, device=device)
        fr[:L] = k_rope[b, :L]
        kr[pages] = fr.view(n, bs, 1, Dr)
    sl = torch.tensor(lens, dtype=torch.int32, device=device)
    return (q[0], q[1], kv, kr, bt, sl), (c_kv, k_rope)


# ----------------------------------------------------------------------------------------------
# parallel pre-compilation: each worker runs a tiny problem with the same compile-time parameters
# ----------------------------------------------------------------------------------------------
def compile_key(dtype, N, S_q, bs, causal, rescale, num_splits, config, device, round_c=None, max_keys=1 << 15, B=1,
                lazy=None):
    plan = tri.launch_plan(B, S_q, N, max_keys, device, config, num_splits)
    amla = rescale == "amla"
    return (str(dtype), plan["BLOCK_M"], plan["BLOCK_N"], plan["num_warps"], plan["num_stages"], plan["q_in_loop"],
            bs, bool(causal), rescale, amla and bool(plan["round_c"] if round_c is None else round_c),
            amla and float(plan["lazy"] if lazy is None else lazy), plan["num_splits"] > 1,
            plan["num_splits"] if plan["num_splits"] > 1 else 0, plan["persistent"], plan["skip"], plan["flat"],
            plan["dv_split"], plan["peel"], plan["float_guard"])


def _warm_one(job):
    t0 = time.time()
    dtype = getattr(torch, job["dtype"])
    dev = torch.device(job["device"])
    gen = torch.Generator(device=dev).manual_seed(0)
    args, _ = paged_inputs(1, job["S_q"], job["N"], [min(40, job["bs"] * 2)], job["bs"], dtype, dev, gen)
    tri.amla_variant(*args, 0.1, job["causal"], rescale=job["rescale"], num_splits=job["num_splits"],
                     config=job["config"], round_c=job.get("round_c"), lazy=job.get("lazy"))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.time() - t0


def _warm_one_safe(job):
    """_warm_one that reports a failure (a candidate that does not compile) instead of raising in the pool."""
    try:
        return _warm_one(job)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:200]}"


def prewarm(jobs: list[dict], workers: int = 12, log=print) -> None:
    """Compile the distinct variants of ``jobs`` (dicts: dtype name, N, S_q, bs, causal, rescale, num_splits,
    config, round_c, device) in parallel worker processes; they fill Triton's on-disk cache."""
    uniq = {}
    for j in jobs:
        dev = torch.device(j["device"])
        k = compile_key(getattr(torch, j["dtype"]), j["N"], j["S_q"], j["bs"], j["causal"], j["rescale"],
                        j["num_splits"], j["config"], dev, j.get("round_c"), j.get("max_keys", 1 << 15),
                        j.get("B", 1), j.get("lazy"))
        jj = dict(j)
        jj["num_splits"] = tri.launch_plan(j.get("B", 1), j["S_q"], j["N"], j.get("max_keys", 1 << 15), dev,
                                           j["config"], j["num_splits"])["num_splits"]
        uniq.setdefault(k, jj)
    t0 = time.time()
    if os.environ.get("TRITON_INTERPRET") == "1" or workers <= 1:
        for j in uniq.values():
            _warm_one(j)
    else:
        with cf.ProcessPoolExecutor(max_workers=min(workers, len(uniq)), mp_context=mp.get_context("spawn")) as ex:
            times = list(ex.map(_warm_one, uniq.values()))
        log(f"prewarm: {len(uniq)} variants compiled in {time.time() - t0:.1f} s wall "
            f"(per variant {min(times):.1f}–{max(times):.1f} s)")
        return
    log(f"prewarm: {len(uniq)} variants in {time.time() - t0:.1f} s")


# ----------------------------------------------------------------------------------------------
# unfused PyTorch baseline (uniform L per batch): gather pages, two bmm, softmax in fp32
# ----------------------------------------------------------------------------------------------
def torch_unfused(q_nope, q_rope, kv_cache, kr_cache, block_table, L: int, softmax_scale: float, causal=True):
    B, S_q, N, Dc = q_nope.shape
    bs = kv_cache.shape[1]
    nb = -(-L // bs)
    pages = block_table[:, :nb].long()
    kv = kv_cache[pages].reshape(B, nb * bs, Dc)[:, :L]
    kr = kr_cache[pages].reshape(B, nb * bs, kr_cache.shape[-1])[:, :L]
    q = torch.cat([q_nope, q_rope], -1).reshape(B, S_q * N, -1)
    k = torch.cat([kv, kr], -1)
    s = torch.bmm(q, k.transpose(1, 2)).float() * softmax_scale
    if causal and S_q > 1:
        tok = torch.arange(S_q, device=q.device).repeat_interleave(N)
        vis = torch.arange(L, device=q.device)[None, :] <= (L - S_q + tok)[:, None]
        s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).to(q.dtype)
    out = torch.bmm(p, kv).reshape(B, S_q, N, Dc)
    return out, lse.reshape(B, S_q, N)
