"""Two calls of the Triton mla_prolog on one DeepSeek-V3 decode shape (N = 128 heads), for Nsight Compute
(profile the second call's launches):

    ncu --clock-control none -k regex:'_row_query_kernel|_query' --launch-skip 1 --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats python3 tests/gpu/ncu_mla_prolog.py --mode a8w8 --T 1

``--overrides`` = JSON launch-config overrides ({"query": {...}}, see ops.triton.mla_prolog.plan).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from ops import mla_prolog as M  # noqa: E402
from ops.triton import mla_prolog as K  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="a8w8", choices=M.MODES)
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--overrides", default=None)
    a = ap.parse_args()
    shape = dict(T=a.T, N=128, He=7168, Hcq=1536, Hckv=512, D=128, Dr=64, block_size=128, mode=a.mode)
    inp = K.pack_weights(M.make_inputs(shape, dtype=torch.bfloat16, device="cuda",
                                       generator=torch.Generator().manual_seed(0)))
    ov = json.loads(a.overrides) if a.overrides else None
    for _ in range(2):
        K.mla_prolog_config(**inp, overrides=ov)
    torch.cuda.synchronize()
    p = K.plan(a.T, 7168, 1536, 128, 128, 64, 512, torch.device("cuda"), int8_down=a.mode.startswith("a8w8"),
               int8_query=a.mode != "bf16", overrides=ov)
    print("query plan", {k: v for k, v in p["query"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
