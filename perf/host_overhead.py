"""Host (CPU) overhead per eager call of the ds ops' Python launch paths, with the kernel launches stubbed.

Runs on a CPU-only machine: ``python perf/host_overhead.py`` (no GPU, TRITON_INTERPRET must be unset in the
environment; the script sets it itself after the kernels are defined, only so that ``DsOp.select`` accepts CPU
tensors). Every ``@triton.jit`` launch (``kernel[grid](...)``) is replaced by a stub that runs Triton's own
argument binder for a CUDA sm_90 target (the specialisation of every argument: dtype, ``% 16`` alignment,
``== 1``) plus the kernel-cache key, and records (kernel, grid, specialisation, options) — everything
``JITFunction.run`` does on the host except the driver call itself (``kernel.run`` + launch metadata, a few µs
per launch in C). ``--stub noop`` replaces the launch by a plain no-op instead (launcher + dispatch only).

The launchers are forced onto their **CUDA** configs (each module's ``_backend_key`` is patched to "cuda"), so
the plans and launch arguments are the ones an H200 run computes; tensors are CPU fp16/fp32 (bf16 is refused on
CPU by supports_reason). Paths timed per op:

* ``kernel``  — the Triton launcher called directly (``ops.triton.<mod>.<fn>``);
* ``eager``   — the DsOp eager fast path (``ops.<mod>.<fn>``) with ``DS_OPS_CHECKS=0`` (static checks only);
* ``eager+checks`` — the same with the data-dependent checks on (on a GPU those add host syncs, not measured here);
* ``torch.ops`` — ``torch.ops.ds.<op>`` (dispatcher), ``DS_OPS_CHECKS=0``.

``--save-launches F`` writes the recorded launches (kernel, grid, Triton specialisation, options) of one call per
case as JSON; ``--check-launches F`` compares against such a file and fails on any difference — the proof that
a host-path change launches exactly the same kernels with exactly the same arguments' specialisation.

Prints a Markdown table: µs per call (best of repeated batches), launches per call.

``--gpu`` (on a CUDA machine): no stubs, bf16 inputs, real launches; prints host µs per call (back-to-back calls
timed before the final synchronize) and wall µs per call (including it) for the same paths.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if os.environ.get("TRITON_INTERPRET", "0") == "1":
    sys.exit("perf/host_overhead.py: unset TRITON_INTERPRET (the real JITFunction launch path is what is measured)")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

import ops  # noqa: E402
from ops import _library as L  # noqa: E402
from ops.triton import amla as TA, mla_prolog as TM, moe_gating as TG, quant as TQ  # noqa: E402

_MODULES = (TA, TM, TG, TQ)

# ---------------------------------------------------------------------------------------------------------------
# launch stubs
# ---------------------------------------------------------------------------------------------------------------
_RECORD: list | None = None
_BINDERS: dict = {}
_KEY_CACHE: dict = {}
_BACKEND = None


def _cuda_backend():
    global _BACKEND
    if _BACKEND is None:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        _BACKEND = make_backend(GPUTarget("cuda", 90, 32))
    return _BACKEND


def _binder_stub(self, *args, grid, warmup, **kwargs):
    """JITFunction.run's host work without the driver: bind + specialise the arguments, the cache key."""
    from triton.runtime.jit import compute_cache_key, create_function_from_signature
    b = _BINDERS.get(self)
    if b is None:
        b = _BINDERS[self] = create_function_from_signature(self.signature, self.params, _cuda_backend())
    kwargs.setdefault("debug", self.debug)
    bound, spec, options = b(*args, **kwargs)
    key = compute_cache_key(_KEY_CACHE, spec, options)
    if _RECORD is not None:
        _RECORD.append({"kernel": self.fn.__name__, "grid": [int(g) for g in grid],
                        "spec": [[str(s[0]), repr(s[1])] for s in spec], "options": repr(options), "key": key})
    return None


def _noop_stub(self, *args, grid, warmup, **kwargs):
    if _RECORD is not None:
        _RECORD.append({"kernel": self.fn.__name__, "grid": [int(g) for g in grid]})
    return None


