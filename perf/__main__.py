"""``python -m perf``: per-op FLOP-utilization report over every registered ``ds`` op.

For each op × shape × backend: build fresh random inputs with the op's ``make_inputs``, run the op under
``ops.backend(b)`` through the eager fast path and through ``torch.ops.ds``, check both against the reference
(DESIGN §Tolerances), time it (CUDA-graph replay / device events / wall clock, see perf/timers.py), and report µs
p20/p50/p80 and their spread, TFLOPS, GB/s, % of the datasheet peak, % of the measured ceiling, arithmetic intensity and bound.
Writes ``results.csv``, ``results.json``, ``summary.md`` and ``roofline_<device>.png`` into ``--out``.

Examples::

    python -m perf                                   # everything that can run here (CPU: scaled shapes, < 3 min)
    python -m perf --ops amla --shapes 'decode_*' --backends reference,triton
    python -m perf --device cuda --out $OUT/perf     # the H200 report (perf/run_gpu.sh part1 / part2)
    python -m perf --merge DIR1 DIR2 --out docs/perf/h200          # one report from two runs
    python -m perf --device cuda --ops amla --repro-check 4        # ... then re-run 4 random rows and compare
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
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


def _cli_wants_triton_on_cpu(argv: Sequence[str]) -> bool:
    """``--backends ...triton...`` on a machine (or ``--device cpu``) where Triton can only interpret."""
    a = " ".join(argv)
    return "triton" in a and "--backends" in a and ("--device cpu" in a or not torch.cuda.is_available())


# Triton picks interpreter or compiler when a kernel module is imported (the imports below pull some in): decide now
if __name__ == "__main__" and _cli_wants_triton_on_cpu(sys.argv[1:]):
    os.environ.setdefault("TRITON_INTERPRET", "1")

from . import peaks as P  # noqa: E402
from . import specs as S  # noqa: E402
from .check import changed_region, check_outputs  # noqa: E402
from .timers import REPRO_FLOOR_PCT, host_call_us, time_fn  # noqa: E402

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
                    help="CUDA timer: auto = CUDA-graph replay of back-to-back calls, events where capture fails "
                         "(reason in the note); cudagraph = graph only (no timing where capture fails); events = one "
                         "event pair per call (L2 flushed, GPU sleep ahead so host launch latency is hidden)")
    ap.add_argument("--golden", default="device", choices=sorted(GOLDEN_DOC),
                    help="what the check compares with: device = the reference on this device, same dtypes, IEEE "
                         "fp32 math (a FAIL is re-checked against the CPU reference when cheap); cpu = the reference "
                         "on the CPU; upcast = the reference on this device with bf16/fp16 inputs up-cast to fp32 "
                         "(a diagnostic: it drops the reference's rounding points)")
    ap.add_argument("--no-layer", action="store_true", help="skip the layer view")
    ap.add_argument("--no-peers", action="store_true", help="skip optional peer implementations")
    ap.add_argument("--no-dispatch", action="store_true", help="skip the torch.ops vs eager dispatch timing")
    ap.add_argument("--keep-arg-checks", action="store_true",
                    help="time with the ops' data-dependent argument checks on (default: DS_OPS_CHECKS=0 while timing)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"stop starting new cases after this many seconds (default {DEFAULT_CPU_BUDGET_S:.0f} on "
                         "CPU, none elsewhere)")
    ap.add_argument("--max-shapes", type=int, default=None, help="CPU: shapes per op when --shapes is not given")
    ap.add_argument("--repro-check", type=int, default=0, metavar="N",
                    help="after the report, re-run N random rows' repro commands in this process and compare their "
                         "p50 with the report's (perf/repro_check.py; writes repro_check.txt)")
    ap.add_argument("--repro-seed", type=int, default=0, help="seed for picking the --repro-check rows")
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR",
                    help="combine the results.json of several runs (e.g. the two halves of the H200 report) into "
                         "one CSV/JSON/summary/roofline in --out; runs nothing")
    args = ap.parse_args(argv)
    bad = sorted(set(args.backends or ()) - set(S.BACKEND_ORDER))
    if bad:
        ap.error(f"--backends takes {', '.join(S.BACKEND_ORDER)}; got {', '.join(bad)}")
    if args.max_shapes is not None and args.max_shapes < 1:
        ap.error(f"--max-shapes must be >= 1, got {args.max_shapes}")
    if args.repro_check < 0:
        ap.error(f"--repro-check must be >= 0, got {args.repro_check}")
    if args.budget_s is not None and not args.budget_s > 0:
        ap.error(f"--budget-s must be > 0, got {args.budget_s}")
    if args.device is not None and not args.merge:
        if args.device.startswith("npu"):
            try:
                import torch_npu  # noqa: F401  (registers the npu device type)
            except ImportError as e:
                ap.error(f"--device {args.device}: torch_npu is not importable ({e})")
        try:
            dev = torch.device(args.device)
        except RuntimeError:
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda", "npu"):
            ap.error(f"--device takes cpu, cuda or npu (optionally with an index, cuda:1); got {args.device!r}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: this torch sees no CUDA device (torch.cuda.is_available() is False)")
    for d in args.merge or ():   # every part must be a report (a directory with results.json, or the file itself)
        from .report import load_json, results_path
        try:
            js = load_json(d)
        except (OSError, ValueError) as e:
            ap.error(f"--merge {d!r}: no readable results.json ({getattr(e, 'strerror', None) or e})")
        if not isinstance(js, dict) or not isinstance(js.get("rows"), list):
            ap.error(f"--merge {d!r}: {results_path(d)} is not a perf report (no 'rows' list)")
    try:        # fail now, not after a long run, if the results cannot be written (repro_check passes os.devnull)
        if args.out != os.devnull:
            os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        ap.error(f"--out {args.out!r} cannot be created: {e.strerror or e}")
    return args


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


@contextlib.contextmanager
def ieee_fp32_math():
    """The golden's math on CUDA: fp32 matmuls in IEEE fp32 (TF32 off for cuBLAS and cuDNN) and no reduced-precision
    reductions for bf16/fp16 matmuls, whatever the process or the environment (``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``)
    set. Restored afterwards. No effect on CPU tensors."""
    import warnings
    m, cd = torch.backends.cuda.matmul, torch.backends.cudnn
    names = ("allow_tf32", "allow_bf16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:   # some torch versions refuse the legacy flags after the new fp32_precision API was used: then leave them
            saved = [getattr(m, n) for n in names] + [cd.allow_tf32]
        except Exception:  # noqa: BLE001
            saved = None

        def put(vals):
            for n, v in zip(names, vals):
                with contextlib.suppress(Exception):
                    setattr(m, n, v)
            with contextlib.suppress(Exception):
                cd.allow_tf32 = vals[-1]
        if saved is not None:
            put([False] * 4)
        try:
            yield
        finally:
            if saved is not None:
                put(saved)


def upcast_floats(inputs: dict, mutated: Sequence[str]) -> dict:
    """Inputs with every bf16/fp16 tensor as an fp32 copy (integer tensors, fp32 tensors and non-tensors as they
    are; mutated fp32/int arguments cloned)."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16):
            out[k] = v.float()
        elif isinstance(v, torch.Tensor) and k in mutated:
            out[k] = v.clone()
        else:
            out[k] = v
    return out


