#!/usr/bin/env python3
"""GPU check + benchmark of the Triton ds::mla_prolog kernels (H200, bf16 and A8W8), one command:

    python3 tests/gpu/check_mla_prolog.py [--out DIR] [--sweep] [--budget_s 200]

1. In parallel (Triton's compile cache is on disk, so compiling in several processes warms it):
   * ``pytest tests/test_mla_prolog_triton.py`` on CUDA — every mode vs the reference in bf16, field
     cases P1–P5 (non-contiguous inputs, negative / out-of-range cache_index with guard blocks, T = 0,
     RoPE vs HF), CUDA-graph capture; output ``DIR/pytest_mla_prolog_triton.txt``;
   * ``perf/bench_mla_prolog.py --warm`` per mode (compiles every launch config the bench will time).
2. Then, alone on the GPU: ``perf/bench_mla_prolog.py`` (correctness at the DeepSeek-V3 shapes vs the
   reference + timing, T ∈ {1, 32, 128}, N = 128, bf16 and A8W8) → ``DIR/mla_prolog_results.md``.

Copy the two files into docs/perf/ (results) and tests/gpu/results/ (pytest log). Exit status 1 when
pytest or a correctness verdict fails.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(REPO, "tests", "gpu", "results")))
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--budget_s", type=float, default=200.0, help="stop starting new bench shapes after this")
    ap.add_argument("--pytest_k", default="", help="-k expression for the pytest part (default: all)")
    ap.add_argument("--warm_timeout_s", type=float, default=110.0, help="stop waiting for the parallel phase")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    py = sys.executable
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = []
    test_log = os.path.join(args.out, "pytest_mla_prolog_triton.txt")
    cmd = [py, "-m", "pytest", "tests/test_mla_prolog_triton.py", "-q", "-rs", "-p", "no:cacheprovider"]
    if args.pytest_k:
        cmd += ["-k", args.pytest_k]
    import importlib.util
    if importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", "6"]
    with open(test_log, "w") as f:
        procs.append(("pytest", subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)))
    for mode in ("bf16", "a8w8"):
        for T in ("1", "32", "128"):
            wl = open(os.path.join(args.out, f"warm_{mode}_{T}.txt"), "w")
            c = [py, "perf/bench_mla_prolog.py", "--warm", "--modes", mode, "--T", T] + (["--sweep"] if args.sweep else [])
            procs.append((f"warm {mode} {T}", subprocess.Popen(c, cwd=REPO, stdout=wl, stderr=subprocess.STDOUT, env=env)))
    rcs = {}
    for name, p in procs:
        try:
            limit = args.warm_timeout_s + (50.0 if name == "pytest" else 0.0)
            rcs[name] = p.wait(timeout=max(1.0, limit - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs[name] = p.wait()
            print(f"[{time.time() - t0:6.1f}s] {name}: killed after --warm_timeout_s", flush=True)
        print(f"[{time.time() - t0:6.1f}s] {name}: rc {rcs[name]}", flush=True)
    print(open(test_log).read()[-3000:], flush=True)
    res = os.path.join(args.out, "mla_prolog_results.md")
    left = max(30.0, args.budget_s - (time.time() - t0))
    c = [py, "perf/bench_mla_prolog.py", "--out", res, "--budget_s", str(left)] + (["--sweep", "--jobs", "0"] if args.sweep else [])
    with open(os.path.join(args.out, "bench_log.txt"), "w") as f:
        rb = subprocess.run(c, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        f.write(rb.stdout)
    print(rb.stdout[-6000:], flush=True)
    print(f"[{time.time() - t0:6.1f}s] done", flush=True)
    ok = rcs["pytest"] == 0 and rb.returncode == 0 and "FAIL" not in (open(res).read() if os.path.exists(res) else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
