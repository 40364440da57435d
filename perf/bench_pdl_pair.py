#!/usr/bin/env python3
"""Programmatic dependent launch where it counts: a row quant kernel that produces x, then the quant_matmul that
reads it, as in a decoder layer (``rms_norm_dynamic_quant`` → qkv_a, ``dynamic_quant`` → an expert's gate), timed
as pairs by CUDA-graph replay (20 pairs back to back over rotated weights), with PDL off, on the GEMM only, on the
row kernel only, and on both; outputs checked bit for bit across the variants.

    python3 perf/bench_pdl_pair.py [--out FILE] [--rounds 3] [--shapes qkv_a_M16,moe_gate_M64]

(``perf/bench_pdl_ab.py`` times back-to-back GEMMs, where every predecessor is a PDL GEMM that lets the next
launch at once; here the predecessor of each GEMM is the row kernel.)
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from ops.quant import QUANT_MATMUL_KN  # noqa: E402
from ops.triton import quant as TQ  # noqa: E402
from perf.bench_pdl_ab import _inputs  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us  # noqa: E402

SHAPES = "qkv_a_M1,qkv_a_M2,qkv_a_M16,qkv_a_M64,moe_gate_M16,moe_gate_M64,q_b_M16,o_proj_M64"
# the GEMM's producer in a layer: hidden states → RmsNorm + quant (qkv_a, the MLP gates), else a plain quant
RMS = {"qkv_a", "dense_gate", "moe_gate", "moe_gate_up"}
VARIANTS = {"table": (None, None), "off": (False, False), "gemm": (False, True), "row": (True, False),
            "both": (True, True)}   # (row kernel pdl, GEMM pdl); None: as the cuda table says
ALONE = {"row alone, off": False, "row alone, on": True}   # the row kernel back to back, PDL off / on


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating the variants (default 3)")
    ap.add_argument("--shapes", default=SHAPES, help=f"quant_matmul shapes GEMM_M<rows> (default {SHAPES})")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    cfgs = TQ._all_configs()["cuda"]
    lines = [f"# row quant → quant_matmul pairs, PDL A/B ({torch.cuda.get_device_name()}, torch {torch.__version__})",
             "", f"Command: `python3 perf/bench_pdl_pair.py --rounds {a.rounds} --shapes {a.shapes}`. µs per pair "
             "(row kernel + GEMM), CUDA-graph replay of 20 pairs over rotated weights, median of the rounds. "
             "Variants: the cuda table as it is / PDL off / on the GEMM only / on the row kernel only / on both; then "
             "the row kernel alone, 20 back to back, PDL off / on (µs per call).", "",
             "| shape | producer | " + " | ".join(list(VARIANTS) + list(ALONE)) + " | bit-identical |",
             "|---|---|" + "---|" * (len(VARIANTS) + len(ALONE)) + "---|"]
    bad = 0
    for name in a.shapes.split(","):
        gemm, m = name.rsplit("_M", 1)
        K, N = QUANT_MATMUL_KN[gemm]
        M = int(m)
        rms = gemm in RMS
        op = "rms_norm_dynamic_quant" if rms else "dynamic_quant"
        row_b = dict(TQ._row_bucket(cfgs[op], M))
        qmm_b = dict(TQ._bucket(M, cfgs["quant_matmul"], N, K))
        sets = _inputs(M, K, N, dev, g)
        hs = [torch.randn(M, K, generator=g, device=dev).to(torch.bfloat16) for _ in sets]
        gamma = (1 + 0.1 * torch.randn(K, generator=g, device=dev)).to(torch.bfloat16)

        def row(i, row_pdl):
            rc = row_b if row_pdl is None else dict(row_b, pdl=row_pdl)
            if rms:
                return TQ.rms_norm_dynamic_quant_config(hs[i], gamma, config=rc)[:2]
            return TQ.dynamic_quant_config(hs[i], config=rc)

        def pair(i, row_pdl, qmm_pdl):
            q, s = row(i, row_pdl)
            _, w, ws, _ = sets[i]
            return TQ.quant_matmul_config(q, w, ws, s, config=qmm_b if qmm_pdl is None else dict(qmm_b, pdl=qmm_pdl))

        outs = {v: [pair(i, *f) for i in range(len(sets))] for v, f in VARIANTS.items()}
        same = all(torch.equal(x, y) for v in VARIANTS for x, y in zip(outs["off"], outs[v]))
        bad += not same
        variants = {v: [lambda i=i, f=f: pair(i, *f) for i in range(len(sets))] for v, f in VARIANTS.items()}
        variants.update({v: [lambda i=i, on=on: row(i, on) for i in range(len(sets))] for v, on in ALONE.items()})
        times = median_graph_us(variants, a.rounds, calls=20, replays=10)
        cells = " | ".join(f"{t:.2f}" for t in times.values())
        lines.append(f"| {name} | {op} | {cells} | {same} |")
        print(lines[-1], flush=True)
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
