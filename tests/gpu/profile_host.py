"""Where the eager host time of each ds op goes on a CUDA machine (cProfile of back-to-back eager calls).

    python3 tests/gpu/profile_host.py [--calls 300] [--out FILE]

For each op (Triton backend, DS_OPS_CHECKS=0 and =1) at its smallest named shape: wall µs per call of the eager
fast path (``ops.<op>``), of ``torch.ops.ds.<op>``, and of the launcher alone; then the top functions by own time
under cProfile. Device work of these shapes is a few µs, so the numbers are host time.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ops  # noqa: E402
import perf.specs as S  # noqa: E402

SHAPES = {"amla": "b1_sq1_n16_l1024", "mla_prolog": "t1_n128_bf16", "dynamic_quant": "hidden_T1",
          "rms_norm_dynamic_quant": "hidden_T1", "quant_matmul": "qkv_a_M1", "moe_gating_top_k": "deepseek_v3_T1"}


def per_call_us(fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    lines: list[str] = []

    def emit(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    import triton
    emit(f"torch {torch.__version__} triton {triton.__version__} {torch.cuda.get_device_name()}; "
         f"python {sys.version.split()[0]}")
    dev = torch.device("cuda")
    for entry in S.collect_ops():
        shape = entry.spec.shapes.get(SHAPES.get(entry.name, ""))
        if shape is None:
            continue
        inputs = entry.spec.make_inputs(shape, dtype=torch.bfloat16, device=dev,
                                        generator=torch.Generator().manual_seed(0))
        reg = entry.registered
        with ops.backend("triton"):
            res = {}
            for checks in ("1", "0"):
                os.environ["DS_OPS_CHECKS"] = checks
                res[f"eager checks={checks}"] = per_call_us(lambda: entry.op(**inputs), a.calls)
                res[f"torch.ops checks={checks}"] = per_call_us(lambda: reg(**inputs), a.calls)
            os.environ["DS_OPS_CHECKS"] = "0"
            emit(f"\n## {entry.name} {SHAPES[entry.name]}: " + ", ".join(f"{k} {v:.1f} µs" for k, v in res.items()))
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(a.calls):
                entry.op(**inputs)
            torch.cuda.synchronize()
            prof.disable()
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            st.sort_stats("tottime").print_stats(18)
            emit(f"cProfile, {a.calls} eager calls, checks off, sorted by own time:")
            emit("\n".join(ln for ln in s.getvalue().splitlines() if ln.strip())[:6000])
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
