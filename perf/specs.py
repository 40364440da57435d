"""Which ops and shapes the report runs: collected from ``ops.SPECS``, filtered by name, scaled down on CPU.

Every op module registers an ``OpSpec`` (ops/_library.py) whose ``shapes`` maps names to shape dicts for its
``make_inputs``. The report runs all of them on an accelerator; ``--shapes`` selects by exact name, by a glob
(``decode_*``) or by one of the named sets in :data:`SHAPE_SETS`, which match on the naming convention below.

Shape-name convention (what the sets match; op modules are asked to follow it)::

    decode_b{B}[_mtp][_tp{TP}|_n{heads}][_l{L}]     DeepSeek-V3 decode step, B ∈ {1..256}, MTP → S_q = 2,
                                                    TP shard 128/TP heads (TP ∈ 1,2,4,8,16 → 128,64,32,16,8)
    prefill_{4k|16k}[...]                          prefill of 4K / 16K tokens, where the op applies
    ..._ep{EP}                                     expert-parallel shard: 256/EP local experts

On CPU the shapes are scaled down automatically (:func:`cpu_shape`): an op module can define
``cpu_shape(shape, op_name)`` (or ``perf_cpu_shape``) to do it itself; otherwise a generic reducer caps batch-like,
sequence-like and head-like dimensions, keeps the op's fixed model dimensions (512/64/128 head dims, block size,
top-k, group counts, ...) and, if the inputs are still too big, halves the largest remaining dimensions. Identical
reduced shapes are run once.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import gc
import inspect
import sys
from types import ModuleType
from typing import Any, Iterable, Sequence

import torch

# DeepSeek-V3 grids (DESIGN §constants): what SPEC.shapes are expected to cover
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TP_HEADS = {1: 128, 2: 64, 4: 32, 8: 16, 16: 8}
EP_EXPERTS = {1: 256, 8: 32, 16: 16, 32: 8, 64: 4}
PREFILL_TOKENS = (4096, 16384)

SHAPE_SETS: dict[str, tuple[str, ...]] = {
    "all": ("*",),
    "decode": ("decode*", "*_decode*"),
    "mtp": ("*mtp*",),
    "prefill": ("prefill*", "*_prefill*"),
    "tp": ("*_tp*", "tp*"),
    "ep": ("*_ep*", "ep*"),
}

# ----------------------------------------------------------------------------------------------
# ops registry
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class OpEntry:
    """One op to report: its spec, its ``DsOp`` (eager fast path + kernels) and the module that defines it."""

    spec: Any               # ops._library.OpSpec
    op: Any                 # ops._library.DsOp
    module: ModuleType | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def registered(self):
        """``torch.ops.ds.<name>`` (the dispatcher path)."""
        return getattr(torch.ops.ds, self.spec.name)


def _dsop_class():
    from ops._library import DsOp
    return DsOp


def find_dsop(name: str) -> tuple[Any, ModuleType | None]:
    """The ``DsOp`` registered under ``name`` and the module holding it: searches the imported ``ops.*`` modules,
    then (for ops defined elsewhere, e.g. in tests) every live ``DsOp``."""
    DsOp = _dsop_class()
    for modname, mod in list(sys.modules.items()):
        if mod is None or not (modname == "ops" or modname.startswith("ops.")):
            continue
        for v in vars(mod).values():
            if isinstance(v, DsOp) and v.name == name:
                return v, mod
    for o in gc.get_objects():
        if isinstance(o, DsOp) and o.name == name:
            return o, sys.modules.get(getattr(o.reference, "__module__", ""), None)
    raise LookupError(f"no DsOp named {name!r} is loaded")


def collect_ops(names: Sequence[str] | None = None, extra: Iterable[OpEntry] = ()) -> list[OpEntry]:
    """Entries for ``ops.SPECS`` (plus ``extra``), in registration order, filtered by ``names`` (exact names or
    globs). Raises ValueError naming an op that matches nothing."""
    import ops
    entries: dict[str, OpEntry] = {}
    for name, spec in ops.SPECS.items():
        op, mod = find_dsop(name)
        entries[name] = OpEntry(spec, op, mod)
    for e in extra:
        entries[e.name] = e
    if not names:
        return list(entries.values())
    out: list[OpEntry] = []
    for pat in names:
        hit = [e for n, e in entries.items() if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            raise ValueError(f"--ops: {pat!r} matches no registered op (have: {', '.join(entries) or 'none'})")
        out.extend(e for e in hit if e not in out)
    return out


def backends_of(entry: OpEntry) -> list[str]:
    """``reference`` plus every backend the op has a kernel for, in a stable order."""
    order = ["reference", "triton", "ascendc"]
    have = {"reference"} | {k.backend for k in entry.op.kernels}
    return [b for b in order if b in have] + sorted(have - set(order))


def mutated_args(entry: OpEntry) -> list[str]:
    """Names of the arguments the op's schema marks as written (``Tensor(a!)``)."""
    try:
        schema = entry.registered.default._schema
    except Exception:
        return []
    return [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]


