#!/usr/bin/env python3
"""One DeepSeek-V3 decoder layer timed by CUDA-graph replay: µs per layer forward for a dense layer (layers 0-2:
MLA + the dense MLP, no MoE routing, so no host sync) in bf16 and a8w8, at several decode batches, with programmatic
dependent launch as the config tables have it, turned off (``DS_OPS_PDL=0``), and on every decode bucket of the
W8A8 row ops and ``quant_matmul`` at M <= 64 (``pdl_all``, a patched table: the experiment the per-op benches could
not settle, because a layer's kernels follow other kernels, not themselves).

    python3 perf/bench_layer_graph.py [--out FILE] [--modes bf16,a8w8] [--steps 1x1,16x1,32x2,64x1,64x2]
                                      [--context 4096] [--rounds 3] [--variants table,pdl_off,pdl_all]

Each step BxS is B requests of S new tokens (T = B·S rows) over ``--context`` cached tokens. Per variant one graph
holds back-to-back forwards of the layer, as a stack of layers would run them (about 2 ms per replay; capture needs
the eager checks off, which they are under capture, and the cache slots computed once up front); rounds alternate
the variants and the table reports each one's median per forward. Every variant's replayed output and written
cache rows must equal the eager forward's bit for bit. Bytes per layer: its weights (read once) plus the latent
cache rows it attends over; % of copy = those bytes / time against the copy rate.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

VARIANTS = ("table", "pdl_off", "pdl_all")
PDL_ALL_MAX_M = 64


def pdl_all_table(cfgs: dict, max_m: int = PDL_ALL_MAX_M) -> dict:
    """A copy of configs/quant.json's tables with ``pdl`` on in every "cuda" bucket of the two row ops and of
    quant_matmul whose max_m <= ``max_m`` (the decode buckets)."""
    out = copy.deepcopy(cfgs)
    cuda = out["cuda"]
    for op in ("dynamic_quant", "rms_norm_dynamic_quant", "quant_matmul"):
        for b in cuda[op].get("buckets", []):
            if int(b["max_m"]) <= max_m:
                b["pdl"] = True
    return out


@contextlib.contextmanager
def quant_tables(cfgs: dict | None):
    """Inside the block ops.triton.quant plans from ``cfgs`` (None: unchanged); its plan caches are cleared on the
    way in and out, so no plan of one table leaks into the other."""
    from ops.triton import quant as TQ
    if cfgs is None:
        yield
        return
    orig = TQ._all_configs
    for op in ("dynamic_quant", "rms_norm_dynamic_quant"):
        for b in cfgs["cuda"][op].get("buckets", [cfgs["cuda"][op]]):
            TQ._check_row_config(b, op)
    for b in cfgs["cuda"]["quant_matmul"]["buckets"]:
        TQ._check_bucket(b)
    TQ._cached_row_launch.cache_clear()
    TQ._cached_qmm_plan.cache_clear()
    TQ._all_configs = lambda: cfgs
    try:
        yield
    finally:
        TQ._all_configs = orig
        TQ._cached_row_launch.cache_clear()
        TQ._cached_qmm_plan.cache_clear()


@contextlib.contextmanager
def env(name: str, value: str | None):
    """``os.environ[name]`` set to ``value`` (None: removed) inside the block, restored after."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def variant_context(name: str, base_cfgs: dict):
    """The switches of one variant: "table" (as configured), "pdl_off" (DS_OPS_PDL=0), "pdl_all"
    (:func:`pdl_all_table`). Raises ValueError for another name."""
    if name == "table":
        return contextlib.nullcontext()
    if name == "pdl_off":
        return env("DS_OPS_PDL", "0")
    if name == "pdl_all":
        return quant_tables(pdl_all_table(base_cfgs))
    raise ValueError(f"unknown variant {name!r}: expected one of {', '.join(VARIANTS)}")


def parse_steps(text: str) -> list[tuple[int, int]]:
    """'1x1,64x2' → [(1, 1), (64, 2)] (batch × new tokens per request). Raises ValueError naming a bad part."""
    steps = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            b, s = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"--steps part {part!r} is not BxS (e.g. 64x2)") from None
        if b < 1 or not 1 <= s <= 16:
            raise ValueError(f"--steps part {part!r}: B must be >= 1 and S in [1, 16] (ds::amla)")
        steps.append((b, s))
    if not steps:
        raise ValueError("--steps is empty")
    return steps


