"""Two launches of the AMLA forward kernel on one shape, for Nsight Compute (the second is the one to profile).

    ncu --clock-control none -k regex:_amla_fwd --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats python3 tests/gpu/ncu_amla.py --shape 64,2,128,4096 [--rescale multiply]

Shape: B,S_q,N,L (block_size 64, causal, bf16); config overrides as JSON with --config.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _amla_common import ROOT, paged_inputs  # noqa: E402

sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import ops.triton.amla as tri  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="64,2,128,4096")
    ap.add_argument("--rescale", default="amla", choices=("amla", "multiply"))
    ap.add_argument("--config", default=None, help="JSON launch-config overrides")
    a = ap.parse_args()
    B, S_q, N, L = (int(v) for v in a.shape.split(","))
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = paged_inputs(B, S_q, N, [L] * B, 64, torch.bfloat16, "cuda", gen)[0]
    cfg = json.loads(a.config) if a.config else None
    for _ in range(2):
        tri.amla_variant(*args, 0.1353, True, rescale=a.rescale, config=cfg)
    torch.cuda.synchronize()
    print("plan", tri.LAST_LAUNCH["plan"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
