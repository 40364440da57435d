#!/usr/bin/env python3
"""A/B of decode ``quant_matmul`` bucket overrides on the GPU, e.g. programmatic dependent launch (``pdl``) or
another ``num_stages``: the "cuda" table's bucket as it is against the same bucket with each override, timed by
CUDA-graph replay of back-to-back calls (weights rotated past 2× L2, so every call streams its weights from HBM),
and checked bit for bit against each other, eager and replayed, and against the reference.

    python3 perf/bench_pdl_ab.py [--out FILE] [--rounds 3] [--shapes qkv_a_M16,q_b_M128]
                                 [--cands 'pdl=pdl:1;s3=num_stages:3']

Rounds alternate the candidates so that drift hits all of them alike; the table reports each one's median.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from ops.quant import QUANT_MATMUL_KN  # noqa: E402
from ops.triton import quant as TQ  # noqa: E402
from perf.peaks import copy_tbs  # noqa: E402
from perf.report import print_and_write_lines  # noqa: E402
from perf.timers import median_graph_us, replayed_outputs  # noqa: E402
from reference import quant as RQ  # noqa: E402

GEMMS = QUANT_MATMUL_KN
SHAPES = [f"{g}_M{m}" for g in GEMMS for m in (1, 2, 16, 64, 128)]
L2_BYTES = 50 * 2**20


def _inputs(M: int, K: int, N: int, dev: torch.device, g: torch.Generator):
    ncopies = max(2, min(16, -(-2 * L2_BYTES // (K * N)) + 1))
    sets = []
    for _ in range(ncopies):
        w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device=dev, dtype=torch.int8), "cuda")
        x = torch.randint(-127, 128, (M, K), generator=g, device=dev, dtype=torch.int8)
        sets.append((x, w, torch.rand(N, generator=g, device=dev) * 1e-4, torch.rand(M, generator=g, device=dev) * 1e-2))
    return sets


def _parse_cands(text: str) -> dict:
    """'name=key:value,key:value;...' → {name: {key: value}} (bucket overrides; integer values become ints, others
    stay strings, e.g. ``mma:gemv_stream``). Raises ValueError naming the part that is not of that form."""
    def value(v: str):
        v = v.strip()
        try:
            return int(v)
        except ValueError:
            if not v:
                raise
            return v

    cands = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, kvs = part.partition("=")
        try:
            cands[name.strip()] = {k.strip(): value(v) for k, v in (kv.split(":") for kv in kvs.split(","))}
        except ValueError:
            raise ValueError(f"--cands part {part!r} is not name=key:value,key:value (e.g. "
                             "'s4pdl=num_stages:4,pdl:1' or 'gs=mma:gemv_stream,BLOCK_N:1')") from None
    return cands


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds, alternating the candidates (default 3)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="quant_matmul shapes GEMM_M<rows> (default: 8 GEMMs "
                    "of ops.quant.QUANT_MATMUL_KN at M 1, 2, 16, 64, 128)")
    ap.add_argument("--cands", default="pdl=pdl:1",
                    help="name=key:value,key:value;... bucket overrides (ints, 0/1 for booleans, other values as strings) timed "
                    "beside the table")
    a = ap.parse_args()
    try:
        over = _parse_cands(a.cands)
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    copy = copy_tbs(dev)
    cfg = TQ._all_configs()["cuda"]["quant_matmul"]
    names = ["table"] + list(over)
    lines = [f"# quant_matmul bucket A/B ({torch.cuda.get_device_name()}, torch {torch.__version__}, "
             f"copy {copy:.2f} TB/s)", "",
             f"Command: `python3 perf/bench_pdl_ab.py --rounds {a.rounds} --shapes {a.shapes} --cands '{a.cands}'`. "
             "µs per call, CUDA-graph replay of 20 back-to-back calls over rotated weights, median of the rounds; "
             "(%) = weight bytes / time against the copy rate.", "",
             "| shape | bucket | " + " | ".join(names) + " | bit-identical (eager, graph) | = reference |",
             "|---|---|" + "---|" * len(names) + "---|---|"]
    bad = 0
    for name in a.shapes.split(","):
        gemm, m = name.rsplit("_M", 1)
        K, N = GEMMS[gemm]
        M = int(m)
        b = dict(TQ._bucket(M, cfg, N, K))
        cands = {"table": None, **{n: dict(b, **o) for n, o in over.items()}}
        sets = _inputs(M, K, N, dev, g)
        outs, failed = {}, {}
        for c, cfg_ in list(cands.items()):   # a candidate that does not build (e.g. too much shared memory) is reported
            try:
                outs[c] = [TQ.quant_matmul_config(*s, config=cfg_) for s in sets]
            except Exception as e:  # noqa: BLE001 - any build / launch error of one candidate
                failed[c] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}" if str(e) else type(e).__name__
                print(f"{name} {c}: {failed[c]}", flush=True)
                del cands[c]
        if "table" in failed:   # nothing to compare the candidates with
            lines.append(f"| {name} | | failed ({failed['table']}) |" + " |" * (len(names) + 1))
            bad += 1
            continue
        same = all(torch.equal(u, v) for c in cands for u, v in zip(outs["table"], outs[c]))
        same_g = all(torch.equal(u, v) for c, cfg_ in cands.items() for u, v in zip(
            outs["table"], replayed_outputs([lambda s=s, cfg_=cfg_: TQ.quant_matmul_config(*s, config=cfg_)
                                             for s in sets])))
        x, w, ws, xs = sets[0]
        ref_ok = torch.equal(outs["table"][0].cpu(), RQ.quant_matmul(x.cpu(), w.cpu(), ws.cpu(), xs.cpu()))
        bad += (not same) + (not same_g) + (not ref_ok)
        times = median_graph_us({c: [lambda s=s, cfg_=cfg_: TQ.quant_matmul_config(*s, config=cfg_) for s in sets]
                                 for c, cfg_ in cands.items()}, a.rounds, calls=20, replays=10)
        cells = []
        for c in names:
            if c in failed:
                cells.append(f"failed ({failed[c]})")
                bad += 1
                continue
            t = times[c]
            cells.append(f"{t:.2f} ({100 * K * N / (t * 1e-6) / (copy * 1e12):.0f} %)")
        tag = f"{b.get('mma', 'dot')} {b['BLOCK_M']}x{b['BLOCK_N']}x{b['BLOCK_K']} s{b['num_stages']}"
        lines.append(f"| {name} | {tag} | " + " | ".join(cells) + f" | {same}, {same_g} | {ref_ok} |")
        print(lines[-1], flush=True)
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