def install(stub: str) -> None:
    JITFunction.run = _binder_stub if stub == "binder" else _noop_stub
    for m in _MODULES:                      # the CUDA launch configs, as on the H200
        m._backend_key = lambda device: "cuda"
    os.environ["TRITON_INTERPRET"] = "1"   # only so DsOp.select takes CPU tensors; jit functions already exist


# ---------------------------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------------------------
def _inputs(op: str, shape: str, dtype, device: str = "cpu") -> dict:
    spec = L.SPECS[op]
    g = torch.Generator().manual_seed(0)
    return spec.make_inputs(spec.shapes[shape], dtype=dtype, device=device, generator=g)


def cases(device: str = "cpu") -> list[tuple[str, object, object, str, dict]]:
    """(label, DsOp, launcher, torch.ops name, inputs); fp16 on CPU (bf16 is refused there), bf16 on a GPU."""
    f16 = torch.float16 if device == "cpu" else torch.bfloat16

    def mk(op, shape, dtype):
        return _inputs(op, shape, dtype, device)

    out = []
    for shape in ("t1_n128_bf16", "t1_n128_a8w8", "t128_n128_bf16"):
        label = f"mla_prolog {shape.replace('bf16', 'fp16') if device == 'cpu' else shape}"
        out.append((label, ops.mla_prolog.mla_prolog, TM.mla_prolog, "mla_prolog", mk("mla_prolog", shape, f16)))
    for shape in ("b1_sq1_n16_l1024", "b64_sq2_n16_l1024"):
        out.append((f"amla {shape}", ops.amla.amla, TA.amla, "amla", mk("amla", shape, f16)))
    out.append(("dynamic_quant hidden_T1", ops.quant.dynamic_quant, TQ.dynamic_quant, "dynamic_quant",
                mk("dynamic_quant", "hidden_T1", f16)))
    out.append(("rms_norm_dynamic_quant hidden_T1", ops.quant.rms_norm_dynamic_quant, TQ.rms_norm_dynamic_quant,
                "rms_norm_dynamic_quant", mk("rms_norm_dynamic_quant", "hidden_T1", f16)))
    out.append(("quant_matmul qkv_a_M1", ops.quant.quant_matmul, TQ.quant_matmul, "quant_matmul",
                mk("quant_matmul", "qkv_a_M1", f16)))
    out.append(("moe_gating_top_k T1", ops.moe_gating.moe_gating_top_k, TG.moe_gating_top_k, "moe_gating_top_k",
                mk("moe_gating_top_k", "deepseek_v3_T1", torch.float32)))
    return out


def _split(inp: dict, fn) -> tuple[tuple, dict]:
    """Positional args up to the first keyword-only parameter (as engines call the ops), the rest as keywords."""
    import inspect
    args, kw = [], {}
    for name, p in inspect.signature(fn).parameters.items():
        if name not in inp:
            continue
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and not kw:
            args.append(inp[name])
        else:
            kw[name] = inp[name]
    return tuple(args), kw