@dataclasses.dataclass
class Golden:
    """The outputs a backend is checked against: ``out`` (the op's outputs) and ``mut`` (mutated arguments after
    the call), on the run's device; ``err`` when the reference failed; ``kind`` says how it was computed."""
    out: Any = None
    mut: dict = dataclasses.field(default_factory=dict)
    err: str | None = None
    kind: str = "device"


GOLDEN_DOC = {
    "device": "the reference (fp32 math, rounding at its documented points) run eagerly on the same device with the "
              "same input dtypes, IEEE fp32 matmuls (TF32 and reduced-precision reductions off); a backend that "
              "FAILs against it on an accelerator is re-checked against the reference on the CPU when that is cheap, "
              "and the CPU verdict stands",
    "cpu": "the reference run on the CPU (inputs copied there), same input dtypes",
    "upcast": "the reference run on the device with bf16/fp16 inputs up-cast to fp32 (drops the reference's "
              "rounding to the activation dtype: not DESIGN's contract, a diagnostic)",
}
CPU_SECOND_OPINION_MAX_FLOPS = 6e10     # ~1–3 s of the CPU reference on the GPU host
CPU_SECOND_OPINION_MAX_BYTES = 4 << 30
TIME_BUDGET_S = 0.5                     # per timed backend row (graph replay or events)
REFERENCE_BUDGET_S = 0.25               # the unfused reference baseline: fewer replays
DISPATCH_MAX_US = {"cpu": 100_000.0}    # host_call_us only where one call is shorter than this (default 5 ms)
FRESH_SETS_MAX_S = 0.05                 # rotated input sets: fresh draws when one draw is this fast, else device copies


