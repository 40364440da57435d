"""Which ops and shapes the report runs: collected from ``ops.SPECS``, filtered by name, scaled down on CPU.

Every op module registers an ``OpSpec`` (ops/_library.py) whose ``shapes`` maps names to shape dicts for its
``make_inputs``. The report runs all of them on an accelerator; ``--shapes`` selects by exact name, by a glob
(``decode_*``) or by one of the named sets in :data:`SHAPE_SETS`, which match on the naming convention below.

The sets match on the shape dict (tokens = T, M or B·S_q; S_q; heads N) or, where that says nothing, on words
in the name (``decode``, ``prefill``, ``mtp``, ``_tp``, ``_ep``): DeepSeek-V3 decode B ∈ {1..256} with/without
MTP (S_q = 2), prefill 4K/16K tokens, TP shards of 128/64/32/16/8 heads, EP expert shards. ``a+b`` intersects.
A shape named ``cpu*`` or with ``"cpu": True`` is the op's own CPU-sized shape: on CPU those replace the scaled
DeepSeek shapes; on an accelerator they are left out unless named.

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
import warnings
from types import ModuleType
from typing import Any, Iterable, Sequence

import torch

# DeepSeek-V3 grids: what SPEC.shapes are expected to cover
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TP_HEADS = {1: 128, 2: 64, 4: 32, 8: 16, 16: 8}
EP_EXPERTS = {1: 256, 8: 32, 16: 16, 32: 8, 64: 4}
PREFILL_TOKENS = (4096, 16384)


class UsageError(ValueError):
    """A command-line selection that matches nothing (``python -m perf`` reports it as a usage error)."""


def is_cpu_shape(name: str, shape: dict) -> bool:
    """A shape the op module marks as CPU-sized (name ``cpu*`` or ``shape["cpu"]`` true): run on CPU in place of
    the scaled DeepSeek shapes, left out on accelerators unless named."""
    return name.lower().startswith("cpu") or bool(shape.get("cpu", False))


def tokens_of(shape: dict) -> int | None:
    """Query tokens one call processes: T / M / num_tokens, else B·S_q; None if the shape has none of these."""
    for k in ("T", "M", "tokens", "num_tokens"):
        if isinstance(shape.get(k), int):
            return shape[k]
    if isinstance(shape.get("B"), int):
        return shape["B"] * int(shape.get("S_q", shape.get("s_q", 1)))
    return None


def _heads_of(shape: dict) -> int | None:
    keys = {k.lower() for k in shape}
    if {"m", "k", "n"} <= keys:
        return None
    for k in ("N", "H_q", "heads", "num_heads", "h_q"):
        if isinstance(shape.get(k), int):
            return shape[k]
    return None


def _in_set(set_name: str, name: str, shape: dict) -> bool:
    n = name.lower()
    tok = tokens_of(shape)
    if set_name == "all":
        return True
    if set_name == "cpu":
        return is_cpu_shape(name, shape)
    if set_name == "decode":
        return "decode" in n or (tok is not None and tok <= 512 and "prefill" not in n)
    if set_name == "prefill":
        return "prefill" in n or (tok is not None and tok >= 4096)
    if set_name == "mtp":
        return "mtp" in n or int(shape.get("S_q", shape.get("s_q", 1)) or 1) >= 2
    if set_name == "tp":
        h = _heads_of(shape)
        return "_tp" in n or (h is not None and h < 128)
    if set_name == "ep":
        return "_ep" in n or any(k.lower() in ("ep", "local_experts") for k in shape)
    raise KeyError(set_name)


# named shape sets for --shapes; each matches on the name convention below or on the shape dict itself
SHAPE_SETS: dict[str, str] = {
    "all": "every shape",
    "decode": "decode steps: name has 'decode', or ≤ 512 query tokens (T, M, or B·S_q)",
    "prefill": "prefill: name has 'prefill', or ≥ 4096 tokens",
    "mtp": "MTP: name has 'mtp', or S_q ≥ 2",
    "tp": "TP shards: name has '_tp', or fewer than 128 heads (N)",
    "ep": "EP shards: name has '_ep', or an 'ep' / 'local_experts' key",
    "cpu": "the op's CPU-sized shapes (name 'cpu*' or shape['cpu'])",
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
        try:
            op, mod = find_dsop(name)
        except LookupError as e:   # a SPEC without its DsOp: report, do not stop the whole report
            warnings.warn(f"perf: skipping {name}: {e}")
            continue
        entries[name] = OpEntry(spec, op, mod)
    for e in extra:
        entries[e.name] = e
    if not names:
        return list(entries.values())
    out: list[OpEntry] = []
    for pat in names:
        hit = [e for n, e in entries.items() if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            raise UsageError(f"--ops: {pat!r} matches no registered op (have: {', '.join(entries) or 'none'})")
        out.extend(e for e in hit if e not in out)
    return out


BACKEND_ORDER = ("reference", "triton", "ascendc")   # the backends a report row can name, in report order


def backends_of(entry: OpEntry) -> list[str]:
    """``reference`` plus every backend the op has a kernel for, in a stable order."""
    have = {"reference"} | {k.backend for k in entry.op.kernels}
    return [b for b in BACKEND_ORDER if b in have] + sorted(have - set(BACKEND_ORDER))


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
    """``(name, shape)`` pairs of ``spec.shapes`` matching any pattern: an exact name, a glob (``b64_*``) or a
    ``SHAPE_SETS`` key; ``set1+set2`` intersects sets (``decode+mtp``). All of them when ``patterns`` is empty."""
    items = list(spec.shapes.items())
    if not patterns:
        return items

    def match(p: str, n: str, s: dict) -> bool:
        if "+" in p:
            return all(match(q, n, s) for q in p.split("+"))
        if p in SHAPE_SETS:
            return _in_set(p, n, s)
        return fnmatch.fnmatchcase(n, p)
    return [(n, s) for n, s in items if any(match(p, n, s) for p in patterns)]


# ----------------------------------------------------------------------------------------------
# CPU scaling
# ----------------------------------------------------------------------------------------------
BATCH_KEYS = {"b", "t", "m", "bs", "batch", "batch_size", "tokens", "num_tokens", "n_tokens", "seqs", "requests"}
SEQ_KEYS = {"l", "s", "s_kv", "l_kv", "kv_len", "seq_len", "seqlen", "max_seq_len", "context", "ctx", "seq_lens",
            "max_len", "mean_len"}
HEAD_KEYS = {"n", "h", "heads", "num_heads", "n_heads", "h_q", "n_q"}
BLOCK_COUNT_KEYS = {"num_blocks", "n_blocks", "blocks", "pages", "num_pages"}
# model / layout dimensions the generic reducer never touches
PROTECTED_KEYS = {"d", "dr", "dc", "hckv", "dv", "kv_lora_rank", "qk_nope", "qk_rope", "v_head", "head_dim", "rope_dim", "block_size",
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
        if not patterns:   # the op's CPU-sized test shapes are noise on an accelerator unless named
            chosen = [(n, s) for n, s in chosen if not is_cpu_shape(n, s)]
        cases = [ShapeCase(n, dict(s), dict(s)) for n, s in chosen]
        return _spread(cases, 4) if quick and not patterns else cases
    if not patterns:       # on CPU the op's own CPU-sized shapes, when it has some, replace the scaled ones
        own = [(n, s) for n, s in chosen if is_cpu_shape(n, s)]
        chosen = own or chosen
    cases, seen = [], set()
    for n, s in chosen:
        small = dict(s) if is_cpu_shape(n, s) else cpu_shape(entry, s, dtype=dtype)
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