def time_gpu(fn, *, calls: int = 200, repeats: int = 7) -> tuple[float, float]:
    """(host µs per call: back-to-back calls timed before the final synchronize — the launch queue absorbs them;
    wall µs per call including the synchronize). Best of ``repeats``."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    host, wall = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        wall.append((t2 - t0) / calls * 1e6)
    return min(host), min(wall)


def main_gpu(args) -> int:
    """--gpu: the same paths with real launches on the GPU (bf16), no stubs."""
    if not torch.cuda.is_available():
        sys.exit("--gpu needs CUDA")
    torch.cuda.init()
    rows = []
    with ops.backend("triton"):
        for label, dsop, launcher, opname, inp in cases("cuda"):
            if args.only and args.only not in label:
                continue
            a, kw = _split(inp, dsop.reference)
            tops = getattr(torch.ops.ds, opname)
            paths = {"kernel": lambda: launcher(*a, **kw),
                     "eager": _with_checks(False, lambda: dsop(*a, **kw)),
                     "eager+checks": _with_checks(True, lambda: dsop(*a, **kw)),
                     "torch.ops": _with_checks(False, lambda: tops(*a, **kw))}
            res = {p: time_gpu(f, repeats=args.repeats) for p, f in paths.items()}
            rows.append((label, res))
            print(f"{label}: " + ", ".join(f"{p} host {h:.1f} / wall {w:.1f} µs" for p, (h, w) in res.items()),
                  file=sys.stderr, flush=True)
    print(f"\nGPU eager calls (real launches, bf16), µs per call: host (before the synchronize) / wall "
          f"(incl. it); {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}\n")
    print("| case | kernel (launcher) | eager (checks off) | eager + checks | torch.ops |")
    print("|---|---|---|---|---|")
    for label, res in rows:
        print(f"| {label} | " + " | ".join(f"{h:.1f} / {w:.1f}" for h, w in res.values()) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({label: {p: {"host_us": h, "wall_us": w} for p, (h, w) in res.items()} for label, res in rows},
                      f, indent=1)
    return 0


def time_call(fn, *, budget_s: float, repeats: int) -> float:
    """Best (min) over ``repeats`` batches of the mean µs per call (robust to other load on the machine)."""
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(5, int(budget_s / repeats / one))
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        res.append((time.perf_counter() - t0) / n * 1e6)
    return min(res)


def _with_checks(on: bool, fn):
    def run():
        old = os.environ.get("DS_OPS_CHECKS")
        os.environ["DS_OPS_CHECKS"] = "1" if on else "0"
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop("DS_OPS_CHECKS", None)
            else:
                os.environ["DS_OPS_CHECKS"] = old
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stub", choices=("binder", "noop"), default="binder")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", default="", help="substring filter on the case label")
    ap.add_argument("--save-launches", default="")
    ap.add_argument("--check-launches", default="")
    ap.add_argument("--json", default="", help="also write {case: {path: µs, 'launches': n}} here")
    ap.add_argument("--gpu", action="store_true", help="real launches on the GPU (bf16) instead of stubs")
    args = ap.parse_args()
    if args.gpu:
        return main_gpu(args)
    torch.set_num_threads(1)
    install(args.stub)
    global _RECORD
    records = {}
    rows = []
    with ops.backend("triton"):
        for label, dsop, launcher, opname, inp in cases():
            if args.only and args.only not in label:
                continue
            a, kw = _split(inp, dsop.reference)
            tops = getattr(torch.ops.ds, opname)
            sel = dsop.select(a, kw)[0]
            assert sel == "triton", f"{label}: dispatch picked {sel}"
            paths = {"kernel": lambda: launcher(*a, **kw),
                     "eager": _with_checks(False, lambda: dsop(*a, **kw)),
                     "eager+checks": _with_checks(True, lambda: dsop(*a, **kw)),
                     "torch.ops": _with_checks(False, lambda: tops(*a, **kw))}
            _RECORD = []
            paths["eager"]()
            records[label] = _RECORD
            _RECORD = None
            us = {p: time_call(f, budget_s=args.budget, repeats=args.repeats) for p, f in paths.items()}
            rows.append((label, len(records[label]), us))
            print(f"{label}: " + ", ".join(f"{p} {v:.1f} µs" for p, v in us.items()), file=sys.stderr, flush=True)
    print(f"\nhost µs per call, launches stubbed ({args.stub}: "
          f"{'Triton binder + cache key, no driver' if args.stub == 'binder' else 'no-op'}), CUDA configs, "
          f"torch {torch.__version__}, triton {triton.__version__}\n")
    print("| case | launches | kernel (launcher) | eager (checks off) | eager + checks | torch.ops |")
    print("|---|---|---|---|---|---|")
    for label, n, us in rows:
        print(f"| {label} | {n} | {us['kernel']:.1f} | {us['eager']:.1f} | {us['eager+checks']:.1f} | "
              f"{us['torch.ops']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({label: {**us, "launches": n} for label, n, us in rows}, f, indent=1)
    if args.save_launches:
        with open(args.save_launches, "w") as f:
            json.dump(records, f, indent=1)
    if args.check_launches:
        with open(args.check_launches) as f:
            want = json.load(f)
        bad = [k for k in records if k in want and want[k] != records[k]]
        missing = [k for k in records if k not in want]
        if bad:
            for k in bad:
                print(f"LAUNCH MISMATCH {k}:\n  want {want[k]}\n  got  {records[k]}", file=sys.stderr)
            return 1
        print(f"\nlaunches identical to {args.check_launches} for {len(records) - len(missing)} case(s)"
              + (f" (not in the file: {missing})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
