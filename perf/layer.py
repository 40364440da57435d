"""Layer view: each ``ds`` op's share of a DeepSeek-V3 decoder layer's time, and its utilization there.

Needs ``ops/deepseek_layer.py``. If it exposes a builder of a random layer (the first of :data:`HOOKS` found), that is
called with whichever of ``device``, ``dtype``, ``generator`` it accepts and may return

* ``(fn, args)`` or ``(fn, args, kwargs)`` — the layer's forward and its inputs, or
* an object with ``forward``/``__call__`` and an ``example_inputs()`` method returning args (tuple) or kwargs (dict).

Otherwise :func:`builtin_layer` builds one bf16 and one a8w8 layer through the public loader
(``ops.weights.load_layer_weights`` on random HF-named weights, ``DeepseekV3DecodeLayer``, ``PagedCache``).

The layer runs once under ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs per ``ds`` op, from the formulas the
ops register) and once more for the time per ``ds`` op: device time under ``torch.profiler`` on CUDA, a wall clock
around each outermost ``ds`` call on CPU. While it runs, eager calls of ``DsOp`` objects are routed through
``torch.ops.ds.<name>`` so the tools see every op (the eager fast path skips the dispatcher, where they hook in).
The row :data:`OTHER` holds what is not inside a ``ds`` op. Anything missing yields ``available: False`` and a
reason.
"""
from __future__ import annotations

import contextlib
import inspect
import time
from typing import Any

import torch

HOOKS = ("perf_layer", "random_layer", "make_random_layer", "build_random_layer", "small_random_layer", "example_layer")


OTHER = "(not a ds op)"
"""The layer-view row for the time and FLOPs outside every ds op (norms, RoPE, residual adds, the MoE combine...)."""


@contextlib.contextmanager
def route_through_dispatcher(wall: dict | None = None):
    """Make ``DsOp.__call__`` call ``torch.ops.ds.<name>`` inside the block (restored after). With ``wall``: also
    add each outermost ds call's wall time (µs) and count to ``wall[name] = [µs, calls]`` (the CPU layer view)."""
    from ops._library import DsOp
    orig = DsOp.__call__
    depth = [0]

    def call(self, *args, **kwargs):
        fn = getattr(torch.ops.ds, self.name)
        if wall is None or depth[0]:
            return fn(*args, **kwargs)
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            acc = wall.setdefault(self.name, [0.0, 0])
            acc[0] += (time.perf_counter() - t0) * 1e6
            acc[1] += 1

    DsOp.__call__ = call
    try:
        yield
    finally:
        DsOp.__call__ = orig


def _op_name(key: Any) -> str:
    s = str(key)
    return s.split("::")[-1].split(".")[-1] if ("ds." in s or "ds::" in s) else s


def _from_hook(device: torch.device, dtype: torch.dtype, mod):
    hook = next((getattr(mod, h) for h in HOOKS if callable(getattr(mod, h, None))), None)
    if hook is None:
        return None, f"ops.deepseek_layer exposes none of {', '.join(HOOKS)}"
    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        params = {}
    offer = dict(device=device, dtype=dtype, generator=torch.Generator().manual_seed(0))
    kw = {k: v for k, v in offer.items() if k in params}
    try:
        built = hook(**kw)
    except Exception as e:  # noqa: BLE001
        return None, f"{hook.__name__}({', '.join(kw)}) failed: {type(e).__name__}: {e}"
    if isinstance(built, tuple) and len(built) in (2, 3) and callable(built[0]):
        fn, args = built[0], tuple(built[1]) if isinstance(built[1], (tuple, list)) else (built[1],)
        kwargs = dict(built[2]) if len(built) == 3 else {}
    elif callable(built) and callable(getattr(built, "example_inputs", None)):
        ex = built.example_inputs()
        fn = built
        args, kwargs = ((), dict(ex)) if isinstance(ex, dict) else (tuple(ex), {})
    else:
        return None, f"{hook.__name__} returned {type(built).__name__}, expected (fn, args[, kwargs]) or a module " \
                     "with example_inputs()"
    return (f"{hook.__name__}()", fn, args, kwargs), None


