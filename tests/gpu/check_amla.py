"""GPU correctness matrix for the Triton ``ds::amla`` kernel (ops/triton/amla.py) — run on the H200:

    python3 tests/gpu/check_amla.py [--out tests/gpu/results/check_amla.txt] [--smoke] [--sweep N]

bf16 and fp16 × N ∈ {8,16,32,64,128} × S_q ∈ {1,2,4} (causal) × block_size ∈ {16,64,128}, each a batch
whose seq_lens run from 0 to 32K mixed, random page order, NaN in every unused slot and page, unused
block_table entries −1 or a huge id, NaN-poisoned outputs and split partials; against the fp32
reference (reference/amla.py) with DESIGN's tolerances (tests/tolerances.py): out against the fp32
reference, lse against an fp64 logsumexp ("fp64 where cheap"; the fp32 reference is itself up to ~7e-6
off at 32K keys); the lse difference to the fp32 reference is printed too. Plus cases A1–A7
(cases.md), the multiply rescale, forced single split, determinism, CUDA-graph capture with new
seq_lens on replay, torch.compile(fullgraph=True) through torch.ops.ds.amla, and a seeded random sweep.
Prints a summary; exits non-zero on any failure. --smoke: tiny fp16 shapes on CPU (TRITON_INTERPRET=1).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback

import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _amla_common import ROOT, paged_inputs, poison_allocations, prewarm  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(ROOT))
import ops.triton.amla as tri  # noqa: E402
from reference import amla as ref  # noqa: E402
from tests.tolerances import assert_close, cos_diff  # noqa: E402

SCALE = 0.1353
LINES: list[str] = []
CANN = dict(round_c=True, lazy=-1.0)      # CANN's AMLA: c rounded + compensation, n re-chosen every block


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LINES.append(s)


class Results:
    def __init__(self):
        self.passed = 0
        self.failed: list[str] = []

    def run(self, name, fn):
        t0 = time.time()
        try:
            info = fn()
            self.passed += 1
            log(f"PASS {name} ({time.time() - t0:.2f}s){'  ' + info if info else ''}")
        except Exception as e:  # noqa: BLE001
            self.failed.append(name)
            log(f"FAIL {name}: {type(e).__name__}: {e}")
            log("".join(traceback.format_exception(e)[-3:]))


def lse_fp64(args, causal=True):
    """lse [B, S_q, N] in fp64 (the inputs' exact values): DESIGN's "fp64 where cheap" reference for lse,
    whose 1e-5 abs tolerance is within reach of the fp32 reference's own error at 32K keys (run 2 measured the
    fp32 reference up to 7.4e-6 off the fp64 value)."""
    q_nope, q_rope, kv, kr, bt, sl = args
    B, S_q, N, _ = q_nope.shape
    out = torch.full((B, S_q, N), float("-inf"), dtype=torch.float64, device=q_nope.device)
    for b, L in enumerate(sl.tolist()):
        if L <= 0:
            continue
        c, k = ref._gather_request(kv, kr, bt, b, L)
        q = torch.cat([q_nope[b], q_rope[b]], -1).double()
        s = SCALE * torch.einsum("snd,ld->snl", q, torch.cat([c, k], -1).double())
        vis = ref._visible(L, S_q, causal, s.device)[:, None, :]
        out[b] = torch.logsumexp(s.masked_fill(~vis, float("-inf")), -1)
    return out


def compare(args, causal=True, **kw):
    """out against the fp32 reference (cosine difference ≤ 1e-5, max err ≤ 2e-2·max), lse against fp64 (1e-5
    abs); the lse difference to the fp32 reference is reported too."""
    out, lse = tri.amla_variant(*args, SCALE, causal, **kw)
    r_out, r_lse = ref.amla(*args, SCALE, causal)
    e_lse = lse_fp64(args, causal)
    kind = "fp16" if args[0].dtype == torch.float16 else "bf16"
    assert_close(out, r_out, kind)
    assert_close(lse, e_lse, "lse", name="lse (vs fp64)")
    assert torch.equal(torch.isneginf(lse), torch.isneginf(r_lse))
    f = torch.isfinite(r_lse)
    err32 = (lse[f] - r_lse[f]).abs().max().item() if f.any() else 0.0
    err64 = (lse[f].double() - e_lse[f]).abs().max().item() if f.any() else 0.0
    ref64 = (r_lse[f].double() - e_lse[f]).abs().max().item() if f.any() else 0.0
    return out, lse, (f"cos_diff={cos_diff(out.float(), r_out.float()):.2e} lse: vs fp64 {err64:.1e} "
                      f"(fp32 ref vs fp64 {ref64:.1e}), vs fp32 ref {err32:.1e}")


def mixed_lens(B, rng, Lmax):
    base = [0, 1, 2, rng.randint(3, 64), rng.randint(65, 2000), rng.randint(2000, 9000), Lmax, Lmax - rng.randint(1, 200)]
    rng.shuffle(base)
    return [min(x, Lmax) for x in base[:B]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny fp16 shapes, CPU interpreter")
    ap.add_argument("--sweep", type=int, default=40, help="random sweep examples")
    ap.add_argument("--workers", type=int, default=14)
    a = ap.parse_args()
    if a.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    dev = torch.device("cpu" if a.smoke else "cuda")
    dtypes = [torch.float16] if a.smoke else [torch.bfloat16, torch.float16]
    Ns = [8] if a.smoke else [8, 16, 32, 64, 128]
    S_qs = [1, 2] if a.smoke else [1, 2, 4]
    bss = [16] if a.smoke else [16, 64, 128]
    Lmax = 70 if a.smoke else 32768
    B = 4 if a.smoke else 8
    def S(x):            # sizes of the single-case checks; tiny under --smoke
        return x if not a.smoke else min(x, 40)
    poison_allocations()
    rng = random.Random(1234)
    gen = torch.Generator(device=dev).manual_seed(1234)
    res = Results()
    t_start = time.time()
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        log(f"device: {p.name}, {p.multi_processor_count} SMs; torch {torch.__version__}; triton "
            f"{__import__('triton').__version__}")

    # ---- pre-compile every variant in parallel -------------------------------------------------
    jobs = []
    for dt in dtypes:
        for N in Ns:
            for S_q in S_qs:
                for bs in bss:
                    dn = str(dt).split(".")[-1]
                    common = dict(dtype=dn, N=N, S_q=S_q, bs=bs, causal=True, config=None, device=str(dev),
                                  max_keys=(-(-Lmax // bs) + 2) * bs, B=B)
                    jobs.append(dict(common, rescale="amla", num_splits=None))
                    if bs == 64:
                        jobs.append(dict(common, rescale="amla", num_splits=1))
                        jobs.append(dict(common, rescale="multiply", num_splits=None))
                        jobs.append(dict(common, rescale="amla", num_splits=None, **CANN))
    srng = random.Random(99)
    sweep = []
    for i in range(a.sweep):
        Bi = srng.randint(1, 6)
        S_q = srng.choice([1, 2, 3, 4])
        N = srng.choice([1, 3, 8, 16, 24, 32, 64, 100, 128]) if not a.smoke else srng.choice([1, 3, 8])
        bs = srng.choice(bss)
        Lm = 9000 if not a.smoke else 70
        lens = [srng.choice([0, 1, srng.randint(0, 80), srng.randint(0, Lm)]) for _ in range(Bi)]
        rescale = srng.choice(["amla", "amla", "multiply", "amla-CANN"])
        ns = srng.choice([None, None, 1, srng.randint(2, 40)])
        dti = srng.choice(dtypes)
        sweep.append((i, Bi, S_q, N, bs, lens, rescale, ns, dti))
        jobs.append(dict(dtype=str(dti).split(".")[-1], N=N, S_q=S_q, bs=bs, causal=True, config=None,
                         device=str(dev), max_keys=(-(-max(lens) // bs) + 2) * bs, B=Bi,
                         rescale=rescale.replace("-CANN", ""), num_splits=ns, **(CANN if "CANN" in rescale else {})))
    if not a.smoke:
        prewarm(jobs, a.workers, log)

    # ---- the matrix ------------------------------------------------------------------------------
    for dt in dtypes:
        for N in Ns:
            for S_q in S_qs:
                for bs in bss:
                    lens = mixed_lens(B, rng, Lmax)
                    unused = -1 if (N + bs) % 2 == 0 else 2**31 - 1
                    args, _ = paged_inputs(B, S_q, N, lens, bs, dt, dev, gen, unused=unused)
                    name = f"matrix {str(dt)[6:]} N={N} S_q={S_q} bs={bs} lens={lens}"
                    res.run(name + " amla", lambda: compare(args)[2])
                    if bs == 64:
                        res.run(name + " amla 1-split", lambda: compare(args, num_splits=1)[2])
                        res.run(name + " multiply", lambda: compare(args, rescale="multiply")[2])
                        res.run(name + " amla-CANN", lambda: compare(args, **CANN)[2])
    log(f"matrix done at {time.time() - t_start:.0f}s")

    dt = dtypes[0]
    # ---- A1: zero-length rows / all zero --------------------------------------------------------
    def a1():
        args, _ = paged_inputs(3, 2, 16, [0, 0, 0], 64, dt, dev, gen)
        out, lse = tri.amla_variant(*args, SCALE, True)
        assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
        e = (args[0], args[1], torch.empty(0, 64, 1, 512, dtype=dt, device=dev), torch.empty(0, 64, 1, 64, dtype=dt,
             device=dev), torch.empty(3, 0, dtype=torch.int32, device=dev), torch.zeros(3, dtype=torch.int32, device=dev))
        out, lse = tri.amla_variant(*e, SCALE, True)
        assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()
        args, _ = paged_inputs(4, 2, 16, [0, S(500), 0, 1], 64, dt, dev, gen)
        return compare(args)[2]
    res.run("A1 zero-length rows, all-zero batch, empty cache", a1)

    # ---- A2: NaN vs clean cache bit-identical --------------------------------------------------------
    def a2():
        lens = [37, S(5000), S(64)]
        args, _ = paged_inputs(3, 2, 16, lens, 64, dt, dev, gen)
        clean = list(args)
        clean[2], clean[3] = args[2].nan_to_num(0.0), args[3].nan_to_num(0.0)
        for rescale in ("amla", "multiply"):
            o1, l1 = tri.amla_variant(*args, SCALE, True, rescale=rescale)
            o2, l2 = tri.amla_variant(*clean, SCALE, True, rescale=rescale)
            assert torch.equal(o1, o2) and torch.equal(l1, l2)
        return compare(args)[2]
    res.run("A2 NaN in unused slots/pages changes nothing", a2)

    # ---- A3: page order / unused entries --------------------------------------------------------
    def a3():
        lens = [S(3000), S(77)]
        g1 = torch.Generator(device=dev).manual_seed(5)
        args1, (ck, kr) = paged_inputs(2, 2, 32, lens, 64, dt, dev, g1, unused=-1)
        q = (args1[0], args1[1])
        g2 = torch.Generator(device=dev).manual_seed(6)
        args2, _ = paged_inputs(2, 2, 32, lens, 64, dt, dev, g2, unused=2**31 - 1, c_kv=ck, k_rope=kr, q=q)
        o1, l1 = tri.amla_variant(*args1, SCALE, True)
        o2, l2 = tri.amla_variant(*args2, SCALE, True)
        assert torch.equal(o1, o2) and torch.equal(l1, l2)
        return "bit-identical"
    res.run("A3 random page order, unused entries -1 / 2^31-1", a3)

    # ---- A5: short sequences, many splits --------------------------------------------------------
    def a5():
        args, _ = paged_inputs(4, 1, 16, [1, 3, 7, 20], 16, dt, dev, gen, extra_blocks=S(500))
        infos = []
        for ns in (None, 8, S(64)):
            out, lse, info = compare(args, num_splits=ns)
            assert torch.isfinite(lse).all()
            infos.append(f"ns={tri.LAST_LAUNCH['plan']['num_splits']}")
        return " ".join(infos)
    res.run("A5 L=1..20 with many splits", a5)

    # ---- A6: MTP causal --------------------------------------------------------------------------
    def a6():
        for L in (2, 3, 64, 65):
            args, _ = paged_inputs(2, 2, 16, [L, L], 64, dt, dev, gen)
            compare(args)
        return "L=2,3,64,65"
    res.run("A6 S_q=2 causal", a6)

    # ---- A7: block sizes agree -------------------------------------------------------------------
    def a7():
        lens = [S(5000), S(129), S(64)]
        ck = kr = q = None
        outs = []
        for bs in (16, 64, 128):
            args, (ck, kr) = paged_inputs(3, 2, 16, lens, bs, dt, dev, gen, c_kv=ck, k_rope=kr, q=q)
            q = (args[0], args[1])
            outs.append(compare(args)[:2])
        same = all(torch.equal(o, outs[0][0]) and torch.equal(l, outs[0][1]) for o, l in outs[1:])
        return f"bitwise identical across block sizes: {same}"
    res.run("A7 block_size 16/64/128", a7)

    # ---- AMLA numerics: exact-zero columns, huge logit range ------------------------------------
    def zeros_and_range():
        L = S(4096)
        args, (ck, kr) = paged_inputs(1, 2, 16, [L], 64, dt, dev, gen)
        ck = ck.clone()
        ck[0, :L // 2, :16] = 0
        kr = ((torch.arange(L, device=dev)[:, None].float() - (L - 1)) * (0.25 * 79 / (L - 1)) *
              torch.ones(64, device=dev)).to(dt)[None]
        q = (args[0], torch.ones_like(args[1]))
        args, _ = paged_inputs(1, 2, 16, [L], 64, dt, dev, gen, c_kv=ck, k_rope=kr, q=q)
        infos = []
        for kw in ({}, CANN, dict(rescale="multiply")):
            out, lse, info = compare(args, num_splits=1, **kw)
            assert torch.isfinite(out).all() and (out[0, :, :, :16] != 0).all()
            infos.append(info)
        return " | ".join(infos)
    res.run("AMLA exact-zero columns + logits climbing over 170", zeros_and_range)

    # ---- NaN / +inf logits: NaN where the reference is NaN, never an empty row (session 6) ------------------
    def nan_inf():
        L = S(3000)
        args, _ = paged_inputs(2, 2, 16, [L, S(700)], 64, dt, dev, gen)
        q_nope, kv, bt = args[0].clone(), args[2].clone(), args[4]
        q_nope[0, 1, 3, 5] = float("nan")                       # request 0, token 1, head 3
        k = S(500) - 10                                         # request 1, key k: c_kv[..., 7] = +inf
        kv[int(bt[1, k // 64]), k % 64, 0, 7] = float("inf")
        args = (q_nope, args[1], kv) + tuple(args[3:])
        r_out, r_lse = ref.amla(*args, SCALE, True)
        nan_rows = torch.isnan(r_lse)
        assert nan_rows[0, 1, 3] and nan_rows[1].any() and not nan_rows.all()
        keep = tri._empty
        tri._empty = lambda shape, dtype, device: torch.full(shape, 777.0, dtype=dtype, device=device)
        try:
            for kw in ({}, CANN, dict(rescale="multiply")):
                for ns in (None, 1, 4):
                    out, lse = tri.amla_variant(*args, SCALE, True, num_splits=ns, **kw)
                    assert torch.equal(torch.isnan(lse), nan_rows), (kw, ns)
                    assert torch.equal(torch.isnan(out), torch.isnan(r_out)), (kw, ns)
                    ok = ~nan_rows
                    assert_close(out[ok].nan_to_num(0.0), r_out[ok].nan_to_num(0.0),
                                 "bf16" if dt == torch.bfloat16 else "fp16")
        finally:
            tri._empty = keep
        return f"{int(nan_rows.sum())} NaN rows of {nan_rows.numel()} match the reference (3 rescales x 3 splits)"
    res.run("NaN / +inf logits give NaN rows like the reference", nan_inf)

    # ---- determinism -------------------------------------------------------------------------------
    def determinism():
        args, _ = paged_inputs(4, 2, S(128), [S(9000), 0, S(300), S(20000)], 64, dt, dev, gen)
        o1, l1 = tri.amla_variant(*args, SCALE, True)
        o2, l2 = tri.amla_variant(*args, SCALE, True)
        assert torch.equal(o1, o2) and torch.equal(l1, l2)
        return "bitwise"
    res.run("determinism", determinism)

    # ---- CUDA graph with new seq_lens on replay; torch.compile fullgraph ----------------------------
    if dev.type == "cuda":
        def graph():
            lens0 = [4000, 100, 0, 32000]
            args, _ = paged_inputs(4, 2, 32, lens0, 64, dt, dev, gen)
            static = list(args)
            tri.amla_variant(*static, SCALE, True)         # compile outside capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out, lse = tri.amla_variant(*static, SCALE, True)
            # new lengths within each request's pages (request 2 owns none)
            static[5].copy_(torch.tensor([17, 100, 0, 31000], dtype=torch.int32, device=dev))
            g.replay()
            torch.cuda.synchronize()
            r_out, _ = ref.amla(*static, SCALE, True)
            assert_close(out, r_out, "bf16" if dt == torch.bfloat16 else "fp16")
            assert_close(lse, lse_fp64(static), "lse", name="lse (vs fp64)")
            return "replayed with different seq_lens"
        res.run("CUDA-graph capture + replay", graph)

        def compiled():
            try:
                import ops  # noqa: F401
            except Exception as e:  # noqa: BLE001
                return f"SKIPPED: import ops failed ({type(e).__name__}: {e})"
            args, _ = paged_inputs(2, 2, 16, [3000, 5], 64, dt, dev, gen)

            def f(*xs):
                return torch.ops.ds.amla(*xs, SCALE, True)
            with ops.backend("triton"):
                cf = torch.compile(f, fullgraph=True)
                out, lse = cf(*args)
            r_out, _ = ref.amla(*args, SCALE, True)
            assert_close(out, r_out, "bf16" if dt == torch.bfloat16 else "fp16")
            assert_close(lse, lse_fp64(args), "lse", name="lse (vs fp64)")
            return "torch.ops.ds.amla under torch.compile(fullgraph=True), triton backend"
        res.run("torch.compile fullgraph", compiled)

    # ---- random sweep ------------------------------------------------------------------------------
    for i, Bi, S_q, N, bs, lens, rescale, ns, dti in sweep:
        args, _ = paged_inputs(Bi, S_q, N, lens, bs, dti, dev, gen)
        res.run(f"sweep {i} {str(dti)[6:]} B={Bi} S_q={S_q} N={N} bs={bs} lens={lens} {rescale} ns={ns}",
                lambda: compare(args, rescale=rescale.replace("-CANN", ""), num_splits=ns,
                                **(CANN if "CANN" in rescale else {}))[2])

    total = res.passed + len(res.failed)
    log(f"\nSUMMARY: {res.passed}/{total} passed, {len(res.failed)} failed, {time.time() - t_start:.0f}s")
    for f in res.failed:
        log(f"  FAILED: {f}")
    paths = [a.out] if a.out else []
    if os.environ.get("OUT"):
        paths.append(os.path.join(os.environ["OUT"], "check_amla.txt"))
    for out_path in paths:
        pathlib.Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(out_path).write_text("\n".join(LINES) + "\n")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
