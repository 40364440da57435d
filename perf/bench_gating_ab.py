#!/usr/bin/env python3
"""A/B of moe_gating_top_k launch configs on the GPU: the "cuda" table against overrides (e.g. ``packed``), for
DeepSeek-V3 routing (E 256, 8 groups, top-4 groups, k 8, sigmoid, fp32 bias), timed by CUDA-graph replay and
checked bit for bit against the table's output and against the reference's ids.

    python3 perf/bench_gating_ab.py [--out FILE] [--rounds 3]

Rounds alternate the candidates so that drift hits all of them alike; the table reports each one's median.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from ops.triton import moe_gating as TG  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us  # noqa: E402
from reference import moe_gating as RG  # noqa: E402

DS = dict(k_group=4, group_count=8, group_select_mode=1, renorm=0, norm_type=1, routed_scaling_factor=2.5, eps=1e-20)
CANDS = {"table": None, "unpacked": {"packed": False}, "packed": {"packed": True}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    bias = 0.5 * torch.randn(256, generator=g, device=dev)
    lines = [f"# moe_gating_top_k A/B ({torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             f"Command: `python3 perf/bench_gating_ab.py --rounds {a.rounds}`. µs per call, CUDA-graph replay, "
             "median of the rounds.", "", "| T | logits | " + " | ".join(CANDS) + " | same output | ids = reference |",
             "|---|---|" + "---|" * len(CANDS) + "---|---|"]
    bad = 0
    for T in (1, 16, 64, 128, 256, 4096):
        for dt in (torch.bfloat16, torch.float32):
            x = (2 * torch.randn(T, 256, generator=g, device=dev)).to(dt)
            x[0, :64] = x[0, 64:128]                              # exact ties across groups in row 0
            outs = {n: TG.moe_gating_top_k_config(x, 8, bias=bias, config=c, **DS) for n, c in CANDS.items()}
            same = all(all(torch.equal(u, v) for u, v in zip(outs["table"], o)) for o in outs.values())
            ref_ids = RG.moe_gating_top_k(x.cpu(), 8, bias=bias.cpu(), **DS)[1]
            ids_ok = all(torch.equal(o[1].cpu(), ref_ids) for o in outs.values())
            bad += (not same) + (not ids_ok)
            times = median_graph_us({n: [lambda c=c: TG.moe_gating_top_k_config(x, 8, bias=bias, config=c, **DS)]
                                     for n, c in CANDS.items()}, a.rounds)
            cells = " | ".join(f"{v:.2f}" for v in times.values())
            lines.append(f"| {T} | {str(dt)[6:]} | {cells} | {same} | {ids_ok} |")
            print(lines[-1], flush=True)
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