# ----------------------------------------------------------------------------------------------
# shape selection
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class ShapeCase:
    name: str               # the SPEC.shapes key
    shape: dict             # what is run
    full: dict              # the SPEC's shape (differs from ``shape`` when scaled down)

    @property
    def scaled(self) -> bool:
        return self.shape != self.full


def select_shapes(spec, patterns: Sequence[str] | None) -> list[tuple[str, dict]]:
    """``(name, shape)`` pairs of ``spec.shapes`` matching any pattern (exact name, glob, or a ``SHAPE_SETS`` key);
    all of them when ``patterns`` is empty."""
    items = list(spec.shapes.items())
    if not patterns:
        return items
    globs: list[str] = []
    for p in patterns:
        globs.extend(SHAPE_SETS.get(p, (p,)))
    return [(n, s) for n, s in items if any(fnmatch.fnmatchcase(n, g) for g in globs)]


# ----------------------------------------------------------------------------------------------
# CPU scaling
# ----------------------------------------------------------------------------------------------
BATCH_KEYS = {"b", "t", "m", "bs", "batch", "batch_size", "tokens", "num_tokens", "n_tokens", "seqs", "requests"}
SEQ_KEYS = {"l", "s", "s_kv", "l_kv", "kv_len", "seq_len", "seqlen", "max_seq_len", "context", "ctx", "seq_lens",
            "max_len", "mean_len"}
HEAD_KEYS = {"n", "h", "heads", "num_heads", "n_heads", "h_q", "n_q"}
BLOCK_COUNT_KEYS = {"num_blocks", "n_blocks", "blocks", "pages", "num_pages"}
# model / layout dimensions the generic reducer never touches
PROTECTED_KEYS = {"d", "dr", "dv", "kv_lora_rank", "qk_nope", "qk_rope", "v_head", "head_dim", "rope_dim", "block_size",
                  "page_size", "k", "topk", "top_k", "k_group", "topk_group", "group_count", "n_group", "groups",
                  "s_q", "sq", "mtp", "e", "experts", "num_experts", "n_experts", "ep", "tp", "group_size"}

CPU_CAPS = dict(batch=4, seq=256, heads=16, blocks=64, gemm=2048)
CPU_BUDGET = dict(flops=2e9, bytes=128 << 20)


def _cap_value(v: Any, cap: int) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return min(v, cap)
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        capped = [min(x, cap) for x in v]
        return type(v)(capped)
    return v


def generic_cpu_shape(shape: dict) -> dict:
    """Cap batch-like (→4), sequence-like (→256), head-like (→16), block-count (→64) dimensions and, for GEMM shapes
    (keys M, K, N), K and N (→2048); everything else, notably the protected model dimensions, is kept."""
    keys = {k.lower() for k in shape}
    gemm = {"m", "k", "n"} <= keys
    out = {}
    for k, v in shape.items():
        kl = k.lower()
        if kl in PROTECTED_KEYS and not (gemm and kl == "k"):
            out[k] = v
        elif gemm and kl in ("k", "n"):
            out[k] = _cap_value(v, CPU_CAPS["gemm"])
        elif kl in BATCH_KEYS:
            out[k] = _cap_value(v, CPU_CAPS["batch"])
        elif kl in SEQ_KEYS:
            out[k] = _cap_value(v, CPU_CAPS["seq"])
        elif kl in HEAD_KEYS:
            out[k] = _cap_value(v, CPU_CAPS["heads"])
        elif kl in BLOCK_COUNT_KEYS:
            out[k] = _cap_value(v, CPU_CAPS["blocks"])
        else:
            out[k] = v
    return out


