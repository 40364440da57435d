#!/usr/bin/env python3
"""A/B of programmatic dependent launch for ``ds::amla``'s two launches (forward, then the split merge) on the GPU:
the "cuda" table with ``pdl`` off and on, timed by CUDA-graph replay of back-to-back calls over rotated caches, and
checked bit for bit (out and lse, eager and replayed).

    python3 perf/bench_amla_pdl.py [--out FILE] [--rounds 3] [--shapes b1_sq1_n16_l4096,b64_sq1_n16_l4096]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from ops import amla as A  # noqa: E402
from ops.triton import amla as TA  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us, replayed_outputs  # noqa: E402

SHAPES = ("b1_sq1_n16_l4096,b1_sq1_n16_l16384,b1_sq2_n16_l4096,b1_sq1_n128_l4096,b16_sq1_n16_l4096,"
          "b16_sq1_n128_l4096,b64_sq1_n16_l4096,b64_sq2_n16_l4096,b64_sq2_n128_l4096")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating pdl off / on (default 3)")
    ap.add_argument("--shapes", default=SHAPES, help=f"named amla shapes (default {SHAPES})")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")
    lines = [f"# amla PDL A/B ({torch.cuda.get_device_name()}, torch {torch.__version__})", "",
             f"Command: `python3 perf/bench_amla_pdl.py --rounds {a.rounds} --shapes {a.shapes}`. µs per call, "
             "CUDA-graph replay of back-to-back calls over rotated caches, median of the rounds.", "",
             "| shape | KV splits | pdl off | pdl on | bit-identical (eager, graph) |", "|---|---|---|---|---|"]
    bad = 0
    for name in a.shapes.split(","):
        shape = A.SPEC.shapes[name]
        sets = [A.make_inputs(shape, device="cuda", generator=torch.Generator().manual_seed(i)) for i in range(3)]
        cfgs = {"off": {"pdl": False}, "on": {"pdl": True}}
        outs = {c: [TA.amla_variant(**s, config=cfg) for s in sets] for c, cfg in cfgs.items()}
        same = all(torch.equal(x, y) for u, v in zip(outs["off"], outs["on"]) for x, y in zip(u, v))
        gouts = replayed_outputs([lambda s=s: TA.amla_variant(**s, config=cfgs["on"]) for s in sets])
        same_g = all(torch.equal(x, y) for u, v in zip(outs["off"], gouts) for x, y in zip(u, v))
        bad += (not same) + (not same_g)
        times = median_graph_us({c: [lambda s=s, cfg=cfg: TA.amla_variant(**s, config=cfg) for s in sets]
                                 for c, cfg in cfgs.items()}, a.rounds, calls=max(6, len(sets)), replays=10)
        ns = TA.LAST_LAUNCH["plan"]["num_splits"]
        lines.append(f"| {name} | {ns} | {times['off']:.1f} | {times['on']:.1f} | {same}, {same_g} |")
        print(lines[-1], flush=True)
        del sets, outs, gouts
        torch.cuda.empty_cache()
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
