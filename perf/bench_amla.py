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


VARIANTS = {"amla": dict(rescale="amla"),                                   # the CUDA config's AMLA
            "amla-CANN": dict(rescale="amla", round_c=True, lazy=-1.0),       # CANN's: c rounded, n every block
            "multiply": dict(rescale="multiply"),                             # FA multiply, lazy reference
            "multiply-FA2": dict(rescale="multiply", lazy=-1.0)}              # FA2: rescale whenever m grows


def run_variant(args, variant, num_splits=None, config=None, quick=False):
    kw = VARIANTS[variant]

    def f():
        return tri.amla_variant(*args, SCALE, True, num_splits=num_splits, config=config, **kw)
    f()
    plan = dict(tri.LAST_LAUNCH["plan"])
    tag = (f"{variant} BM{plan['BLOCK_M']} BN{plan['BLOCK_N']} w{plan['num_warps']} "
           f"s{plan['num_stages']}{' q-in-loop' if plan['q_in_loop'] else ''} "
           f"{'split' if plan['num_splits'] > 1 else 'nosplit'}{'' if plan['skip'] else ' noskip'}")
    record_kernel(tag)
    return bench(f, quick), plan


def grid_shapes(quick):
    Bs = (1, 16, 64, 128)
    Ls = (1024, 4096, 16384)
    if quick:
        Bs, Ls = (1, 64), (4096,)
    return [(B, S_q, N, L) for B in Bs for S_q in (1, 2) for N in (16, 128) for L in Ls]


