"""``python -m perf``: the performance report over every registered ``ds`` op.

For each op × shape × backend: build fresh random inputs with the op's ``make_inputs``, run the op under
``ops.backend(b)`` through the eager fast path and through ``torch.ops.ds``, check both against the reference
(ops/tolerances.py), time it (CUDA-graph replay / device events / wall clock, see perf/timers.py), and report µs
p20/p50/p80 and their spread, TFLOPS, GB/s, % of the datasheet peak, % of the measured ceiling, arithmetic
intensity and bound. Ascend C kernels run through the CPU twin are checked the same way and timed by the modeled
910B pipe model (perf/modeled.py). Writes ``results.csv``, ``results.json``, ``summary.md`` and
``roofline_<device>.png`` into ``--out``.

Examples::

    python -m perf                                   # everything that can run here (CPU: the ops' CPU shapes)
    python -m perf --ops amla --shapes 'decode_*' --backends reference,triton
    python -m perf --device cuda --part 1 --out $OUT/perf_part1    # the H200 report in two halves ...
    python -m perf --device cuda --part 2 --out $OUT/perf_part2
    python -m perf --merge $OUT/perf_part1 $OUT/perf_part2 --out docs/perf/h200   # ... merged into one
    python -m perf --device cuda --ops amla --repro-check 4        # then re-run 4 random rows and compare
    python -m perf --markdown                        # the committed H200 report as markdown tables
    python -m perf --amla-batch-invariance           # CUDA: ds::amla with the batch-invariant mode off / on
"""
from __future__ import annotations

import argparse
import gc
import os
import shlex
import subprocess
import sys
import time
from typing import Sequence

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
from .report import H200_REPORT  # noqa: E402
from .modeled import twin_status  # noqa: E402
from .runner import DTYPES, GOLDEN_DOC, Runner  # noqa: E402
from .timers import REPRO_FLOOR_PCT  # noqa: E402

DEFAULT_CPU_BUDGET_S = 150.0
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the H200 report in two halves that each fit a 10-minute device command (merged with --merge)
PARTS = {"1": dict(ops=["amla", "moe_gating_top_k"], layer=True),
         "2": dict(ops=["mla_prolog", "dynamic_quant", "rms_norm_dynamic_quant", "quant_matmul"], layer=False)}
PART_BUDGET_S, PART_REPRO_N = 360.0, 6


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__.split("\n\n")[0],
                                 epilog="examples:\n" + __doc__.split("Examples::\n")[1].rstrip(),
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
    ap.add_argument("--part", choices=sorted(PARTS), default=None,
                    help="one half of the H200 report (each fits a 10-minute device command): "
                         + "; ".join(f"{k}: {','.join(v['ops'])}" for k, v in PARTS.items())
                         + f"; sets --ops, --budget-s {PART_BUDGET_S:.0f} and --repro-check {PART_REPRO_N} unless "
                           "given (part 2 skips the layer view); merge the halves with --merge")
    ap.add_argument("--markdown", nargs="?", const=H200_REPORT, default=None, metavar="REPORT",
                    help="print one markdown performance table per device of a report (results.json or its folder; "
                         f"default {H200_REPORT}, the committed H200 report) and exit; runs nothing")
    ap.add_argument("--amla-batch-invariance", action="store_true",
                    help="CUDA: time ds::amla with the batch-invariant mode off and on, side by side, over B, S_q, N "
                         "and L (perf/batch_invariance.py) and exit")
    args = ap.parse_args(argv)
    if args.part is not None:
        part = PARTS[args.part]
        if args.ops is None:
            args.ops = list(part["ops"])
        if args.budget_s is None:
            args.budget_s = PART_BUDGET_S
        if not args.repro_check:
            args.repro_check = PART_REPRO_N
        if not part["layer"]:
            args.no_layer = True
    if args.markdown is not None or args.amla_batch_invariance:
        return args
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
            "cpu": "wall clock (time.perf_counter) around each call after one warm-up call; p20/p50/p80 over "
                   "3-10 calls (3-5 with --quick), as many as fit about 2 s (0.5 s)"}.get(device_type, "?")


def shapes_doc(args: argparse.Namespace, device_type: str) -> str:
    """What the run's shapes are, in words (the report's header)."""
    if args.shapes:
        return "--shapes " + ",".join(args.shapes) + (" (scaled down for the CPU where marked)"
                                                      if device_type == "cpu" else "")
    if device_type == "cpu":
        k = args.max_shapes or (2 if args.quick else 3)
        return (f"up to {k} per op of its CPU-sized shapes (OpSpec.shapes entries named cpu* or marked cpu=True), "
                "else of its DeepSeek-V3 shapes scaled down for the CPU")
    return "every named DeepSeek-V3 shape of each op" + (" (up to 4 per op with --quick)" if args.quick else "")


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
                timer_doc=timer_doc(device.type), repro_floor_pct=REPRO_FLOOR_PCT,
                shapes_doc=shapes_doc(args, device.type), ascendc_twin=twin_status(),
                threads=torch.get_num_threads() if device.type == "cpu" else None)
    runner = Runner(args, device, peaks, ceilings, meta)
    runner.entries = entries
    if peaks is None and device.type != "cpu":   # on CPU the header says what the % columns are against
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
    if args.markdown is not None:
        from .markdown import print_markdown
        return print_markdown(args.markdown, args.ops, args.backends)
    if args.amla_batch_invariance:
        from .batch_invariance import main as bi_main
        try:
            return bi_main(device=args.device, quick=args.quick, out=args.out)
        except RuntimeError as e:
            print(f"python -m perf --amla-batch-invariance: error: {e}", file=sys.stderr)
            return 2
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
