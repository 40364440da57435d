"""Host-side helpers shared by the Triton launchers: launch-config tables, rounding helpers, SM counts.

Launch configs are data, one JSON file per backend family and op: ``ops/triton/configs/<backend>/<op>.json`` with
``<backend>`` "cuda" (NVIDIA), "ascend" (triton-ascend on the 910B; the quant, mla_prolog and moe_gating launchers
also run it under the CPU interpreter, so CI exercises the Ascend tiles and persistent loops) or "interpreter" (a
table of its own for the CPU interpreter, where an op has one). A file is an object of *sections* (one per kernel
or launch: ``"quant_matmul"``, ``"down"``, ...) beside table-wide keys (``"cores"``); a one-kernel op's file is
its one section. A section holds the keys shared by all its launches and may hold ``"buckets"``, a list tried in
order, **first match wins**::

    {"match": {"M": [1, 16], "N": [8192, null], "int8": true}, "config": {"BLOCK_M": 16, ...}}

* ``match``: dimension name → ``[lo, hi]`` (ints, both inclusive; ``null`` hi = no upper bound) or a bool (equal);
  a dimension the match does not name is not constrained; a list of such objects matches when any of them does;
  no ``match`` (or ``{}``) matches everything. Each launcher documents the dimensions it passes.
* ``config``: the launch keys of that bucket (the launcher's own vocabulary, checked by the launcher).
* The last bucket matches everything (checked on load), so every shape has a config.
* No prose, notes or candidates inside (no key starting with ``_``): the measurements behind a table live in
  docs/performance.md.

:func:`load_configs` reads and checks the files, :func:`select` picks a bucket, :func:`resolve` merges a section's
shared keys with its bucket, :func:`unreachable` / :func:`bounds` find buckets no shape reaches (tests check there
are none). For tests and tuning: :func:`forced_table` (every launch takes one table), :func:`replaced_configs`
(other tables for a while), :func:`clear_caches` (forget a module's memoised plans).
"""
from __future__ import annotations

import contextlib
import functools
import glob
import itertools
import json
import os
import sys

import torch

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "configs")