class Runner:
    def __init__(self, args: argparse.Namespace, device: torch.device, peaks: P.DevicePeaks | None, ceilings: dict,
                 meta: dict):
        self.args, self.dev, self.peaks, self.ceilings, self.meta = args, device, peaks, ceilings, meta
        self.dtype = DTYPES[args.dtype]
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.capture_failed: dict[tuple[str, str], str] = {}

    # -- helpers ---------------------------------------------------------------------------------
    def repro(self, op: str, shape: str, backend: str) -> str:
        cmd = ["python", "-m", "perf", "--device", self.dev.type, "--ops", op, "--shapes", shape,
               "--backends", backend, "--no-layer"]
        if self.args.dtype != "bf16":
            cmd += ["--dtype", self.args.dtype]
        if self.args.timer != "auto":
            cmd += ["--timer", self.args.timer]
        if self.args.quick:
            cmd += ["--quick"]
        if self.args.keep_arg_checks:     # the repro must time the same configuration
            cmd += ["--keep-arg-checks"]
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

    def input_sets(self, entry, case, inputs: dict, nbytes: int, seed: int, case_state: dict) -> tuple[list, str]:
        """The rotated input sets of a case (built once, shared by its backends): ``inputs`` plus n − 1 more
        independently drawn ones, or — when drawing one took over :data:`FRESH_SETS_MAX_S` (mla_prolog's weights
        are drawn on the host) — device copies of ``inputs``: other addresses, so L2 is defeated just the same."""
        if "sets" not in case_state:
            n = self.n_sets(nbytes)
            if n > 1 and case_state.get("make_inputs_s", 0.0) > FRESH_SETS_MAX_S:
                sets = [inputs] + [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
                                   for _ in range(1, n)]
                desc = f", {n} input sets (device copies)"
            else:
                sets = [inputs] + [make_inputs(entry, case.shape, dtype=self.dtype, device=self.dev, seed=seed + i)
                                   for i in range(1, n)]
                desc = f", {n} input sets" if n > 1 else ""
            case_state["sets"] = (sets, desc)
        return case_state["sets"]

    def backends_for(self, entry: S.OpEntry) -> tuple[list[str], bool]:
        if self.args.backends:  # the reference still runs as the baseline; it gets a row only if asked for
            return list(self.args.backends), True
        return S.backends_of(entry), False

    def note(self, msg: str) -> None:
        """Record a note for the summary; a new one is also printed (stderr) as it happens."""
        if msg not in self.notes:
            self.notes.append(msg)
            print(f"note: {msg}", file=sys.stderr, flush=True)

    # -- the golden --------------------------------------------------------------------------------
    def golden(self, entry: S.OpEntry, inputs: dict, mutated: Sequence[str], kind: str) -> Golden:
        """Run the reference for the check (see :data:`GOLDEN_DOC`); outputs land on the run's device."""
        import ops
        dev = self.dev
        try:
            with ieee_fp32_math():
                if kind == "cpu" and dev.type != "cpu":
                    ins = {k: (v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v)
                           for k, v in inputs.items()}
                    with ops.backend("reference"):
                        out = entry.op(**ins)
                elif kind == "upcast":
                    ins = upcast_floats(inputs, mutated)
                    out = entry.op.reference(**ins)   # the op's argument checks reject fp32 activations
                else:
                    ins = _clone_mutated(inputs, mutated)
                    with ops.backend("reference"):
                        out = entry.op(**ins)
            _sync(dev)
            out = _to_device(out, dev)
            mut = {k: ins[k].to(dev) for k in mutated}
            return Golden(out, mut, None, kind)
        except Exception as e:  # noqa: BLE001
            return Golden(None, {}, f"reference ({kind}) failed: {type(e).__name__}: {e}"[:400], kind)

    def _check(self, out, gold: Golden, entry, mutated, got_in, orig) -> tuple[str, str]:
        if gold.err:
            return "ERROR", gold.err
        mut = []
        for k in mutated:
            g, e = changed_region(got_in[k], gold.mut[k], orig[k])
            mut.append((k, g, e))
        v = check_outputs(out, gold.out, entry.spec.tolerance, mutated=mut)
        return v.label, v.detail

    def _second_opinion(self, case_state: dict, entry, inputs, mutated, flops, nbytes, out, got_in, orig,
                        chk: str, detail: str) -> tuple[str, str]:
        """A FAIL against the device golden on an accelerator: re-check against the reference on the CPU (DESIGN's
        fp32 reference, what the unit tests compare with) when that is cheap; its verdict stands."""
        if chk != "FAIL" or self.dev.type == "cpu" or self.args.golden != "device":
            return chk, detail
        if flops > CPU_SECOND_OPINION_MAX_FLOPS or nbytes > CPU_SECOND_OPINION_MAX_BYTES:
            return chk, detail + " (no CPU re-check: too big for the CPU reference)"
        if "cpu_golden" not in case_state:
            clean = {**inputs, **case_state.get("pristine", {})}
            case_state["cpu_golden"] = self.golden(entry, clean, mutated, "cpu")
        gold = case_state["cpu_golden"]
        chk2, detail2 = self._check(out, gold, entry, mutated, got_in, orig)
        if chk2 == "PASS":
            self.note(f"{entry.name}: the on-device reference disagreed with the CPU reference; the CPU verdict "
                      "(PASS) stands (see check_detail)")
            return "PASS", f"vs CPU reference: {detail2}; vs on-device reference: FAIL {detail}"
        return chk, f"{detail}; vs CPU reference too: {chk2} {detail2}"

    # -- one op × shape --------------------------------------------------------------------------
    def run_case(self, entry: S.OpEntry, case: S.ShapeCase, progress=None) -> None:
        import ops
        from ops._library import BackendUnavailable
        dev, args = self.dev, self.args
        seed = zlib.crc32(f"{entry.name}/{case.name}".encode()) & 0x7FFFFFFF
        mutated = S.mutated_args(entry)
        try:
            t_mi = time.perf_counter()
            inputs = make_inputs(entry, case.shape, dtype=self.dtype, device=dev, seed=seed)
            _sync(dev)
            t_mi = time.perf_counter() - t_mi
            flops, nbytes = int(entry.spec.flops(**inputs)), int(entry.spec.bytes(**inputs))
        except Exception as e:  # noqa: BLE001
            r = self.base_row(entry, case, "-")
            r.update(check="ERROR", check_detail=f"make_inputs/flops/bytes failed: {type(e).__name__}: {e}"[:400])
            self.rows.append(r)
            return
        # the mutated arguments (caches) as drawn: every check starts from and compares against these, because
        # timing a backend writes into ``inputs`` (set 0 of the rotation) and would leave the next backend an
        # 'original' that already holds the previous backend's rows (which hid all but the 1-ulp differences)
        pristine = {k: inputs[k].clone() for k in mutated}
        gold = self.golden(entry, inputs, mutated, args.golden)
        case_state: dict = {"make_inputs_s": t_mi, "pristine": pristine}
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
                    self.note(f"{entry.name}: {b} skipped: {str(e)[:300]}")
                else:
                    self.note(f"{entry.name}: backend {b} unavailable here: {e}")
                continue
            self._run_backend(entry, case, b, row, inputs, mutated, flops, nbytes, gold, seed, case_state)
            self.rows.append(row)
        if not args.no_peers:
            self._run_peers(entry, case, inputs, flops, nbytes, gold)

    def _run_backend(self, entry, case, b, row, inputs, mutated, flops, nbytes, gold, seed, case_state):
        import ops
        dev, args = self.dev, self.args
        orig = case_state["pristine"]

        def run_and_check(fn) -> tuple[str, str]:
            """Call ``fn`` on fresh copies of the mutated inputs and judge it against the golden."""
            got_in = {**inputs, **{k: v.clone() for k, v in orig.items()}}
            out = fn(**got_in)
            _sync(dev)
            c, d = self._check(out, gold, entry, mutated, got_in, orig)
            return self._second_opinion(case_state, entry, inputs, mutated, flops, nbytes, out, got_in, orig, c, d)

        # correctness: eager fast path, then the registered op
        try:
            with ops.backend(b):
                if b == "reference" and gold.kind == "device" and gold.err is None:
                    chk, detail = "baseline", "the golden itself (reference on this device)"
                else:
                    chk, detail = run_and_check(entry.op)
                    if b == "reference" and chk == "PASS":
                        chk = "baseline"
                    if b != "reference":
                        chk2, detail2 = run_and_check(entry.registered)
                        if chk2 != "PASS" and chk in ("PASS", "baseline"):
                            chk, detail = chk2, "torch.ops.ds path: " + detail2
        except Exception as e:  # noqa: BLE001
            row.update(check="ERROR", check_detail=f"{type(e).__name__}: {e}"[:400])
            return
        row.update(check=chk, check_detail=detail)
        # timing: calls cycle through n input sets
        try:
            sets, sets_desc = self.input_sets(entry, case, inputs, nbytes, seed, case_state)
            op = entry.op
            fns = [functools.partial(op, **kw) for kw in sets]
            mode, pre_note = args.timer, ""
            key = (entry.name, b)
            if dev.type == "cuda" and mode == "auto" and key in self.capture_failed:
                mode = "events"
                pre_note = f"events: graph capture of this backend failed at {self.capture_failed[key]}"
            budget = REFERENCE_BUDGET_S if b == "reference" else TIME_BUDGET_S
            if args.quick:
                budget /= 2
            with ops.backend(b), _arg_checks(args.keep_arg_checks):
                t = time_fn(fns, dev, mode=mode, quick=args.quick, budget_s=budget, warm=False)
                if t.note.startswith("graph capture failed"):
                    self.capture_failed[key] = f"{case.name} {t.note.split(';')[0][len('graph capture failed '):]}"
                row.update(us_p20=t.p20_us, us_p50=t.p50_us, us_p80=t.p80_us, spread_pct=t.spread_pct,
                           timer=t.describe() + sets_desc)
                note = "; ".join(x for x in (pre_note, t.note) if x)
                if note:
                    row["note"] = "; ".join(x for x in (row.get("note"), note) if x)
                if not args.no_dispatch and t.p50_us <= DISPATCH_MAX_US.get(dev.type, 5000.0):
                    reg = entry.registered
                    row["dispatch_us_registered"] = host_call_us(lambda: reg(**inputs), dev)
                    row["dispatch_us_eager"] = host_call_us(lambda: op(**inputs), dev)
            fns.clear()
        except Exception as e:  # noqa: BLE001
            row["note"] = "; ".join(x for x in (row.get("note"), f"timing failed: {type(e).__name__}: {e}"[:300]) if x)
            if dev.type == "cuda":
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
            return
        row.update(roofline_metrics(flops, nbytes, row.get("us_p50"), entry.spec.compute, self.peaks, self.ceilings))

    def _run_peers(self, entry, case, inputs, flops, nbytes, gold):
        from .peers import peers_for
        for name, build in peers_for(entry.name, self.dev.type):
            row = self.base_row(entry, case, f"peer:{name}")
            row.update(flops=flops, bytes=nbytes)
            try:
                fn = build(inputs)
                out = fn()
                _sync(self.dev)
                if gold.err:
                    row.update(check="ERROR", check_detail=gold.err)
                else:
                    v = check_outputs(out, gold.out, entry.spec.tolerance)
                    row.update(check=v.label, check_detail=v.detail)
                t = time_fn([fn], self.dev, mode=self.args.timer, quick=self.args.quick, budget_s=TIME_BUDGET_S)
                row.update(us_p20=t.p20_us, us_p50=t.p50_us, us_p80=t.p80_us, spread_pct=t.spread_pct,
                           timer=t.describe())
                if t.note:
                    row["note"] = t.note
                row.update(roofline_metrics(flops, nbytes, t.p50_us, entry.spec.compute, self.peaks, self.ceilings))
            except Exception as e:  # noqa: BLE001
                row.update(check="SKIP", check_detail=f"peer {name}: {type(e).__name__}: {e}"[:400])
            self.rows.append(row)


