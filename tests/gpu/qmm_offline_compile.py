#!/usr/bin/env python3
"""Offline sm_90a compile of every decode quant_matmul candidate of ``perf/bench_quant_gating.py --sweep2`` (no GPU).

    .venv/bin/python tests/gpu/qmm_offline_compile.py > tests/gpu/results/qmm_round6_offline.md.rows
    .venv/bin/python tests/gpu/qmm_offline_compile.py m1_gemv     # round 7: the streaming GEMV candidates

For each candidate (at its group's largest M, the launcher's plan for 132 SMs): registers and spills (ptxas -v of the
bundled ptxas, sm_90a), shared memory (Triton's metadata), CTAs resident per SM (H100/H200: 228 KB shared memory
with 1 KB reserved per CTA, 64K registers allocated per warp in units of 256), wgmma / mma.sync / cp.async counts in
the PTX. Used to prune candidates before they cost GPU time; triton here may be newer than on the GPU box.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

import ops.triton.quant as T  # noqa: E402

PTXAS = (glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas-blackwell"))
         or glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")))[0]


def ctas_per_sm(smem: int, regs: int | None, warps: int) -> int | None:
    """CTAs of one kernel resident per sm_90 SM: shared memory (228 KB, 1 KB reserved per CTA), registers (64K per
    SM, allocated per warp in units of 256), 64 warps."""
    if regs is None:
        return None
    per_warp = -(-regs * 32 // 256) * 256
    return min(228 * 1024 // (smem + 1024), 65536 // (per_warp * warps), 64 // warps, 32)


def _compile_sm90(fn, sig: dict, const: dict, W: int, S: int) -> tuple[str, dict]:
    """Compile ``fn`` with these constexprs for sm_90a (pointer / int arguments other than M and SPLIT_K marked
    16-divisible, as the launcher's arguments are) and run ptxas: (PTX, dict(regs, spill, smem, cta))."""
    sig.update({k: "constexpr" for k in const})
    names = [p.name for p in fn.params]
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in sig and sig[n] != "constexpr" and n not in ("M", "SPLIT_K")}
    ck = triton.compile(triton.compiler.ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 64),
                        options=dict(num_warps=W, num_stages=S))
    ptx = ck.asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "k.ptx"), "w").write(ptx)
        r = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", os.path.join(d, "k.ptx"), "-o",
                            os.path.join(d, "k.cubin")], capture_output=True, text=True)
    m = re.search(r"Used (\d+) registers", r.stderr)
    sp = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    regs = int(m.group(1)) if m else None
    return ptx, dict(regs=regs if m else r.stderr[-200:], spill=sp.groups() if sp else None,
                     smem=ck.metadata.shared, cta=ctas_per_sm(ck.metadata.shared, regs, W))


def compile_case(BM, BN, BK, W, S, mma=0, partials=False, mask_m=True):
    fn = T._qmm_kernel
    sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
           "out_ptr": "*bf16", "part_ptr": "*i32" if partials else "*bf16", "cnt_ptr": "*i32" if partials else "*bf16",
           "M": "i32", "N": "i32", "K": "i32", "K_PER_SPLIT": "i32", "SPLIT_K": "i32", "stride_xm": "i32",
           "stride_wk": "constexpr", "stride_wn": "i32", "stride_om": "i32"}
    const = dict(stride_wk=1, W_LAYOUT=0, WRAP=True, PARTIALS=partials, HAS_BIAS=False, EVEN_K=True, BLOCK_M=BM,
                 BLOCK_N=BN, BLOCK_K=BK, GROUP_M=1, REDUCE=partials, MASK_M=mask_m, MMA=mma)
    ptx, res = _compile_sm90(fn, sig, const, W, S)
    return dict(res, wgmma=ptx.count("wgmma.mma_async"), mma=ptx.count("mma.sync"),
                cpasync=ptx.count("cp.async.cg") + ptx.count("cp.async.ca"))