def _check_no_prose(node, where: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k.startswith("_"):
                raise ValueError(f"{where}: key {k!r}: a config table holds launch data only (notes go to the docs)")
            _check_no_prose(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_no_prose(v, f"{where}[{i}]")


def _check_box(box, where: str) -> None:
    if not isinstance(box, dict):
        raise ValueError(f"{where}: a match is an object of dimension -> [lo, hi] or bool, got {box!r}")
    for dim, r in box.items():
        if isinstance(r, bool):
            continue
        ok = (isinstance(r, list) and len(r) == 2 and isinstance(r[0], int) and not isinstance(r[0], bool)
              and (r[1] is None or (isinstance(r[1], int) and not isinstance(r[1], bool) and r[1] >= r[0])))
        if not ok:
            raise ValueError(f"{where}: match {dim!r} must be [lo, hi] (ints, hi >= lo or null) or a bool, got {r!r}")


def _boxes(bucket: dict) -> list[dict]:
    m = bucket.get("match", {})
    return m if isinstance(m, list) else [m]


def check_buckets(buckets, where: str = "") -> None:
    """Raise ValueError unless ``buckets`` follows the grammar of this module's docstring: a non-empty list of
    objects with a ``config`` object and an optional ``match`` (object or list of objects of dimension → ``[lo, hi]``
    or bool), nothing else, the last one matching everything. ``where`` prefixes the message."""
    if not isinstance(buckets, list) or not buckets:
        raise ValueError(f"{where}: 'buckets' must be a non-empty list")
    for i, b in enumerate(buckets):
        w = f"{where} bucket {i}"
        if not isinstance(b, dict) or not isinstance(b.get("config"), dict) or set(b) - {"match", "config"}:
            raise ValueError(f"{w}: a bucket is {{'match': ..., 'config': {{...}}}}, got {b!r}")
        boxes = _boxes(b)
        if isinstance(b.get("match"), list) and not boxes:
            raise ValueError(f"{w}: an empty list of matches can never match")
        for box in boxes:
            _check_box(box, w)
    if any(_boxes(buckets[-1])[0]) or len(_boxes(buckets[-1])) != 1:
        raise ValueError(f"{where}: the last bucket must match every shape (no 'match'), got {buckets[-1]!r}")


def _in_box(box: dict, dims: dict) -> bool:
    for dim, r in box.items():
        if dim not in dims:
            raise KeyError(f"a bucket matches on {dim!r}, which the launcher does not give (it gives {sorted(dims)})")
        v = dims[dim]
        if isinstance(r, bool):
            if bool(v) != r:
                return False
        elif v < r[0] or (r[1] is not None and v > r[1]):
            return False
    return True


def select(buckets: list[dict], **dims) -> dict:
    """The ``config`` of the first bucket whose match holds for ``dims`` (ints / bools, e.g. ``M=16, N=2112``).
    Returns the table's own dict (shared: copy before changing it). Raises KeyError when a bucket names a dimension
    not in ``dims``; ValueError when no bucket matches (a table that passed :func:`check_buckets` always matches)."""
    for b in buckets:
        if any(_in_box(box, dims) for box in _boxes(b)):
            return b["config"]
    raise ValueError(f"no bucket matches {dims}")


def resolve(section: dict, **dims) -> dict:
    """A section's launch config for ``dims``: its shared keys (all but ``buckets``) updated by the
    :func:`select`-ed bucket's config, when the section has buckets. Returns a new dict."""
    out = {k: v for k, v in section.items() if k != "buckets"}
    if "buckets" in section:
        out.update(select(section["buckets"], **dims))
    return out


def bounds(buckets: list[dict], dim: str) -> list:
    """The sorted values of ``dim`` where some bucket's range of it starts or ends (each ``lo − 1``, ``lo``,
    ``hi + 1`` that is ≥ 0; False and True for a bool dimension): one point in every cell of the grid the buckets
    draw on that axis. Empty when no bucket names ``dim``."""
    vals: set = set()
    for b in buckets:
        for box in _boxes(b):
            r = box.get(dim)
            if isinstance(r, bool):
                vals.update((False, True))
            elif r is not None:
                vals.update(v for v in (r[0] - 1, r[0], r[1] + 1 if r[1] is not None else r[0]) if v >= 0)
    return sorted(vals)


def unreachable(buckets: list[dict]) -> list[int]:
    """Indices of buckets that no shape reaches (an earlier bucket catches all of it). Exact for the box grammar:
    every cell of the grid drawn by all bounds (:func:`bounds`) is tried."""
    dims = sorted({dim for b in buckets for box in _boxes(b) for dim in box})
    cuts = {d: bounds(buckets, d) for d in dims}
    hit = set()
    for point in itertools.product(*(cuts[d] for d in dims)):
        p = dict(zip(dims, point))
        for i, b in enumerate(buckets):
            if any(_in_box(box, p) for box in _boxes(b)):
                hit.add(i)
                break
    return [i for i in range(len(buckets)) if i not in hit]


def _check_table(table: dict, where: str) -> None:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: a config table is an object of sections")
    _check_no_prose(table, where)

    def walk(node, w):
        if isinstance(node, dict):
            if "buckets" in node:
                check_buckets(node["buckets"], w)
            for k, v in node.items():
                if k != "buckets":
                    walk(v, f"{w}.{k}")
    walk(table, where)


def backends(op: str) -> list[str]:
    """The backend families with a table for ``op`` (the ``<backend>`` of each configs/<backend>/<op>.json)."""
    return sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(CONFIG_DIR, "*", op + ".json")))


_REPLACED: dict[str, dict] = {}


@contextlib.contextmanager
def replaced_configs(op: str, tables: dict):
    """Within the block :func:`load_configs` (``op``) returns ``tables`` ({backend: table}, checked like the files)
    instead of the files, and every memoised plan of the loaded launcher modules is forgotten on entry and on exit:
    for tests and tuning experiments that try other tables. Not thread-safe (one process-wide setting)."""
    for name, table in tables.items():
        _check_table(table, f"{name}/{op}.json (replaced)")
    _REPLACED[op] = tables
    _forget_plans()
    try:
        yield tables
    finally:
        del _REPLACED[op]
        _forget_plans()


def _forget_plans() -> None:
    _load_files.cache_clear()
    for name, mod in list(sys.modules.items()):
        if name.startswith("ops.triton.") and mod is not None:
            clear_caches(mod)


