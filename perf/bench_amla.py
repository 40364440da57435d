"""Benchmark of the Triton ``ds::amla`` kernel on the GPU (H200): AMLA rescale vs multiply rescale vs the
unfused PyTorch baseline, same run, same inputs.

    python3 perf/bench_amla.py docs/perf/amla_results.md [--sweep] [--smoke] [--quick]

Grid: B ∈ {1,16,64,128} × S_q ∈ {1,2} (causal) × N ∈ {16,128} × L ∈ {1K,4K,16K}, bf16, block_size 64,
random page order. Time: triton.testing.do_bench median (L2 flushed before every call by do_bench).
FLOP = 2·Σ S_q·N·L·(576+512); bytes = KV rows read once (576·2 per key) + q + out + lse.
Peaks are measured in the same run (bf16 matmul 8192³, device copy) and each shape is reported against
the roof that bounds it (arithmetic intensity vs the measured ridge). Floors from the issue:
≥ 350 TFLOPS at B=64,S_q=2,N=128,L=4096 and ≥ 3.5 TB/s at B=64,S_q=1,N=16,L=4096.
--sweep: launch-config sweep on those two shapes. Also prints registers / spills / shared memory of
every compiled variant. The markdown goes to the path given (and $OUT/bench_amla.md if $OUT is set).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from _amla_common import ROOT, paged_inputs, prewarm, torch_unfused  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(ROOT))
import ops.triton.amla as tri  # noqa: E402

SCALE = 0.1353
DTYPE = torch.bfloat16
BS = 64
LINES: list[str] = []
KERNEL_INFO: dict = {}


def log(s=""):
    print(s, flush=True)
    LINES.append(s)


def bench(fn, quick=False):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=10 if quick else 25, rep=40 if quick else 100, return_mode="median")


def measure_peaks(quick=False):
    a = torch.randn(8192, 8192, device="cuda", dtype=DTYPE)
    b = torch.randn(8192, 8192, device="cuda", dtype=DTYPE)
    ms = bench(lambda: a @ b, quick)
    tflops = 2 * 8192**3 / ms / 1e9
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)   # 1 GiB
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x), quick)
    gbs = 2 * x.numel() / ms / 1e6
    del a, b, x, y
    return tflops, gbs


def model(B, S_q, N, L):
    flops = 2 * B * S_q * N * L * (576 + 512)
    byts = B * L * 576 * 2 + B * S_q * N * (576 + 512) * 2 + B * S_q * N * 4
    return flops, byts


def record_kernel(tag):
    k = tri.LAST_LAUNCH.get("fwd")
    plan = tri.LAST_LAUNCH.get("plan", {})
    if k is None:
        return
    try:
        info = dict(regs=getattr(k, "n_regs", None), spills=getattr(k, "n_spills", None),
                    shared=getattr(k.metadata, "shared", None), BLOCK_M=plan.get("BLOCK_M"), BLOCK_N=plan.get("BLOCK_N"),
                    warps=plan.get("num_warps"), stages=plan.get("num_stages"))
        KERNEL_INFO.setdefault(tag, info)
    except Exception as e:  # noqa: BLE001
        KERNEL_INFO.setdefault(tag, dict(error=str(e)))


def run_variant(args, rescale, num_splits=None, config=None, round_c=True, quick=False):
    def f():
        return tri.amla_variant(*args, SCALE, True, rescale=rescale, num_splits=num_splits, config=config,
                                round_c=round_c)
    f()
    plan = dict(tri.LAST_LAUNCH["plan"])
    tag = (f"{rescale}{'' if round_c else '/c32'} BM{plan['BLOCK_M']} BN{plan['BLOCK_N']} w{plan['num_warps']} "
           f"s{plan['num_stages']} {'split' if plan['num_splits'] > 1 else 'nosplit'}"
           f"{'' if plan['skip'] else ' noskip'}")
    record_kernel(tag)
    return bench(f, quick), plan


def grid_shapes(quick):
    Bs = (1, 16, 64, 128)
    Ls = (1024, 4096, 16384)
    if quick:
        Bs, Ls = (1, 64), (4096,)
    return [(B, S_q, N, L) for B in Bs for S_q in (1, 2) for N in (16, 128) for L in Ls]


SWEEP_COMPUTE = [dict(BLOCK_M=64, BLOCK_N=bn, num_warps=8, num_stages=st) for bn, st in
                 ((32, 2), (32, 3), (64, 1), (64, 2), (16, 3))] + [dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=2)]
SWEEP_MEMORY = [dict(BLOCK_M=16, BLOCK_N=bn, num_warps=w, num_stages=st) for bn, w, st in
                ((32, 4, 2), (32, 4, 3), (64, 4, 2), (64, 4, 3), (128, 8, 2))]
SPLITS_MEMORY = (None, 2, 4, 8, 16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="markdown output path")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer shapes, shorter timing")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--workers", type=int, default=14)
    a = ap.parse_args()
    t0 = time.time()
    dev = torch.device("cuda")
    p = torch.cuda.get_device_properties(0)
    import triton
    log(f"# ds::amla Triton benchmark\n\ndevice: {p.name} ({p.multi_processor_count} SMs), torch {torch.__version__}, "
        f"triton {triton.__version__}, dtype bf16, block_size {BS}, causal, do_bench median (L2 flushed)\n")
    log("command: `python3 perf/bench_amla.py " + " ".join(sys.argv[1:]) + "`\n")

    shapes = grid_shapes(a.quick)
    jobs = []
    for B, S_q, N, L in shapes:
        mk = (-(-L // BS) + 2) * BS
        for r in ("amla", "multiply"):
            jobs.append(dict(dtype="bfloat16", N=N, S_q=S_q, bs=BS, causal=True, config=None, device="cuda",
                             max_keys=mk, B=B, rescale=r, num_splits=None))
    if a.sweep:
        mk = (4096 // BS + 2) * BS
        for c in SWEEP_COMPUTE:
            jobs.append(dict(dtype="bfloat16", N=128, S_q=2, bs=BS, causal=True, config=c, device="cuda", max_keys=mk,
                             B=64, rescale="amla", num_splits=None))
        for r, rc, sk in (("multiply", True, True), ("amla", False, True), ("amla", True, False),
                          ("multiply", True, False)):
            jobs.append(dict(dtype="bfloat16", N=128, S_q=2, bs=BS, causal=True, config={"rescale_skip": sk},
                             device="cuda", max_keys=mk, B=64, rescale=r, num_splits=None, round_c=rc))
        for c in SWEEP_MEMORY:
            for ns in SPLITS_MEMORY:
                jobs.append(dict(dtype="bfloat16", N=16, S_q=1, bs=BS, causal=True, config=c, device="cuda",
                                 max_keys=mk, B=64, rescale="amla", num_splits=ns))
    prewarm(jobs, a.workers, log)

    peak_tflops, peak_gbs = measure_peaks(a.quick)
    ridge = peak_tflops * 1e12 / (peak_gbs * 1e9)
    log(f"measured peaks: bf16 matmul 8192³ {peak_tflops:.0f} TFLOPS, device copy {peak_gbs:.0f} GB/s "
        f"(ridge {ridge:.0f} FLOP/B)\n")

    gen = torch.Generator(device=dev).manual_seed(0)
    floors = {}
    if a.sweep:
        log("## Launch-config sweep on the floor shapes (AMLA rescale unless noted)\n")
        log("| shape | config | splits | µs | TFLOPS | GB/s |")
        log("|---|---|---|---|---|---|")
        for (B, S_q, N, L), cfgs in (((64, 2, 128, 4096), [(c, None, "amla", True) for c in SWEEP_COMPUTE] +
                                      [({"rescale_skip": sk}, None, r, rc) for r, rc, sk in
                                       (("multiply", True, True), ("amla", False, True), ("amla", True, False),
                                        ("multiply", True, False))]),
                                     ((64, 1, 16, 4096), [(c, ns, "amla", True) for c in SWEEP_MEMORY
                                                          for ns in SPLITS_MEMORY])):
            args, _ = paged_inputs(B, S_q, N, [L] * B, BS, DTYPE, dev, gen)
            fl, by = model(B, S_q, N, L)
            for cfg, ns, r, rc in cfgs:
                try:
                    ms, plan = run_variant(args, r, ns, cfg, rc, a.quick)
                    log(f"| B{B} S_q{S_q} N{N} L{L} | {r}{'' if rc else ' c32'} {cfg} | {plan['num_splits']} | "
                        f"{ms * 1e3:.1f} | {fl / ms / 1e9:.0f} | {by / ms / 1e6:.0f} |")
                except Exception as e:  # noqa: BLE001
                    log(f"| B{B} S_q{S_q} N{N} L{L} | {r} {cfg} | {ns} | error: {type(e).__name__}: {str(e)[:120]} | | |")
            del args
        log("")

    log("## Grid (bf16, causal, uniform L per batch)\n")
    log("| B | S_q | N | L | bound | splits | AMLA µs | TFLOPS | GB/s | % roof | multiply µs | TFLOPS | GB/s | "
        "% roof | torch µs | TFLOPS | GB/s | AMLA vs torch |")
    log("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for B, S_q, N, L in shapes:
        args, _ = paged_inputs(B, S_q, N, [L] * B, BS, DTYPE, dev, gen)
        fl, by = model(B, S_q, N, L)
        bound = "compute" if fl / by >= ridge else "memory"

        def roof(ms):
            return 100 * (fl / ms / 1e9 / peak_tflops if bound == "compute" else by / ms / 1e6 / peak_gbs)
        row = [str(B), str(S_q), str(N), str(L), bound]
        ms_a, plan = run_variant(args, "amla", quick=a.quick)
        ms_m, _ = run_variant(args, "multiply", quick=a.quick)
        row += [str(plan["num_splits"])]
        for ms in (ms_a, ms_m):
            row += [f"{ms * 1e3:.1f}", f"{fl / ms / 1e9:.0f}", f"{by / ms / 1e6:.0f}", f"{roof(ms):.0f}"]
        if a.no_torch:
            row += ["", "", "", ""]
        else:
            try:
                ms_t = bench(lambda: torch_unfused(*args[:5], L, SCALE, True), a.quick)
                row += [f"{ms_t * 1e3:.1f}", f"{fl / ms_t / 1e9:.0f}", f"{by / ms_t / 1e6:.0f}", f"{ms_t / ms_a:.2f}×"]
            except torch.OutOfMemoryError:
                row += ["OOM", "", "", ""]
        log("| " + " | ".join(row) + " |")
        if (B, S_q, N, L) == (64, 2, 128, 4096):
            floors["compute"] = (fl / ms_a / 1e9, fl / ms_m / 1e9)
        if (B, S_q, N, L) == (64, 1, 16, 4096):
            floors["memory"] = (by / ms_a / 1e6, by / ms_m / 1e6)
        del args
        torch.cuda.empty_cache()

    log("\n## Floors\n")
    if "compute" in floors:
        a_, m_ = floors["compute"]
        log(f"* B=64,S_q=2,N=128,L=4096: AMLA {a_:.0f} TFLOPS, multiply {m_:.0f} TFLOPS (floor 350): "
            f"{'PASS' if max(a_, m_) >= 350 else 'BELOW FLOOR'}")
    if "memory" in floors:
        a_, m_ = floors["memory"]
        log(f"* B=64,S_q=1,N=16,L=4096: AMLA {a_:.0f} GB/s, multiply {m_:.0f} GB/s (floor 3500): "
            f"{'PASS' if max(a_, m_) >= 3500 else 'BELOW FLOOR'}")

    log("\n## Compiled variants (registers / spills / shared memory)\n")
    log("| variant | regs/thread | spills | shared B |")
    log("|---|---|---|---|")
    for tag, info in sorted(KERNEL_INFO.items()):
        log(f"| {tag} | {info.get('regs')} | {info.get('spills')} | {info.get('shared')} |")
    log(f"\ntotal {time.time() - t0:.0f} s")
    text = "\n".join(LINES) + "\n"
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(text)
    if os.environ.get("OUT"):
        pathlib.Path(os.environ["OUT"], "bench_amla.md").write_text(text)


if __name__ == "__main__":
    main()