def compile_gemv_stream(MR, BN, BKU, W, dp4a, partials=False, even=True, prefetch=False):
    """:func:`ops.triton.quant._qmm_gemv_kernel` (``mma: "gemv_stream"``) for sm_90a: the same columns plus the
    loop's vector loads and dp4a count (BKU: K per step in load units, int32 words with dp4a)."""
    fn = T._qmm_gemv_kernel
    sig = {"x_ptr": "*i8", "w_ptr": "*i8", "ws_ptr": "*fp32", "xs_ptr": "*fp32", "bias_ptr": "*fp32",
           "out_ptr": "*bf16", "part_ptr": "*i32" if partials else "*bf16", "cnt_ptr": "*i32" if partials else "*bf16",
           "M": "i32", "N": "i32", "K_U": "i32", "K_PER_SPLIT_U": "i32", "SPLIT_K": "i32", "stride_xm_u": "i32",
           "stride_wk_u": "constexpr", "stride_wn_u": "i32", "stride_om": "i32"}
    const = dict(stride_wk_u=1, MROWS=MR, HAS_BIAS=False, EVEN_K=even, BLOCK_N=BN, BLOCK_KU=BKU, PARTIALS=partials,
                 REDUCE=partials, DP4A=dp4a, PREFETCH=prefetch)
    ptx, res = _compile_sm90(fn, sig, const, W, 1)
    return dict(res, wgmma=0, mma=ptx.count("dp4a"), cpasync=ptx.count("ld.global.v4"))


def main() -> int:
    """Rows: | group | candidate | split | items | regs | spill | smem | CTA/SM | wgmma | mma.sync | cp.async |;
    gemv_stream candidates put dp4a in the mma.sync column and ld.global.v4 in the cp.async one. Arguments:
    group names to compile (default: every group of QMM_GROUPS)."""
    want = sys.argv[1:]
    sys.argv = sys.argv[:1]
    spec = importlib.util.spec_from_file_location("bench_qg", os.path.join(REPO, "perf", "bench_quant_gating.py"))
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    seen = {}
    groups = dict(b.QMM_GROUPS, **b.QMM_GEMV_GROUPS)
    for g, grp in groups.items():
        if want and g not in want or not want and g not in b.QMM_GROUPS:
            continue
        for name, c0 in [("default", None)] + list(grp["cands"].items()):
            for K, N in grp["shapes"]:
                M = grp["Ms"][-1]
                p = T._make_qmm_plan(M, N, K, "cuda", c0, None, 132)
                c = p if c0 is None else c0   # default: the bucket the table picks for this shape
                if c.get("mma") == "gemv_stream":
                    u = 4 if c.get("dp4a") else 1
                    key = ("gs", M, c["BLOCK_N"], c["BLOCK_K"] // u, c["num_warps"], bool(c.get("dp4a")),
                           p["SPLIT_K"] > 1, K % c["BLOCK_K"] == 0, bool(c.get("prefetch")))
                    if key not in seen:
                        try:
                            seen[key] = compile_gemv_stream(*key[1:])
                        except Exception as e:  # noqa: BLE001
                            seen[key] = dict(err=f"{type(e).__name__}: {str(e)[:120]}")
                    r = seen[key]
                    items = -(-N // c["BLOCK_N"]) * p["SPLIT_K"]
                    print(f"| {g} | {name} | {p['SPLIT_K']} | {items} | {r.get('regs')} | {r.get('spill')} | "
                          f"{r.get('smem')} | {r.get('cta')} | 0 | dp4a {r.get('mma')} | ld.v4 {r.get('cpasync')} |"
                          f"{(' ' + r['err'] + ' |') if 'err' in r else ''}", flush=True)
                    continue
                mma = T._MMA_MODES[c.get("mma", "dot")]
                part = p["SPLIT_K"] > 1
                key = (c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"], mma, part,
                       bool(c.get("mask_m", False)))
                if key not in seen:
                    try:
                        seen[key] = compile_case(*key[:5], mma=mma, partials=part, mask_m=key[7])
                    except Exception as e:  # noqa: BLE001
                        seen[key] = dict(err=f"{type(e).__name__}: {str(e)[:120]}")
                r = seen[key]
                items = -(-M // c["BLOCK_M"]) * -(-N // c["BLOCK_N"]) * p["SPLIT_K"]
                print(f"| {g} | {name} | {p['SPLIT_K']} | {items} | {r.get('regs')} | {r.get('spill')} | {r.get('smem')} | {r.get('cta')} "
                      f"| {r.get('wgmma')} | {r.get('mma')} | {r.get('cpasync')} |{(' ' + r['err'] + ' |') if 'err' in r else ''}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