def _halve_largest(shape: dict) -> dict | None:
    """Halve the largest reducible int (not protected, > 64), keeping multiples of 64 where it was one."""
    best = None
    for k, v in shape.items():
        if isinstance(v, bool) or not isinstance(v, int) or k.lower() in PROTECTED_KEYS or v <= 64:
            continue
        if best is None or v > shape[best]:
            best = k
    if best is None:
        return None
    v = shape[best]
    nv = v // 2
    if v % 64 == 0:
        nv = max(64, nv // 64 * 64)
    out = dict(shape)
    out[best] = nv
    return out


def _module_hook(entry: OpEntry):
    mod = entry.module
    for attr in ("cpu_shape", "perf_cpu_shape"):
        fn = getattr(mod, attr, None) if mod is not None else None
        if callable(fn):
            return fn
    return None


def input_cost(entry: OpEntry, shape: dict, *, dtype: torch.dtype) -> tuple[int, int]:
    """(FLOPs, bytes) of one call at ``shape``, from fresh CPU inputs."""
    inputs = entry.spec.make_inputs(shape, dtype=dtype, device=torch.device("cpu"),
                                    generator=torch.Generator().manual_seed(0))
    return int(entry.spec.flops(**inputs)), int(entry.spec.bytes(**inputs))


def cpu_shape(entry: OpEntry, shape: dict, *, dtype: torch.dtype = torch.bfloat16) -> dict:
    """A CPU-sized version of ``shape`` for ``entry`` (see the module docstring). The result is checked against
    :data:`CPU_BUDGET` by building inputs; dimensions are halved until it fits (at most 8 rounds)."""
    hook = _module_hook(entry)
    if hook is not None:
        try:
            n_params = len(inspect.signature(hook).parameters)
        except (TypeError, ValueError):
            n_params = 1
        return dict(hook(shape, entry.name) if n_params >= 2 else hook(shape))
    small = generic_cpu_shape(shape)
    for _ in range(8):
        try:
            flops, nbytes = input_cost(entry, small, dtype=dtype)
        except Exception:  # noqa: BLE001 - a shape make_inputs rejects is left to the run, which reports it
            return small
        if flops <= CPU_BUDGET["flops"] and nbytes <= CPU_BUDGET["bytes"]:
            return small
        nxt = _halve_largest(small)
        if nxt is None:
            return small
        small = nxt
    return small


def _spread(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    idx = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)}) if k > 1 else [0]
    return [items[i] for i in idx]


def plan_shapes(entry: OpEntry, patterns: Sequence[str] | None, *, device_type: str, quick: bool,
                dtype: torch.dtype = torch.bfloat16, max_cpu_shapes: int | None = None) -> list[ShapeCase]:
    """The shape cases to run for ``entry``. On CPU: scaled (:func:`cpu_shape`), de-duplicated, and — unless shapes
    were named explicitly — at most ``max_cpu_shapes`` (default 3, 2 with ``quick``) spread over the list. With
    ``quick`` on an accelerator: at most 4 spread over the list unless named."""
    chosen = select_shapes(entry.spec, patterns)
    if device_type != "cpu":
        cases = [ShapeCase(n, dict(s), dict(s)) for n, s in chosen]
        return _spread(cases, 4) if quick and not patterns else cases
    cases, seen = [], set()
    for n, s in chosen:
        small = cpu_shape(entry, s, dtype=dtype)
        key = repr(sorted(small.items(), key=lambda kv: kv[0]))
        if key in seen:
            continue
        seen.add(key)
        cases.append(ShapeCase(n, small, dict(s)))
    if patterns:
        return cases
    k = max_cpu_shapes if max_cpu_shapes is not None else (2 if quick else 3)
    return _spread(cases, k)


def fmt_shape(shape: dict) -> str:
    """Compact ``k=v`` form for tables."""
    def v(x):
        if isinstance(x, (list, tuple)) and len(x) > 4:
            return f"[{x[0]},…×{len(x)}]"
        return str(x)
    return " ".join(f"{k}={v(x)}" for k, x in shape.items())


__all__ = ["OpEntry", "ShapeCase", "collect_ops", "select_shapes", "plan_shapes", "cpu_shape", "generic_cpu_shape",
           "backends_of", "mutated_args", "find_dsop", "SHAPE_SETS", "fmt_shape"]
