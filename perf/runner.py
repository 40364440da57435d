"""One op × shape case of the report: fresh inputs, the golden (the reference), each backend checked against it and
timed, and the roofline columns of a timing (TFLOPS, GB/s, % of peak, bound)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import os
import shlex
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
    """TFLOPS, GB/s, intensity, ridge, bound and the % columns for one timing (see docs/performance.md)."""
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
              "rounding to the activation dtype: not the op's contract, a diagnostic)",
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
        """A FAIL against the device golden on an accelerator: re-check against the reference on the CPU (the
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
        # timing a backend writes into ``inputs`` (set 0 of the rotation), which must not become the next backend's
        # 'original' (the changed-region comparison would then skip the slots both wrote)
        pristine = {k: inputs[k].clone() for k in mutated}
        gold = self.golden(entry, inputs, mutated, args.golden)
        case_state: dict = {"make_inputs_s": t_mi, "pristine": pristine}
        want, explicit = self.backends_for(entry)
        for b in want:
            row = self.base_row(entry, case, b)
            row.update(flops=flops, bytes=nbytes)
            if b not in ops.BACKENDS or b == "auto":
                row.update(check="SKIP", check_detail=f"unknown backend {b!r} (have {ops.BACKENDS})")
                self.rows.append(row)
                continue
            if dev.type == "cpu" and b == "triton" and not explicit:
                self.note("the Triton kernels run on CPU only under the interpreter (a correctness tool, far slower "
                          "than a GPU): not timed by default, ask with --backends triton")
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
            if progress is not None:
                progress(f"{entry.name} {case.name} {b}")
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
        if b == "ascendc" and dev.type == "cpu":     # the twin: its wall time says nothing about an NPU
            from .modeled import LABEL, modeled_columns
            try:
                row.update(modeled_columns(entry.name, inputs, flops, nbytes, entry.spec.compute))
            except Exception as e:  # noqa: BLE001
                row.update(time_kind=LABEL, note="; ".join(x for x in (row.get("note"), f"no {LABEL} time: "
                                                                       f"{type(e).__name__}: {e}"[:300]) if x))
            return
        row["time_kind"] = "measured"
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
                           timer=t.describe() + sets_desc, samples_us=t.samples_us)   # samples: not a column
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