def layer_bytes(layer, batch: int, s_q: int, context: int) -> int:
    """Weight bytes of ``layer`` (every tensor of its LayerWeights, read once) + the latent cache rows one step
    reads (batch · (context + s_q) rows of kv_lora_rank + rope dims, bf16)."""
    seen, total = set(), 0

    def walk(o):
        nonlocal total
        if isinstance(o, torch.Tensor):
            if o.data_ptr() not in seen:
                seen.add(o.data_ptr())
                total += o.numel() * o.element_size()
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
        elif hasattr(o, "__dict__"):
            for v in vars(o).values():
                walk(v)
    walk(layer.w)
    cfg = layer.cfg
    return total + batch * (context + s_q) * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2


def _step_row(layer, mode: str, B: int, S: int, a, names: list[str], base: dict, copy_rate: float) -> str:
    """One table row: the layer on a fresh B×S step, each variant's replayed output and cache rows against the
    eager forward's, and each variant's median µs per forward."""
    from perf.layer import random_step
    from perf.timers import median_graph_us, replayed_outputs
    x, cache = random_step(layer, torch.device("cuda"), B, S, a.context, a.block_size)
    slots = cache.slots(S)                     # computed once: its bounds check syncs the host
    cache.slots = lambda s_q, _v=slots: _v     # noqa: E731 - the instance attribute shadows the method
    want = layer(x, cache)
    rows = slots // a.block_size
    want_kv = cache.kv[0].index_select(0, rows).clone()
    fns, same = {}, True
    for v in names:
        def run(v=v):
            with variant_context(v, base):
                return layer(x, cache)
        fns[v] = [run]
        same &= torch.equal(replayed_outputs([run])[0], want)
    same &= torch.equal(cache.kv[0].index_select(0, rows), want_kv)
    times = median_graph_us(fns, a.rounds, replays=20)
    nbytes = layer_bytes(layer, B, S, a.context)
    cells = [f"{times[v]:.1f} ({100 * nbytes / (times[v] * 1e-6) / (copy_rate * 1e12):.0f} %)" for v in names]
    return f"| {mode} | {B}×{S} ({B * S}) | {nbytes / 1e6:.0f} | " + " | ".join(cells) + f" | {same} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="markdown file to write (default: print only)")
    ap.add_argument("--modes", default="bf16,a8w8")
    ap.add_argument("--steps", default="1x1,16x1,32x2,64x1,64x2", help="BxS decode steps (default %(default)s)")
    ap.add_argument("--context", type=int, default=4096, help="cached tokens per request (default 4096)")
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    try:
        steps = parse_steps(a.steps)
    except ValueError as e:
        ap.error(str(e))
    names = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not names or (bad := [v for v in names if v not in VARIANTS]):
        ap.error(f"--variants: unknown {bad if names else 'none given'} (expected some of {', '.join(VARIANTS)})")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if bad := [m for m in modes if m not in ("bf16", "a8w8")]:
        ap.error(f"--modes: unknown {bad} (bf16, a8w8)")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device (this torch sees none)")

    from ops.triton import quant as TQ
    from perf.layer import random_layer
    from perf.peaks import copy_tbs
    from perf.report import print_and_write_lines

    dev = torch.device("cuda")
    copy_rate = copy_tbs(dev)
    base = TQ._all_configs()
    lines = [f"# One dense DeepSeek-V3 decoder layer by CUDA-graph replay ({torch.cuda.get_device_name()}, torch "
             f"{torch.__version__}, copy {copy_rate:.2f} TB/s)", "",
             f"Command: `python3 perf/bench_layer_graph.py --modes {a.modes} --steps {a.steps} --context {a.context} "
             f"--block-size {a.block_size} --rounds {a.rounds} --variants {','.join(names)}`. µs per layer forward "
             "(back-to-back forwards in one graph), median of the rounds; (%) = weight + latent-cache bytes / time "
             "against the copy rate. Variants: " + ", ".join(names) + ".", "",
             "| mode | B×S (T) | MB read | " + " | ".join(names) + " | replay = eager |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    bad = 0
    with torch.no_grad():
        for mode in modes:
            print(f"building the {mode} layer ...", flush=True)
            layer = random_layer(dev, mode, dense=True)
            for B, S in steps:
                try:
                    lines.append(_step_row(layer, mode, B, S, a, names, base, copy_rate))
                except Exception as e:  # noqa: BLE001 - one step's failure (capture, memory) is reported, not fatal
                    traceback.print_exc()
                    lines.append(f"| {mode} | {B}×{S} ({B * S}) | | failed: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:120] if str(e) else ''} |" + " |" * len(names))
                bad += "failed" in lines[-1] or lines[-1].endswith("| False |")
                print(lines[-1], flush=True)
            del layer
            torch.cuda.empty_cache()
    print_and_write_lines(lines, a.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
