"""``python -m perf``: per-op FLOP-utilization report over every registered ``ds`` op.

For each op × shape × backend: build fresh random inputs with the op's ``make_inputs``, run the op under
``ops.backend(b)`` through the eager fast path and through ``torch.ops.ds``, check both against the reference
(DESIGN §Tolerances), time it (device events / CUDA graph / wall clock, see perf/timers.py), and report µs
p20/p50/p80, TFLOPS, GB/s, % of the datasheet peak, % of the measured ceiling, arithmetic intensity and bound.
Writes ``results.csv``, ``results.json``, ``summary.md`` and ``roofline_<device>.png`` into ``--out``.

Examples::

    python -m perf                                   # everything that can run here (CPU: scaled shapes, < 3 min)
    python -m perf --ops amla --shapes 'decode_*' --backends reference,triton
    python -m perf --device cuda --out $OUT/perf     # the H200 report (perf/run_gpu.sh)
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import shlex
import subprocess
import sys
import time
import zlib
from typing import Any, Sequence

import torch

from . import peaks as P
from . import specs as S
from .check import changed_region, check_outputs
from .timers import host_call_us, time_fn

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEFAULT_CPU_BUDGET_S = 150.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    csv_list = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    ap.add_argument("--ops", type=csv_list, default=None, help="comma list of op names or globs (default: all)")
    ap.add_argument("--shapes", type=csv_list, default=None,
                    help="comma list of shape names, globs, or sets (" + ", ".join(S.SHAPE_SETS) + "; 'a+b' = both); "
                         "default: all (on CPU a few, the op's CPU shapes or scaled down)")
    ap.add_argument("--backends", type=csv_list, default=None,
                    help="comma list of reference,triton,ascendc (default: every backend that can run here; the "
                         "reference always runs as the baseline)")
    ap.add_argument("--device", default=None, help="cuda | npu | cpu (default: cuda, else npu, else cpu)")
    ap.add_argument("--out", default="perf_out", help="output folder (default perf_out/)")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="activation dtype passed to make_inputs")
    ap.add_argument("--timer", default="auto", choices=["auto", "events", "cudagraph"],
                    help="CUDA timer: events (do_bench), cudagraph (do_bench_cudagraph), auto = graph replay for "
                         "calls under 30 µs")
    ap.add_argument("--no-layer", action="store_true", help="skip the layer view")
    ap.add_argument("--no-peers", action="store_true", help="skip optional peer implementations")
    ap.add_argument("--no-dispatch", action="store_true", help="skip the torch.ops vs eager dispatch timing")
    ap.add_argument("--keep-arg-checks", action="store_true",
                    help="time with the ops' data-dependent argument checks on (default: DS_OPS_CHECKS=0 while timing)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"stop starting new cases after this many seconds (default {DEFAULT_CPU_BUDGET_S:.0f} on "
                         "CPU, none elsewhere)")
    ap.add_argument("--max-shapes", type=int, default=None, help="CPU: shapes per op when --shapes is not given")
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# environment facts
# ----------------------------------------------------------------------------------------------
def versions() -> dict:
    out = {"torch": torch.__version__, "triton": None, "torch_npu": None}
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch_npu
        out["torch_npu"] = getattr(torch_npu, "__version__", "?")
    except Exception:  # noqa: BLE001
        pass
    return out


def git_sha() -> str:
    env = os.environ.get("DS_OPS_GIT_SHA")
    if env:
        return env
    try:
        sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        if not sha:
            return "unknown"
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


# ----------------------------------------------------------------------------------------------
# one case
# ----------------------------------------------------------------------------------------------
def make_inputs(entry: S.OpEntry, shape: dict, *, dtype, device: torch.device, seed: int) -> dict:
    """``SPEC.make_inputs`` with a seeded CPU generator (or one on the device if the op wants that)."""
    try:
        return entry.spec.make_inputs(shape, dtype=dtype, device=device, generator=torch.Generator().manual_seed(seed))
    except RuntimeError as e:
        if device.type == "cpu" or "enerator" not in str(e):
            raise
        return entry.spec.make_inputs(shape, dtype=dtype, device=device,
                                      generator=torch.Generator(device=device).manual_seed(seed))


def _clone_mutated(inputs: dict, mutated: Sequence[str]) -> dict:
    return {k: (v.clone() if k in mutated and isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


@contextlib.contextmanager
def _arg_checks(keep: bool):
    """Timing runs with the ops' data-dependent argument checks off (DS_OPS_CHECKS=0), as under CUDA-graph capture
    and torch.compile: those checks sync the host, which would put launch latency into device-event timings."""
    if keep:
        yield
        return
    old = os.environ.get("DS_OPS_CHECKS")
    os.environ["DS_OPS_CHECKS"] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DS_OPS_CHECKS", None)
        else:
            os.environ["DS_OPS_CHECKS"] = old


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "npu":  # pragma: no cover
        torch.npu.synchronize()


def roofline_metrics(flops: int, nbytes: int, p50_us: float | None, compute: str, peaks: P.DevicePeaks | None,
                     ceilings: dict) -> dict:
    """TFLOPS, GB/s, intensity, ridge, bound and the % columns for one timing (see docs/perf/README.md)."""
    out: dict[str, Any] = dict(tflops=None, gbps=None, intensity=None, ridge=None, bound=None, pct_peak=None,
                               pct_peak_compute=None, pct_peak_bw=None, pct_achievable=None)
    out["intensity"] = flops / nbytes if nbytes else None
    pk_c = peaks.compute(compute).value if peaks is not None and peaks.compute(compute) else None
    pk_b = peaks.hbm_tbs.value if peaks is not None else None
    ach_c = P.ceiling_value(ceilings, compute)
    ach_b = P.ceiling_value(ceilings, "hbm_tbs")
    rc, rb = (pk_c, pk_b) if (pk_c and pk_b) else (ach_c, ach_b)
    if rc and rb:
        out["ridge"] = rc / rb
        if out["intensity"] is not None:
            out["bound"] = "compute" if out["intensity"] >= out["ridge"] else "memory"
    elif nbytes and not flops:
        out["bound"] = "memory"

    def roof_us(c, b):
        terms = []
        if flops:
            if not c:
                return None
            terms.append(flops / (c * 1e12))
        if nbytes:
            if not b:
                return None
            terms.append(nbytes / (b * 1e12))
        return max(terms) * 1e6 if terms else None

    if not p50_us or p50_us <= 0:
        return out
    sec = p50_us * 1e-6
    out["tflops"] = flops / sec / 1e12
    out["gbps"] = nbytes / sec / 1e9
    t_peak, t_ach = roof_us(pk_c, pk_b), roof_us(ach_c, ach_b)
    out["pct_peak"] = 100 * t_peak / p50_us if t_peak else None
    out["pct_achievable"] = 100 * t_ach / p50_us if t_ach else None
    out["pct_peak_compute"] = 100 * out["tflops"] / pk_c if pk_c and flops else None
    out["pct_peak_bw"] = 100 * out["gbps"] / (pk_b * 1e3) if pk_b and nbytes else None
    return out


class Runner:
    def __init__(self, args: argparse.Namespace, device: torch.device, peaks: P.DevicePeaks | None, ceilings: dict,
                 meta: dict):
        self.args, self.dev, self.peaks, self.ceilings, self.meta = args, device, peaks, ceilings, meta
        self.dtype = DTYPES[args.dtype]
        self.rows: list[dict] = []
        self.notes: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------
    def repro(self, op: str, shape: str, backend: str) -> str:
        cmd = ["python", "-m", "perf", "--device", self.dev.type, "--ops", op, "--shapes", shape,
               "--backends", backend]
        if self.args.dtype != "bf16":
            cmd += ["--dtype", self.args.dtype]
        return " ".join(shlex.quote(c) for c in cmd)

    def base_row(self, entry: S.OpEntry, case: S.ShapeCase, backend: str) -> dict:
        return dict(op=entry.name, backend=backend, shape=case.name, shape_dict=case.shape, scaled=case.scaled,
                    dtype=self.args.dtype, compute=entry.spec.compute, device=self.meta["device"],
                    device_key=self.meta["device_key"], torch=self.meta["torch"], triton=self.meta["triton"],
                    torch_npu=self.meta["torch_npu"], git_sha=self.meta["git_sha"], timestamp=P.now_iso(),
                    repro=self.repro(entry.name, case.name, "reference" if backend.startswith("peer:") else backend),
                    note="scaled down for CPU from " + S.fmt_shape(case.full) if case.scaled else "")

    def n_sets(self, nbytes: int) -> int:
        """Input sets to rotate among so one timed call does not find the previous call's data in L2."""
        if self.dev.type != "cuda" or nbytes <= 0:
            return 1
        l2 = getattr(torch.cuda.get_device_properties(self.dev), "L2_cache_size", 50 << 20) or (50 << 20)
        n = math.ceil(3 * l2 / nbytes)
        return int(max(1, min(8, n, (8 << 30) // max(nbytes, 1))))

    def backends_for(self, entry: S.OpEntry) -> tuple[list[str], bool]:
        if self.args.backends:  # the reference still runs as the baseline; it gets a row only if asked for
            return list(self.args.backends), True
        return S.backends_of(entry), False

    # -- one op × shape --------------------------------------------------------------------------
    def run_case(self, entry: S.OpEntry, case: S.ShapeCase, progress=None) -> None:
        import ops
        from ops._library import BackendUnavailable
        dev, args = self.dev, self.args
        seed = zlib.crc32(f"{entry.name}/{case.name}".encode()) & 0x7FFFFFFF
        mutated = S.mutated_args(entry)
        try:
            inputs = make_inputs(entry, case.shape, dtype=self.dtype, device=dev, seed=seed)
            flops, nbytes = int(entry.spec.flops(**inputs)), int(entry.spec.bytes(**inputs))
        except Exception as e:  # noqa: BLE001
            r = self.base_row(entry, case, "-")
            r.update(check="ERROR", check_detail=f"make_inputs/flops/bytes failed: {type(e).__name__}: {e}"[:400])
            self.rows.append(r)
            return
        # the reference, the golden output (eager, on this device)
        ref_out, ref_mut, ref_err = None, {}, None
        try:
            ref_in = _clone_mutated(inputs, mutated)
            with ops.backend("reference"):
                ref_out = entry.op(**ref_in)
            _sync(dev)
            ref_mut = {k: ref_in[k] for k in mutated}
        except Exception as e:  # noqa: BLE001
            ref_err = f"reference failed: {type(e).__name__}: {e}"[:400]

        want, explicit = self.backends_for(entry)
        for b in want:
            if progress is not None:
                progress(f"{entry.name} {case.name} {b}")
            row = self.base_row(entry, case, b)
            row.update(flops=flops, bytes=nbytes)
            if b not in ops.BACKENDS or b == "auto":
                row.update(check="SKIP", check_detail=f"unknown backend {b!r} (have {ops.BACKENDS})")
                self.rows.append(row)
                continue
            if dev.type == "cpu" and b == "triton" and not explicit:
                self.note(f"{entry.name}: triton on CPU runs only under the interpreter; not timed by default "
                          "(ask with --backends triton)")
                continue
            # can it run here?
            try:
                with ops.backend(b):
                    entry.op.select((), inputs)
            except BackendUnavailable as e:
                if explicit:
                    row.update(check="SKIP", check_detail=str(e)[:400])
                    self.rows.append(row)
                else:
                    self.note(f"{entry.name}: backend {b} unavailable here: {e}")
                continue
            self._run_backend(entry, case, b, row, inputs, mutated, flops, nbytes, ref_out, ref_mut, ref_err, seed)
            self.rows.append(row)
        if not args.no_peers:
            self._run_peers(entry, case, inputs, flops, nbytes, ref_out, ref_err)

    def note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)

    def _check(self, out, ref_out, ref_err, entry, mutated, got_in, ref_mut, orig) -> tuple[str, str]:
        if ref_err:
            return "ERROR", ref_err
        mut = []
        for k in mutated:
            g, e = changed_region(got_in[k], ref_mut[k], orig[k])
            mut.append((k, g, e))
        v = check_outputs(out, ref_out, entry.spec.tolerance, mutated=mut)
        return v.label, v.detail

    def _run_backend(self, entry, case, b, row, inputs, mutated, flops, nbytes, ref_out, ref_mut, ref_err, seed):
        import ops
        dev, args = self.dev, self.args
        orig = {k: inputs[k].clone() for k in mutated}
        # correctness: eager fast path, then the registered op
        try:
            with ops.backend(b):
                got_in = _clone_mutated(inputs, mutated)
                out = entry.op(**got_in)
                _sync(dev)
                chk, detail = self._check(out, ref_out, ref_err, entry, mutated, got_in, ref_mut, orig)
                if b == "reference" and chk == "PASS":
                    chk = "baseline"
                got_in2 = _clone_mutated(inputs, mutated)
                out2 = entry.registered(**got_in2)
                _sync(dev)
                chk2, detail2 = self._check(out2, ref_out, ref_err, entry, mutated, got_in2, ref_mut, orig)
                if chk2 != "PASS" and chk in ("PASS", "baseline"):
                    chk, detail = chk2, "torch.ops.ds path: " + detail2
                del out, out2, got_in, got_in2
        except Exception as e:  # noqa: BLE001
            row.update(check="ERROR", check_detail=f"{type(e).__name__}: {e}"[:400])
            return
        row.update(check=chk, check_detail=detail)
        # timing: rotate among input sets
        try:
            n = self.n_sets(nbytes)
            sets = [inputs] + [make_inputs(entry, case.shape, dtype=self.dtype, device=dev, seed=seed + i)
                               for i in range(1, n)]
            state = {"i": 0}
            op = entry.op

            def call():
                kw = sets[state["i"] % n]
                state["i"] += 1
                return op(**kw)

            with ops.backend(b), _arg_checks(args.keep_arg_checks):
                t = time_fn(call, dev, mode=args.timer, quick=args.quick)
                row.update(us_p20=t.p20_us, us_p50=t.p50_us, us_p80=t.p80_us,
                           timer=t.method + (f" ×{n} input sets" if n > 1 else ""))
                if t.note:
                    row["note"] = "; ".join(x for x in (row.get("note"), t.note) if x)
                if not args.no_dispatch and (dev.type != "cpu" or t.p50_us < 100_000):
                    reg = entry.registered
                    row["dispatch_us_registered"] = host_call_us(lambda: reg(**inputs), dev)
                    row["dispatch_us_eager"] = host_call_us(lambda: op(**inputs), dev)
            sets.clear()
        except Exception as e:  # noqa: BLE001
            row["note"] = "; ".join(x for x in (row.get("note"), f"timing failed: {type(e).__name__}: {e}"[:300]) if x)
            return
        row.update(roofline_metrics(flops, nbytes, row.get("us_p50"), entry.spec.compute, self.peaks, self.ceilings))

    def _run_peers(self, entry, case, inputs, flops, nbytes, ref_out, ref_err):
        from .peers import peers_for
        for name, build in peers_for(entry.name, self.dev.type):
            row = self.base_row(entry, case, f"peer:{name}")
            row.update(flops=flops, bytes=nbytes)
            try:
                fn = build(inputs)
                out = fn()
                _sync(self.dev)
                if ref_err:
                    row.update(check="ERROR", check_detail=ref_err)
                else:
                    v = check_outputs(out, ref_out, entry.spec.tolerance)
                    row.update(check=v.label, check_detail=v.detail)
                t = time_fn(fn, self.dev, mode=self.args.timer, quick=self.args.quick)
                row.update(us_p20=t.p20_us, us_p50=t.p50_us, us_p80=t.p80_us, timer=t.method)
                row.update(roofline_metrics(flops, nbytes, t.p50_us, entry.spec.compute, self.peaks, self.ceilings))
            except Exception as e:  # noqa: BLE001
                row.update(check="SKIP", check_detail=f"peer {name}: {type(e).__name__}: {e}"[:400])
            self.rows.append(row)


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------
def _peaks_meta(peaks: P.DevicePeaks | None) -> dict:
    if peaks is None:
        return {}
    out = {}
    for k in ("bf16", "int8", "fp32", "hbm_tbs"):
        p = getattr(peaks, k)
        if p is not None:
            out[k] = dict(value=p.value, source=p.source, derived=p.derived)
    return out


class _Progress:
    """rich progress bar when rich is importable, else one line per case on stderr."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), transient=False)
        except Exception:  # noqa: BLE001
            self.p = None

    def __enter__(self):
        if self.p is not None:
            self.p.__enter__()
            self.task = self.p.add_task("perf", total=self.total)
        return self

    def __exit__(self, *exc):
        if self.p is not None:
            self.p.__exit__(*exc)

    def describe(self, text: str) -> None:
        if self.p is not None:
            self.p.update(self.task, description=text[:70])
        else:
            print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def advance(self) -> None:
        self.done += 1
        if self.p is not None:
            self.p.update(self.task, advance=1)


def main(argv: Sequence[str] | None = None, *, extra_ops: Sequence[S.OpEntry] = ()) -> int:
    """Run the report; returns the exit status (0 unless a check failed or nothing ran)."""
    args = parse_args(argv)
    t_start = time.perf_counter()
    device = torch.device(args.device or P.default_device())
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "cpu" and args.backends and "triton" in args.backends:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if device.type == "npu":  # pragma: no cover
        import torch_npu  # noqa: F401
    import ops  # noqa: F401 - registers the ops

    entries = S.collect_ops(args.ops, extra=extra_ops)
    name = P.device_name(str(device))
    peaks = P.lookup_peaks(name)
    ceilings = P.measure_ceilings(device, quick=args.quick)
    v = versions()
    meta = dict(device=name, device_type=device.type, device_key=peaks.key if peaks else P.slug(name), **v,
                git_sha=git_sha(), timestamp=P.now_iso(),
                command="python -m perf " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
                peaks=_peaks_meta(peaks), ceilings={k: vars(c) for k, c in ceilings.items()},
                arg_checks_during_timing=bool(args.keep_arg_checks),
                timer_doc={"cuda": "triton.testing.do_bench (CUDA events, L2 flushed, inputs rotated) or "
                                   "do_bench_cudagraph for calls < 30 µs; p20/p50/p80",
                           "npu": "torch.npu events after a 512 MiB flush; p20/p50/p80",
                           "cpu": "wall clock (time.perf_counter), median of a few reps"}[device.type])
    runner = Runner(args, device, peaks, ceilings, meta)
    if peaks is None:
        runner.note(f"no datasheet peak for {name!r}: % peak is empty, % achievable uses the measured ceilings")
    if not entries:
        runner.note("no ops are registered in ops.SPECS")

    budget = args.budget_s if args.budget_s is not None else (DEFAULT_CPU_BUDGET_S if device.type == "cpu" else None)
    plan = []
    for e in entries:
        try:
            cases = S.plan_shapes(e, args.shapes, device_type=device.type, quick=args.quick,
                                  dtype=runner.dtype, max_cpu_shapes=args.max_shapes)
        except Exception as ex:  # noqa: BLE001
            runner.note(f"{e.name}: planning shapes failed: {type(ex).__name__}: {ex}")
            continue
        if not cases:
            runner.note(f"{e.name}: no shape matches --shapes {','.join(args.shapes or [])}")
        plan += [(e, c) for c in cases]

    with _Progress(len(plan)) as prog:
        for e, c in plan:
            if budget is not None and time.perf_counter() - t_start > budget:
                runner.note(f"time budget of {budget:.0f} s reached: skipped {e.name} {c.name} and later cases")
                prog.advance()
                continue
            runner.run_case(e, c, progress=prog.describe)
            prog.advance()
            if device.type == "cuda":
                gc.collect()
                torch.cuda.empty_cache()

    layer = {"available": False, "reason": "skipped (--no-layer)", "views": []}
    if not args.no_layer:
        from .layer import layer_view
        layer = layer_view(device, dtype=runner.dtype, peaks=peaks, ceilings=ceilings,
                           specs={e.name: e.spec for e in entries})

    from . import report as R
    os.makedirs(args.out, exist_ok=True)
    png = f"roofline_{meta['device_key']}.png"
    err = R.plot_roofline(runner.rows, meta, os.path.join(args.out, png))
    if err:
        runner.note(err)
        png = None
    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    R.write_csv(runner.rows, os.path.join(args.out, "results.csv"))
    R.write_json(runner.rows, meta, layer, os.path.join(args.out, "results.json"))
    R.write_markdown(runner.rows, meta, layer, runner.notes, os.path.join(args.out, "summary.md"), png)
    R.print_table(runner.rows, layer, runner.notes)
    print(f"wrote {args.out}/results.csv, results.json, summary.md" + (f", {png}" if png else "")
          + f" in {meta['elapsed_s']} s")
    failed = [r for r in runner.rows if r.get("check") in ("FAIL", "ERROR")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
