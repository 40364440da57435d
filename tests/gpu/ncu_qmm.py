"""Two launches of quant_matmul on one decode shape, for Nsight Compute (profile the second):

    ncu --clock-control none -k regex:_qmm_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        python3 tests/gpu/ncu_qmm.py --mkn 1,7168,2112

int8 x [M, K], K-major int8 weight (reference.quant.pack_weight), fp32 scales, bf16 out; config overrides as JSON.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import ops.triton.quant as TQ  # noqa: E402
from reference import quant as RQ  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkn", default="1,7168,2112")
    ap.add_argument("--config", default=None, help="JSON bucket override")
    a = ap.parse_args()
    M, K, N = (int(v) for v in a.mkn.split(","))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randint(-127, 128, (M, K), generator=g, device="cuda", dtype=torch.int8)
    w = RQ.pack_weight(torch.randint(-127, 128, (K, N), generator=g, device="cuda", dtype=torch.int8))
    ws = torch.rand(N, generator=g, device="cuda") * 1e-3
    xs = torch.rand(M, generator=g, device="cuda")
    cfg = json.loads(a.config) if a.config else None
    for _ in range(2):
        TQ.quant_matmul_config(x, w, ws, xs, config=cfg)
    torch.cuda.synchronize()
    print("plan", TQ.plan_quant_matmul(M, N, K, x.device, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
