#!/usr/bin/env python3
"""How fast can MLAProlog's weights stream without our kernels? ``ds::mla_prolog`` (Triton, the "cuda" table)
against its three GEMMs alone through cuBLAS, back to back, with nothing else (no norms, quantisation, RoPE or
cache scatter), at DeepSeek-V3 shapes with 128 heads:

* down:   x [T, 7168] @ [W_DQ ‖ W_DKV_KR] [7168, 2112] (concatenated once, offline);
* query:  cqn [T, 1536] @ W_UQ_QR [1536, 24576];
* absorb: q_nope [128, T, 128] @ W_UK [128, 128, 512] (bf16 in both modes: W_UK is never quantised).

bf16 uses ``torch.matmul`` / ``torch.bmm``; A8W8 uses ``torch._int_mm`` on K-major int8 weights (int32 out, no
dequant epilogue; cuBLASLt wants more than 16 rows, so T ≤ 16 runs as 17 rows). Weights are rotated past 2× L2,
CUDA-graph replay of back-to-back calls, median of the rounds; (%) = weight bytes / time against the copy rate
(issue 4's floor: 60 %).

    python3 perf/bench_prolog_gemms.py [--T 1,32,128] [--modes bf16,a8w8] [--rounds 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from perf import bench_mla_prolog as B  # noqa: E402
from perf.peaks import copy_tbs  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us  # noqa: E402

N_HEADS, D, HCQ = 128, 128, 1536


def _gemm_sets(sets: list[dict], mode: str, T: int) -> list[dict]:
    """Per rotated weight set: the concatenated down weight, W_UQ_QR, W_UK, and activations of the right dtypes."""
    out = []
    g = torch.Generator(device="cuda").manual_seed(1)
    rows = max(T, 17) if mode == "a8w8" else T
    for s in sets:
        wdq, wkv = s["weight_dq"], s["weight_dkv_kr"]
        if mode == "a8w8":   # K-major [K, N] views of [N, K] memory, as pack_weights stores them
            wdown = torch.cat([wdq.t(), wkv.t()], 0).t()
            x = torch.randint(-127, 128, (rows, wdq.shape[0]), device="cuda", dtype=torch.int8, generator=g)
            cqn = torch.randint(-127, 128, (rows, HCQ), device="cuda", dtype=torch.int8, generator=g)
        else:
            wdown = torch.cat([wdq, wkv], 1)
            x = torch.randn(rows, wdq.shape[0], device="cuda", dtype=torch.bfloat16, generator=g)
            cqn = torch.randn(rows, HCQ, device="cuda", dtype=torch.bfloat16, generator=g)
        qn = torch.randn(N_HEADS, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
        out.append(dict(wdown=wdown, wuq=s["weight_uq_qr"], wuk=s["weight_uk"], x=x, cqn=cqn, qn=qn))
    return out


def _fns(gs: list[dict], mode: str) -> dict:
    mm = torch._int_mm if mode == "a8w8" else torch.matmul
    parts = {"down": lambda d: mm(d["x"], d["wdown"]),
             "query": lambda d: mm(d["cqn"], d["wuq"]),
             "absorb": lambda d: torch.bmm(d["qn"], d["wuk"])}

    def chain(d):
        parts["down"](d)
        parts["query"](d)
        return parts["absorb"](d)
    parts["all three"] = chain
    return {name: [lambda d=d, f=f: f(d) for d in gs] for name, f in parts.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", default="1,32,128", help="token counts")
    ap.add_argument("--modes", default="bf16,a8w8", help="bf16 and / or a8w8")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (default 3)")
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")
    copy = copy_tbs("cuda")
    lines = [f"# MLAProlog: ds::mla_prolog against its three GEMMs alone on cuBLAS ({torch.cuda.get_device_name()}, "
             f"torch {torch.__version__}, copy {copy:.2f} TB/s)", "",
             f"Command: `python3 perf/bench_prolog_gemms.py --T {a.T} --modes {a.modes} --rounds {a.rounds}`. µs per "
             "call, CUDA-graph replay over weights rotated past 2× L2, median of the rounds; (%) = weight bytes of "
             "what is timed / time against the copy rate (floor 60 %).", "",
             "| mode | T | weights MB | ds::mla_prolog | cuBLAS: down | query | absorb | all three |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in a.modes.split(","):
        for T in (int(t) for t in a.T.split(",")):
            inp = B.make(mode, T, N_HEADS)
            sets = B.rotations(inp)
            gs = _gemm_sets(sets, mode, T)
            fns = {"ds::mla_prolog": [B.kernel_call(s) for s in sets], **_fns(gs, mode)}
            nbytes = {"ds::mla_prolog": B.weight_bytes(inp),
                      "down": gs[0]["wdown"].numel() * gs[0]["wdown"].element_size(),
                      "query": gs[0]["wuq"].numel() * gs[0]["wuq"].element_size(),
                      "absorb": gs[0]["wuk"].numel() * gs[0]["wuk"].element_size()}
            nbytes["all three"] = nbytes["down"] + nbytes["query"] + nbytes["absorb"]
            times = median_graph_us(fns, a.rounds, calls=2 * len(sets), replays=10)
            cells = [f"{times[n]:.1f} ({100 * nbytes[n] / (times[n] * 1e-6) / (copy * 1e12):.0f} %)" for n in fns]
            lines.append(f"| {mode} | {T} | {nbytes['ds::mla_prolog'] / 1e6:.1f} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
            del inp, sets, gs, fns
            torch.cuda.empty_cache()
    print_and_write_lines(lines, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