def random_layer(device: torch.device, mode: str):
    """A random DeepSeek-V3 decoder layer (layer 0) built through the public loader (ops.weights.load_layer_weights
    with HF-named random bf16 weights), mode "bf16" or "a8w8". Accelerator: DeepSeek-V3 attention dims (He 7168,
    128 heads, q_lora 1536), 32 routed experts (an EP8 shard) + 1 shared. CPU: a tiny config (He 256, 4 heads,
    16 routed experts).
    Returns the ``DeepseekV3DecodeLayer``."""
    from ops.deepseek_layer import DeepseekV3DecodeLayer
    from ops.weights import LayerConfig, load_layer_weights
    if device.type == "cpu":
        cfg = LayerConfig(hidden_size=256, num_attention_heads=4, q_lora_rank=192, n_routed_experts=16, n_group=4,
                          topk_group=2, num_experts_per_tok=4, moe_intermediate_size=64, first_k_dense_replace=0)
    else:
        cfg = LayerConfig(n_routed_experts=32, first_k_dense_replace=0)
    g = torch.Generator(device=device).manual_seed(0)
    He, N, Hcq, Hckv = cfg.hidden_size, cfg.num_attention_heads, cfg.q_lora_rank, cfg.kv_lora_rank
    D, Dr, V, E, I = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.n_routed_experts, \
        cfg.moe_intermediate_size

    def w(o, i):
        return (torch.randn(o, i, generator=g, device=device) / i ** 0.5).to(torch.bfloat16)

    def gamma(n):
        return (1 + 0.2 * torch.randn(n, generator=g, device=device)).to(torch.bfloat16)

    p = "model.layers.0."
    sd = {p + "input_layernorm.weight": gamma(He), p + "post_attention_layernorm.weight": gamma(He),
          p + "self_attn.q_a_proj.weight": w(Hcq, He), p + "self_attn.q_a_layernorm.weight": gamma(Hcq),
          p + "self_attn.q_b_proj.weight": w(N * (D + Dr), Hcq),
          p + "self_attn.kv_a_proj_with_mqa.weight": w(Hckv + Dr, He), p + "self_attn.kv_a_layernorm.weight": gamma(Hckv),
          p + "self_attn.kv_b_proj.weight": w(N * (D + V), Hckv), p + "self_attn.o_proj.weight": w(He, N * V)}
    sd[p + "mlp.gate.weight"] = torch.randn(E, He, generator=g, device=device) * 2.0 / He ** 0.5
    sd[p + "mlp.gate.e_score_correction_bias"] = 0.1 * torch.randn(E, generator=g, device=device)
    for e in range(E):
        sd[p + f"mlp.experts.{e}.gate_proj.weight"] = w(I, He)
        sd[p + f"mlp.experts.{e}.up_proj.weight"] = w(I, He)
        sd[p + f"mlp.experts.{e}.down_proj.weight"] = w(He, I)
    Is = I * cfg.n_shared_experts
    sd.update({p + "mlp.shared_experts.gate_proj.weight": w(Is, He),
               p + "mlp.shared_experts.up_proj.weight": w(Is, He),
               p + "mlp.shared_experts.down_proj.weight": w(He, Is)})
    layer = DeepseekV3DecodeLayer(load_layer_weights(sd, 0, cfg, mode=mode, device=device))
    del sd
    return layer