# --sweep (run 2 of the session swept tiles: BM64 × BN{32,64,128} × stages{1,2,3}; BM16 × BN{32,64,128} ×
# stages{2,3} × q-in-loop × splits{4,8,9}: docs/perf/amla.md); now: variants and split counts on the floor shapes
SWEEP_COMPUTE = [dict(BLOCK_M=64, BLOCK_N=bn, num_warps=8, num_stages=st) for bn, st in ((32, 3), (64, 2))]
SWEEP_COMPUTE_VARIANTS = [("multiply-FA2", {}), ("amla", {"rescale_skip": False})]
SWEEP_MEMORY = [dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2, q_in_loop=False)]
SPLITS_MEMORY = (None, 3, 4, 6, 8)


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
        for v in ("amla", "amla-CANN", "multiply"):
            jobs.append(dict(dtype="bfloat16", N=N, S_q=S_q, bs=BS, causal=True, config=None, device="cuda",
                             max_keys=mk, B=B, num_splits=None, **VARIANTS[v]))
    sweep_cases = []
    if a.sweep:
        sweep_cases = ([((64, 2, 128, 4096), c, None, "amla") for c in SWEEP_COMPUTE] +
                       [((64, 2, 128, 4096), c, None, v) for v, c in SWEEP_COMPUTE_VARIANTS] +
                       [((64, 1, 16, 4096), c, ns, "amla") for c in SWEEP_MEMORY for ns in SPLITS_MEMORY] +
                       [((64, 1, 16, 4096), {}, None, v) for v in ("multiply", "multiply-FA2", "amla-CANN")])
        for (B, S_q, N, L), c, ns, v in sweep_cases:
            jobs.append(dict(dtype="bfloat16", N=N, S_q=S_q, bs=BS, causal=True, config=c, device="cuda",
                             max_keys=(L // BS + 2) * BS, B=B, num_splits=ns, **VARIANTS[v]))
    prewarm(jobs, a.workers, log)

    peak_tflops, peak_gbs = measure_peaks(a.quick)
    ridge = peak_tflops * 1e12 / (peak_gbs * 1e9)
    log(f"measured peaks: bf16 matmul 8192³ {peak_tflops:.0f} TFLOPS, device copy {peak_gbs:.0f} GB/s "
        f"(ridge {ridge:.0f} FLOP/B)\n")

    gen = torch.Generator(device=dev).manual_seed(0)
    floors = {}
    if a.sweep:
        log("## Launch-config sweep on the floor shapes (AMLA rescale unless noted)\n")
        log("| shape | variant | config | splits | µs | TFLOPS | GB/s |")
        log("|---|---|---|---|---|---|---|")
        cache = {}
        for (B, S_q, N, L), cfg, ns, v in sweep_cases:
            if (B, S_q, N, L) not in cache:
                cache.clear()
                cache[(B, S_q, N, L)] = paged_inputs(B, S_q, N, [L] * B, BS, DTYPE, dev, gen)[0]
            args = cache[(B, S_q, N, L)]
            fl, by = model(B, S_q, N, L)
            try:
                ms, plan = run_variant(args, v, ns, cfg, a.quick)
                log(f"| B{B} S_q{S_q} N{N} L{L} | {v} | {cfg} | {plan['num_splits']} | "
                    f"{ms * 1e3:.1f} | {fl / ms / 1e9:.0f} | {by / ms / 1e6:.0f} |")
            except Exception as e:  # noqa: BLE001
                log(f"| B{B} S_q{S_q} N{N} L{L} | {v} | {cfg} | {ns} | error: {type(e).__name__}: "
                    f"{str(e)[:100]} | | |")
        cache.clear()
        log("")

    log("## Grid (bf16, causal, uniform L per batch)\n")
    log("Columns per variant: µs, TFLOPS, GB/s, % of the measured roof that bounds the shape. "
        "amla = the CUDA config (c in fp32, lazy power-of-two reference, integer-add rescale); "
        "amla-CANN = c rounded to bf16 + compensation, n re-chosen every block; multiply = FlashAttention's fp32 "
        "multiply rescale with the same lazy reference (multiply-FA2, rescaling whenever the max grows, is in the "
        "sweep); "
        "torch = unfused PyTorch (gather pages, bmm, fp32 softmax, bmm).\n")
    log("| B | S_q | N | L | bound | splits | amla µs | TFLOPS | GB/s | % | amla-CANN µs | TFLOPS | GB/s | % | "
        "multiply µs | TFLOPS | GB/s | % | torch µs | TFLOPS | GB/s | amla vs torch |")
    log("|" + "---|" * 22)
    for B, S_q, N, L in shapes:
        args, _ = paged_inputs(B, S_q, N, [L] * B, BS, DTYPE, dev, gen)
        fl, by = model(B, S_q, N, L)
        bound = "compute" if fl / by >= ridge else "memory"

        def roof(ms):
            return 100 * (fl / ms / 1e9 / peak_tflops if bound == "compute" else by / ms / 1e6 / peak_gbs)
        row = [str(B), str(S_q), str(N), str(L), bound]
        ms_a, plan = run_variant(args, "amla", quick=a.quick)
        ms_c, _ = run_variant(args, "amla-CANN", quick=a.quick)
        ms_m, _ = run_variant(args, "multiply", quick=a.quick)
        row += [str(plan["num_splits"])]
        for ms in (ms_a, ms_c, ms_m):
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
            floors["compute"] = (fl / ms_a / 1e9, fl / ms_c / 1e9, fl / ms_m / 1e9)
        if (B, S_q, N, L) == (64, 1, 16, 4096):
            floors["memory"] = (by / ms_a / 1e6, by / ms_c / 1e6, by / ms_m / 1e6)
        del args
        torch.cuda.empty_cache()

    log("\n## Floors\n")
    if "compute" in floors:
        a_, c_, m_ = floors["compute"]
        log(f"* B=64,S_q=2,N=128,L=4096: amla {a_:.0f}, amla-CANN {c_:.0f}, multiply {m_:.0f} TFLOPS (floor 350): "
            f"{'PASS' if a_ >= 350 else 'BELOW FLOOR'}")
    if "memory" in floors:
        a_, c_, m_ = floors["memory"]
        log(f"* B=64,S_q=1,N=16,L=4096: amla {a_:.0f}, amla-CANN {c_:.0f}, multiply {m_:.0f} GB/s (floor 3500): "
            f"{'PASS' if a_ >= 3500 else 'BELOW FLOOR'}")

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