def load_configs(op: str) -> dict:
    """``{backend: table}`` for every ``ops/triton/configs/<backend>/<op>.json`` (or the tables of an enclosing
    :func:`replaced_configs`), each checked against the grammar (:func:`check_buckets`, no ``_`` keys). Shared: never
    modify it. Raises FileNotFoundError when ``op`` has no table, ValueError (naming the file) for one that breaks
    the grammar."""
    if op in _REPLACED:
        return _REPLACED[op]
    return _load_files(op)


@functools.lru_cache(maxsize=None)
def _load_files(op: str) -> dict:
    names = backends(op)
    if not names:
        raise FileNotFoundError(f"no launch table for {op!r}: expected ops/triton/configs/<backend>/{op}.json")
    out = {}
    for name in names:
        path = os.path.join(CONFIG_DIR, name, op + ".json")
        with open(path) as f:
            table = json.load(f)
        _check_table(table, os.path.relpath(path, os.path.dirname(CONFIG_DIR)))
        out[name] = table
    return out


def clear_caches(module) -> int:
    """Forget every memoised launch plan of a launcher ``module`` (each ``functools.lru_cache`` function it defines):
    for tests that compare warm with cold launches and for config experiments that edit a table in place.
    Returns how many caches were cleared."""
    n = 0
    for v in vars(module).values():
        if callable(getattr(v, "cache_clear", None)) and getattr(v, "__module__", None) == module.__name__:
            v.cache_clear()
            n += 1
    return n


_FORCED_TABLE: list[str] = []


@contextlib.contextmanager
def forced_table(key: str):
    """Within the block every quant / mla_prolog / moe_gating launch takes config table ``key`` ("cuda" /
    "ascend") whatever the tensors' device: tests run the CUDA tiles under the CPU interpreter, perf measures the
    CUDA plans' host cost on a CPU. Plans are memoised per table, so nothing leaks out of the block. Not
    thread-safe (one process-wide setting)."""
    _FORCED_TABLE.append(key)
    try:
        yield key
    finally:
        _FORCED_TABLE.pop()


def backend_key(device: torch.device) -> str:
    """The config table of a launch: 'cuda' on NVIDIA; 'ascend' on NPUs and on the CPU interpreter (so CI runs
    the Ascend tiles and persistent loops); inside :func:`forced_table`, its table. ops/triton/amla.py has a
    third, 'interpreter', table of its own."""
    if _FORCED_TABLE:
        return _FORCED_TABLE[-1]
    return "cuda" if device.type == "cuda" else "ascend"


def bf16_cpu_output_reason(what: str) -> str:
    """``supports_reason`` text for a bf16 output on CPU tensors: the interpreter truncates fp32 → bf16 where the
    GPU rounds to nearest even, so the Triton backend refuses it there (``auto`` then takes the reference)."""
    return (f"a bf16 {what} under TRITON_INTERPRET (CPU) would be rounded toward zero (the interpreter truncates "
            "fp32 → bf16); bf16 outputs run on CUDA / NPU")


def unit_inner(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` itself when its last dim has a unit stride (or ≤ 1 element, or t is None), else a contiguous copy:
    the kernels address per-channel vectors, scales, seq_lens and block-table rows as ``ptr + i``."""
    return t if t is None or t.dim() == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def cdiv(x: int, y: int) -> int:
    """``triton.cdiv`` for host ints. In Triton 3.9 ``triton.cdiv`` / ``triton.next_power_of_2`` are
    ``@constexpr_function`` objects whose host call costs ~2 µs (argument unwrapping); these give the same ints."""
    return (x + (y - 1)) // y


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2`` for host ints: the smallest power of two ≥ n; 0 for n ≤ 0 (as Triton's bit trick)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


@functools.lru_cache(maxsize=None)
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (queried once)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def device_cores(device: torch.device, configured: int = 0, default: int = 20) -> int:
    """The cores a launch spreads over: ``configured`` (a table's ``cores``) when > 0, else the SM count of a CUDA
    ``device`` (its current device when it has no index), else ``default``."""
    if configured > 0:
        return configured
    if device.type == "cuda":
        return sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return default