def random_step(layer, device: torch.device, batch: int, s_q: int, context: int, block_size: int):
    """A paged cache for ``layer`` with ``batch`` requests of ``context`` cached tokens (random latent rows, pages
    in random order) and a random bf16 x [batch, s_q, He] for the next step; the cache is not advanced, so every
    call of the layer is the same step. Returns (x, cache)."""
    from ops.deepseek_layer import PagedCache
    cfg = layer.cfg
    g = torch.Generator(device=device).manual_seed(2)
    nb = -(-(context + s_q) // block_size)
    cache = PagedCache(num_layers=1, num_blocks=batch * nb + 2, block_size=block_size,
                       kv_lora_rank=cfg.kv_lora_rank, qk_rope_head_dim=cfg.qk_rope_head_dim, device=device)
    cache.allocate(batch, context + s_q, generator=torch.Generator().manual_seed(1))
    cache.kv[0].normal_(generator=g)
    cache.kr[0].normal_(generator=g)
    cache.seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    x = torch.randn(batch, s_q, cfg.hidden_size, generator=g, device=device).to(torch.bfloat16)
    return x, cache


def builtin_layer(device: torch.device, mode: str):
    """A random DeepSeek-V3 MoE decoder layer (:func:`random_layer`) and its step (:func:`random_step`):
    accelerator B = 64, S_q = 2 (MTP), context 4096, block 64; CPU B = 2, S_q = 2, context 64, block 16.
    Returns (description, fn, args, kwargs)."""
    layer = random_layer(device, mode)
    B, S_q, L, bs = (2, 2, 64, 16) if device.type == "cpu" else (64, 2, 4096, 64)
    x, cache = random_step(layer, device, B, S_q, L, bs)
    cfg = layer.cfg
    desc = (f"built-in random layer ({mode}): He {cfg.hidden_size}, {cfg.num_attention_heads} heads, q_lora "
            f"{cfg.q_lora_rank}, {cfg.n_routed_experts} routed experts (top-{cfg.num_experts_per_tok}) + "
            f"{cfg.n_shared_experts} shared, B {B}, S_q {S_q}, context {L}")
    return desc, layer, (x, cache), {}


def _builds(device: torch.device, dtype: torch.dtype, modes=("bf16", "a8w8")):
    """[(description, fn, args, kwargs) | None, reason] for each layer to profile."""
    try:
        import ops.deepseek_layer as mod
    except ModuleNotFoundError as e:
        if "deepseek_layer" in str(e):
            return [], "ops/deepseek_layer.py does not exist"
        return [], f"importing ops.deepseek_layer failed: {e}"
    except Exception as e:  # noqa: BLE001
        return [], f"importing ops.deepseek_layer failed: {type(e).__name__}: {e}"
    built, reason = _from_hook(device, dtype, mod)
    if built is not None:
        return [built], ""
    out, reasons = [], [reason]
    if hasattr(mod, "DeepseekV3DecodeLayer") and hasattr(mod, "PagedCache"):
        for mode in modes:
            try:
                out.append(builtin_layer(device, mode))
            except Exception as e:  # noqa: BLE001
                reasons.append(f"built-in {mode} layer failed: {type(e).__name__}: {e}"[:300])
    return out, "; ".join(reasons)


def _profile_one(dev, desc, fn, args, kwargs, peaks, ceilings, specs) -> dict:
    from .peaks import ceiling_value
    from .timers import time_fn
    with torch.no_grad():
        call = lambda: fn(*args, **kwargs)  # noqa: E731
        call()
        total = time_fn(call, dev, mode="events", quick=True)
        with route_through_dispatcher():
            from torch.utils.flop_counter import FlopCounterMode
            with FlopCounterMode(display=False) as fc:
                call()
            flops = {_op_name(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
        if dev.type == "cuda":
            times, calls, whole = _cuda_profile(call)
            basis = "device time (CUDA profiler)"
        else:   # a wall clock around each ds call: the CPU profiler would add its own overhead and log lines
            runs = []
            for _ in range(3):      # the split of the median of three calls (one call can be an outlier)
                wall: dict = {}
                with route_through_dispatcher(wall):
                    t0 = time.perf_counter()
                    call()
                    runs.append(((time.perf_counter() - t0) * 1e6, wall))
            whole, wall = sorted(runs, key=lambda r: r[0])[1]
            times = {k: v[0] for k, v in wall.items()}
            calls = {k: v[1] for k, v in wall.items()}
            basis = "wall time of one call, the median of three"
    rows = []
    specs = specs or {}
    for name in sorted(times):
        t = times[name]
        f = flops.get(name, 0)
        tfl = f / (t * 1e-6) / 1e12 if t > 0 else None
        kind = getattr(specs.get(name), "compute", "bf16")
        pk = peaks.compute(kind).value if peaks is not None and peaks.compute(kind) else None
        ach = ceiling_value(ceilings or {}, kind)
        rows.append(dict(op=name, calls=calls.get(name, 0), flops=f, time_us=t,
                         share_pct=100 * t / whole if whole else None, tflops=tfl,
                         pct_peak=100 * tfl / pk if (tfl and pk) else None,
                         pct_achievable=100 * tfl / ach if (tfl and ach) else None))
    ds_share = sum(r["share_pct"] or 0.0 for r in rows)
    ds_flops = sum(r["flops"] for r in rows)
    rows.append(dict(op=OTHER, calls=None, flops=sum(flops.values()) - ds_flops,
                     time_us=max(0.0, whole - sum(r["time_us"] for r in rows)), share_pct=max(0.0, 100 - ds_share),
                     tflops=None, pct_peak=None, pct_achievable=None))
    return {"layer": desc, "total_us": total.p50_us, "profiled_us": whole, "layer_flops": sum(flops.values()),
            "time_basis": basis, "ops": rows}


def _cuda_profile(call) -> tuple[dict, dict, float]:
    """(device µs per ds op, calls per ds op, device µs of the whole call) of one call under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with route_through_dispatcher():
        with profile(activities=acts):     # warm-up: the profiler's start-up lands on the first op it sees
            call()
        with profile(activities=acts) as prof:
            call()
            torch.cuda.synchronize()
    times: dict[str, float] = {}
    calls: dict[str, int] = {}
    whole = 0.0
    for ev in prof.key_averages():
        whole += getattr(ev, "self_device_time_total", 0.0) or 0.0
        if ev.key.startswith("ds::"):
            name = ev.key[4:]
            times[name] = times.get(name, 0.0) + (getattr(ev, "device_time_total", 0.0) or 0.0)
            calls[name] = calls.get(name, 0) + ev.count
    return times, calls, whole


def layer_view(device: str | torch.device, *, dtype: torch.dtype = torch.bfloat16, peaks=None, ceilings=None,
               specs: dict | None = None, modes=("bf16", "a8w8")) -> dict:
    """Run the layer view; returns ``{"available": bool, "reason": str, "views": [view]}``; a view is
    ``{layer, total_us, profiled_us, layer_flops, time_basis, ops: [{op, calls, flops, time_us, share_pct, tflops,
    pct_peak, pct_achievable}]}``. ``modes``: which built-in layers to build when the module has no hook."""
    dev = torch.device(device)
    builds, reason = _builds(dev, dtype, modes)
    if not builds:
        return {"available": False, "reason": reason, "views": []}
    views, errors = [], []
    for desc, fn, args, kwargs in builds:
        try:
            views.append(_profile_one(dev, desc, fn, args, kwargs, peaks, ceilings, specs))
        except Exception as e:  # noqa: BLE001
            errors.append(f"{desc}: running it failed: {type(e).__name__}: {e}"[:400])
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if not views:
        return {"available": False, "reason": "; ".join(errors), "views": []}
    return {"available": True, "reason": "; ".join(errors), "views": views}