def _to_device(x: Any, dev: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, (tuple, list)):
        return type(x)(_to_device(v, dev) for v in x)
    return x


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
    """rich progress bar on a terminal; elsewhere (the device machine's log) one line per case with the elapsed
    time on stderr."""

    def __init__(self, total: int, t_start: float):
        self.total, self.done, self.t_start = total, 0, t_start
        self.p = None
        if sys.stderr.isatty():
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
            print(f"[{self.done + 1}/{self.total} {time.perf_counter() - self.t_start:6.1f}s] {text}", file=sys.stderr,
                  flush=True)

    def advance(self) -> None:
        self.done += 1
        if self.p is not None:
            self.p.update(self.task, advance=1)


def timer_doc(device_type: str) -> str:
    return {"cuda": "CUDA-graph replay: `calls` back-to-back calls cycling the rotated input sets in one graph, "
                    "replayed R times with an event pair around each replay, µs per call = replay / calls; calls and "
                    "R adaptive (≈0.5 s per row, 0.25 s for the reference); CUDA events (L2 flushed, GPU sleep ahead "
                    "of each call so host launch latency is hidden) where capture fails; p20/p50/p80 over the "
                    "replays; spread = (p80 − p20)/p50",
            "npu": "torch.npu events after a 512 MiB flush; p20/p50/p80",
            "cpu": "wall clock (time.perf_counter), quantiles of a few reps"}.get(device_type, "?")


def setup(args: argparse.Namespace, argv: Sequence[str] | None, *, extra_ops: Sequence[S.OpEntry] = (),
          ceilings: dict | None = None) -> tuple[Runner, list]:
    """Device, ops, ceilings (measured unless given), meta and the case plan for ``args``."""
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
    if ceilings is None:
        ceilings = P.measure_ceilings(device, quick=args.quick)
    v = versions()
    meta = dict(device=name, device_type=device.type, device_key=peaks.key if peaks else P.slug(name), **v,
                git_sha=git_sha(), timestamp=P.now_iso(),
                command="python -m perf " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
                peaks=_peaks_meta(peaks), ceilings={k: vars(c) for k, c in ceilings.items()},
                arg_checks_during_timing=bool(args.keep_arg_checks), golden=GOLDEN_DOC[args.golden],
                timer_doc=timer_doc(device.type), repro_floor_pct=REPRO_FLOOR_PCT)
    runner = Runner(args, device, peaks, ceilings, meta)
    runner.entries = entries
    if peaks is None:
        runner.note(f"no datasheet peak for {name!r}: % peak is empty, % achievable uses the measured ceilings")
    if not entries:
        runner.note("no ops are registered in ops.SPECS")
    plan = []
    for e in entries:
        try:
            cases = S.plan_shapes(e, args.shapes, device_type=device.type, quick=args.quick,
                                  dtype=runner.dtype, max_cpu_shapes=args.max_shapes)
        except Exception as ex:  # noqa: BLE001
            runner.note(f"{e.name}: planning shapes failed: {type(ex).__name__}: {ex}")
            continue
        if not cases:
            names = list(e.spec.shapes)
            runner.note(f"{e.name}: no shape matches --shapes {','.join(args.shapes or [])} (its shapes: "
                        f"{', '.join(names[:12])}{', …' if len(names) > 12 else ''}; globs such as 'b64_*' work)")
        plan += [(e, c) for c in cases]
    return runner, plan


def run_plan(runner: Runner, plan: list, t_start: float, budget: float | None) -> None:
    dev = runner.dev
    over = False
    with _Progress(len(plan), t_start) as prog:
        for e, c in plan:
            if budget is not None and time.perf_counter() - t_start > budget:
                if not over:
                    runner.note(f"time budget of {budget:.0f} s reached: skipped {e.name} {c.name} and later cases")
                    over = True
                prog.advance()
                continue
            runner.run_case(e, c, progress=prog.describe)
            prog.advance()
            if dev.type == "cuda":
                gc.collect()
                torch.cuda.empty_cache()


def main(argv: Sequence[str] | None = None, *, extra_ops: Sequence[S.OpEntry] = ()) -> int:
    """Run the report (``python -m perf``). argv: the CLI arguments (None: sys.argv); extra_ops: OpEntry rows
    besides the registered ops (tests). Returns the exit status: 0; 1 if a check failed; 2 if nothing was timed or
    an --ops pattern matched no op; with --merge, :func:`perf.report.merge_reports`' status. Bad arguments exit
    with argparse's usage error (SystemExit 2) before anything runs."""
    args = parse_args(argv)
    if args.merge:
        from .report import merge_reports
        return merge_reports(args.merge, args.out)
    t_start = time.perf_counter()
    try:
        runner, plan = setup(args, argv, extra_ops=extra_ops)
    except S.UsageError as e:    # an --ops pattern that matches nothing: a usage error, not a traceback
        print(f"python -m perf: error: {e}", file=sys.stderr)
        return 2
    device, meta = runner.dev, runner.meta
    budget = args.budget_s if args.budget_s is not None else (DEFAULT_CPU_BUDGET_S if device.type == "cpu" else None)
    run_plan(runner, plan, t_start, budget)

    layer = {"available": False, "reason": "skipped (--no-layer)", "views": []}
    if not args.no_layer:
        from .layer import layer_view
        t_layer = time.perf_counter()
        layer = layer_view(device, dtype=runner.dtype, peaks=runner.peaks, ceilings=runner.ceilings,
                           specs={e.name: e.spec for e in runner.entries})
        print(f"layer view: {time.perf_counter() - t_layer:.1f} s", file=sys.stderr, flush=True)

    from . import report as R
    os.makedirs(args.out, exist_ok=True)
    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    R.write_all(runner.rows, meta, layer, runner.notes, args.out)
    failed = [r for r in runner.rows if r.get("check") in ("FAIL", "ERROR")]
    for r in failed:         # the reason, on the terminal too (the table shows only the label)
        print(f"{r['check']}: {r['op']} {r['shape']} {r['backend']}: {r.get('check_detail') or '(no detail)'}",
              file=sys.stderr)
    if not any(r.get("us_p50") is not None for r in runner.rows):
        why = ("every case that ran failed or errored (reasons above)" if failed else
               "no op / shape / backend matched, or the budget ran out first")
        print(f"nothing was timed: {why} (outputs written to {args.out})", file=sys.stderr)
        return 2
    if args.repro_check:
        from .repro_check import repro_check
        repro_check(os.path.join(args.out, "results.json"), n=args.repro_check, seed=args.repro_seed,
                    out=os.path.join(args.out, "repro_check.txt"), ceilings=runner.ceilings, extra_ops=extra_ops)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
