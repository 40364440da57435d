"""A DeepSeek-V3 decoder layer for decode steps, composed of ``ds`` ops.

Data flow of one step (B requests, S_q new tokens each, T = B·S_q; ``x`` is the residual stream, bf16)::

    bf16 mode                                         a8w8 mode
    xn   = bf16(RmsNorm(x))                           xq, xs, _ = ds.rms_norm_dynamic_quant(x, smooth_x)
    q, q_rope = ds.mla_prolog(xn, ...)                q, q_rope = ds.mla_prolog(xq, dequant_scale_x=xs, int8 W)
         (writes c_kv / k_rope of the new tokens into the paged caches)
    o_lat, lse = ds.amla(q, q_rope, caches, block_table, seq_lens + S_q, softmax_scale, causal=True)
    o_v  = bf16(o_lat[h] @ W_UV[h])  per head (absorbed value up-projection)
    attn = o_v @ W_O                                  attn = ds.quant_matmul(ds.dynamic_quant(o_v), W_O int8)
    h    = bf16(x + attn); hn = bf16(RmsNorm(h))      hq, hs, h = ds.rms_norm_dynamic_quant(attn, residual=x)
    MoE layers: logits = hn·W_gateᵀ (fp32); w, ids = ds.moe_gating_top_k(logits, bias=e_score_correction_bias)
        y = Σ_k w_k · expert_{ids_k}(hn) + shared(hn)        (experts: bf16 matmuls | ds.quant_matmul)
    dense layers: y = mlp(hn)
    out  = bf16(h + y)   (the sum is formed in fp32)

The bf16-mode RmsNorms (input and post-attention) are plain PyTorch (fp32 math, one bf16 rounding): the
``ds`` norm op only exists fused with int8 quantisation.  In a8w8 mode the router reads the dequantised
int8 activation (``hq·hs / smooth``), i.e. exactly what the experts see.

Not part of a kernel path: the routed-expert loop visits the experts hit in this step (a host sync);
it is a correctness harness for the ops, not a fast MoE.

Paged KV cache: :class:`PagedCache` holds, per layer, ``kv_cache`` [num_blocks, block_size, 1, kv_lora_rank]
and ``kr_cache`` [num_blocks, block_size, 1, qk_rope_head_dim] (bf16, k_rope stored in de-interleaved
rotate-half order, the order ``ds::mla_prolog`` writes), one ``block_table`` [B, max_blocks] int32 shared by
the layers (unused entries −1) and ``seq_lens`` [B] int32 = tokens already cached per request.
A step runs every layer with the same cache and then calls ``cache.advance(S_q)`` (:func:`decode_step` does both).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from reference.deepseek import rms_norm
from .amla import MAX_S_Q
from .weights import LayerConfig, LayerWeights, Linear, MLPWeights, MoEWeights

__all__ = ["PagedCache", "DeepseekV3DecodeLayer", "decode_step", "prefill", "yarn_inv_freq", "softmax_scale_of"]


def _ds(name: str, registered: bool = False):
    """The ``ds`` op ``name``: ``torch.ops.ds.<name>`` (the registered op, through the dispatcher) when
    ``registered``, else its eager fast path (:class:`ops._library.DsOp`, same kernels, skips the ~10 µs
    dispatcher; under torch.compile it calls the registered op itself)."""
    import ops
    from ._library import DsOp
    if not registered:
        for mod in (ops.amla, ops.mla_prolog, ops.quant, ops.moe_gating):
            f = getattr(mod, name, None)
            if isinstance(f, DsOp):
                return f
    return getattr(torch.ops.ds, name)


# ----------------------------------------------------------------------------------------------
# RoPE / YaRN (as HF transformers computes it for DeepSeek-V3)
# ----------------------------------------------------------------------------------------------
def _yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(cfg: LayerConfig) -> tuple[torch.Tensor, float]:
    """(inv_freq [Dr/2] fp32, attention_scaling) of DeepSeek-V3's RoPE (YaRN when ``cfg.rope_scaling`` says so).

    Mirrors HF ``_compute_yarn_parameters`` (which DeepSeek's ``precompute_freqs_cis`` matches for
    max_seq_len > original_seq_len): extrapolated/interpolated frequencies blended by a linear ramp between
    the beta_fast/beta_slow correction dims; attention_scaling multiplies cos and sin: rope_scaling's
    ``attention_factor`` if given, else mscale(factor, mscale)/mscale(factor, mscale_all_dim) when both are
    non-zero (1.0 for DeepSeek-V3), else 0.1·ln(factor) + 1 (HF's fallback). Dr = cfg.qk_rope_head_dim; no rope_scaling
    (or rope_type "default") gives the plain ``rope_theta^(-2i/Dr)`` and 1.0.
    Raises NotImplementedError for a rope_type other than "default" / "yarn"; KeyError if a yarn
    rope_scaling lacks "factor" or "original_max_position_embeddings".
    """
    dim, base = cfg.qk_rope_head_dim, cfg.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    rs = cfg.rope_scaling
    if not rs or rs.get("rope_type", rs.get("type", "default")) == "default":
        return 1.0 / pos_freqs, 1.0
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype != "yarn":
        raise NotImplementedError(f"rope_type {rtype!r} (only default and yarn)")
    factor = float(rs["factor"])
    orig = rs["original_max_position_embeddings"]
    attention_factor = rs.get("attention_factor")
    mscale, mscale_all = rs.get("mscale"), rs.get("mscale_all_dim")
    if attention_factor is None:
        attention_factor = (_yarn_get_mscale(factor, mscale) / _yarn_get_mscale(factor, mscale_all)
                            if mscale and mscale_all else _yarn_get_mscale(factor))
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def corr_dim(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extra = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    return inv, float(attention_factor)


def softmax_scale_of(cfg: LayerConfig) -> float:
    """The softmax_scale of ``ds::amla`` for this config (HF ``DeepseekV3Attention``'s ``scaling``): (D + Dr)^-0.5,
    times mscale(factor, mscale_all_dim)² only when rope_scaling is not default and has a non-zero
    ``mscale_all_dim`` (≈ 0.1352 for DeepSeek-V3; 192^-0.5 ≈ 0.0722 without it)."""
    s = (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5
    rs = cfg.rope_scaling
    if rs and rs.get("rope_type", rs.get("type", "default")) != "default" and rs.get("mscale_all_dim"):
        m = _yarn_get_mscale(float(rs["factor"]), rs["mscale_all_dim"])
        s = s * m * m
    return s


# ----------------------------------------------------------------------------------------------
# paged cache
# ----------------------------------------------------------------------------------------------
class PagedCache:
    """Paged latent KV cache for ``num_layers`` layers with one page table.

    kv[i]: [num_blocks, block_size, 1, kv_lora_rank], kr[i]: [num_blocks, block_size, 1, qk_rope_head_dim]
    (dtype, default bf16; fresh pages are filled with ``fill``, NaN by default, so an unwritten slot that
    is read shows up); block_table [B, max_blocks] int32 (−1 = unused); seq_lens [B] int32.
    Empty (B = 0) until :meth:`allocate`. Raises ValueError if num_blocks ≤ 0 or block_size ≤ 0.
    """

    def __init__(self, *, num_layers: int, num_blocks: int, block_size: int, kv_lora_rank: int = 512,
                 qk_rope_head_dim: int = 64, dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu",
                 fill: float = float("nan")):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks and block_size must be > 0, got {num_blocks}, {block_size}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.device = torch.device(device)
        self.kv = [torch.full((num_blocks, block_size, 1, kv_lora_rank), fill, dtype=dtype, device=self.device)
                   for _ in range(num_layers)]
        self.kr = [torch.full((num_blocks, block_size, 1, qk_rope_head_dim), fill, dtype=dtype, device=self.device)
                   for _ in range(num_layers)]
        self.block_table = torch.empty(0, 0, dtype=torch.int32, device=self.device)
        self.seq_lens = torch.empty(0, dtype=torch.int32, device=self.device)
        self._free = list(range(num_blocks))

    def allocate(self, batch: int, max_tokens: int, *, generator: torch.Generator | None = None) -> None:
        """Reserve pages for ``batch`` requests of up to ``max_tokens`` tokens each (pages in a random order
        when ``generator`` is given); resets ``seq_lens`` to 0. The pages of a previous allocation are returned
        first (a new allocation starts a new batch). Raises ValueError for a negative batch or max_tokens,
        RuntimeError when pages run out (nothing changes then)."""
        if batch < 0 or max_tokens < 0:
            raise ValueError(f"batch and max_tokens must be >= 0, got {batch}, {max_tokens}")
        nb = -(-max_tokens // self.block_size)
        held = [int(p) for p in self.block_table.reshape(-1).tolist() if p >= 0]
        if batch * nb > len(self._free) + len(held):
            raise RuntimeError(f"need {batch * nb} pages for {batch}×{max_tokens} tokens, "
                               f"{len(self._free) + len(held)} free")
        self._free = sorted(self._free + held)
        free = self._free
        if generator is not None:
            perm = torch.randperm(len(free), generator=generator).tolist()
            free = [free[i] for i in perm]
        pages, self._free = free[:batch * nb], free[batch * nb:]
        self.block_table = torch.tensor(pages, dtype=torch.int32).view(batch, nb).to(self.device)
        self.seq_lens = torch.zeros(batch, dtype=torch.int32, device=self.device)

    @property
    def batch(self) -> int:
        return self.block_table.shape[0]

    def positions(self, s_q: int) -> torch.Tensor:
        """[B, s_q] int64 positions of the next ``s_q`` tokens of every request."""
        return self.seq_lens.long()[:, None] + torch.arange(s_q, device=self.device)[None, :]

    def slots(self, s_q: int) -> torch.Tensor:
        """[B·s_q] int64 cache slots (block_id·block_size + offset) of the next ``s_q`` tokens.
        Raises RuntimeError if a request would outgrow its pages."""
        pos = self.positions(s_q)
        page = pos // self.block_size
        if bool((page >= self.block_table.shape[1]).any()):
            raise RuntimeError(f"a request outgrows its {self.block_table.shape[1]} pages")
        blk = torch.gather(self.block_table.long(), 1, page)
        return (blk * self.block_size + pos % self.block_size).reshape(-1)

    def advance(self, s_q: int) -> None:
        """Count ``s_q`` more tokens in every request. Raises ValueError for a negative s_q."""
        if s_q < 0:
            raise ValueError(f"s_q must be >= 0, got {s_q}")
        self.seq_lens = self.seq_lens + s_q


# ----------------------------------------------------------------------------------------------
# the layer
# ----------------------------------------------------------------------------------------------
class DeepseekV3DecodeLayer:
    """One DeepSeek-V3 decoder layer (MLA + MoE, or MLA + dense MLP for layers < first_k_dense_replace).

    weights: :class:`ops.weights.LayerWeights` from :func:`ops.weights.load_layer_weights` (its ``mode``,
    "bf16" or "a8w8", selects the path). ``rope_dtype``: dtype of the rope_sin/rope_cos tables handed to
    ``ds::mla_prolog`` (bf16 like the Ascend kernel; fp32 accepted by the reference).
    ``registered_ops``: call ``torch.ops.ds.*`` through the dispatcher instead of the eager fast path
    (same results; for checking the registration).

    Call: ``layer(x, cache)`` with x [B, S_q, He] (the residual stream; any float dtype, cast to bf16) and a :class:`PagedCache`
    whose ``seq_lens`` count the tokens already cached; returns [B, S_q, He] bf16. The new tokens' latent
    KV is written into ``cache.kv[layer_idx]`` / ``cache.kr[layer_idx]``; ``seq_lens`` is not advanced
    (call ``cache.advance(S_q)`` after the last layer, or use :func:`decode_step`).

    Raises (constructor) NotImplementedError for an MoE layer with ``norm_topk_prob`` False, a
    ``hidden_act`` other than "silu", or a rope_type other than default / yarn (:func:`yarn_inv_freq`, whose
    KeyError for an incomplete yarn rope_scaling also propagates).
    Raises (call) ValueError if the cache has no layer ``layer_idx``, has no requests (B = 0, not
    allocated) while x has rows, x is not [cache.batch, S_q, hidden_size], or S_q is outside ds::amla's
    [1, 16] (all before mla_prolog writes the cache); RuntimeError if a request
    outgrows its pages (:meth:`PagedCache.slots`); the ``ds`` ops' own errors propagate.
    """

    def __init__(self, weights: LayerWeights, *, rope_dtype: torch.dtype = torch.bfloat16, registered_ops: bool = False):
        cfg = weights.config
        if not cfg.norm_topk_prob and weights.is_moe:
            raise NotImplementedError("norm_topk_prob=False: ds::moe_gating_top_k with sigmoid always renormalises")
        if cfg.hidden_act != "silu":
            raise NotImplementedError(f"hidden_act {cfg.hidden_act!r}")
        self.w, self.cfg, self.mode, self.layer_idx = weights, cfg, weights.mode, weights.layer_idx
        self.inv_freq, self.attention_scaling = yarn_inv_freq(cfg)
        self._inv_freq_on: dict[torch.device, torch.Tensor] = {}   # inv_freq per device, copied once (graph capture)
        self.softmax_scale = softmax_scale_of(cfg)
        self.rope_dtype = rope_dtype
        self.registered_ops = registered_ops
        self.last_routing: tuple[torch.Tensor, torch.Tensor] | None = None   # (weights, ids) of the last MoE step
        # set to a list to record (positions [B, S_q], expert ids [B, S_q, k]) of every MoE step (tests, debugging)
        self.routing_log: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    # -- helpers ------------------------------------------------------------------------------
    def _op(self, name: str):
        return _ds(name, self.registered_ops)

    def rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sin, cos) [T, Dr] in ``rope_dtype`` (half-duplicated layout) for int positions [T]."""
        inv = self._inv_freq_on.get(positions.device)
        if inv is None:   # one host-to-device copy per device, not one per step (a copy cannot be graph-captured)
            inv = self._inv_freq_on[positions.device] = self.inv_freq.to(positions.device)
        f = positions.float()[:, None] * inv[None, :]
        emb = torch.cat([f, f], dim=-1)
        return ((emb.sin() * self.attention_scaling).to(self.rope_dtype),
                (emb.cos() * self.attention_scaling).to(self.rope_dtype))

    def _norm_bf16(self, x: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, gamma, self.cfg.rms_norm_eps).to(torch.bfloat16)

    @staticmethod
    def _linear_bf16(x: torch.Tensor, lin: Linear) -> torch.Tensor:
        return torch.matmul(x, lin.weight)

    def _linear_q(self, xq: torch.Tensor, xs: torch.Tensor, lin: Linear) -> torch.Tensor:
        return self._op("quant_matmul")(xq, lin.weight, lin.scale, xs, out_dtype=torch.bfloat16)

    def _linear(self, x: torch.Tensor, lin: Linear) -> torch.Tensor:
        """bf16 x [M, K] → bf16 [M, N]; a8w8: per-token dynamic quant (with lin.smooth) + quant_matmul."""
        if self.mode == "bf16":
            return self._linear_bf16(x, lin)
        xq, xs = self._op("dynamic_quant")(x, smooth_scales=lin.smooth)
        return self._linear_q(xq, xs, lin)

    def _mlp(self, x: torch.Tensor | tuple[torch.Tensor, torch.Tensor], m: MLPWeights) -> torch.Tensor:
        """SwiGLU on bf16 x [M, He] (bf16 mode) or (x_int8 [M, He], scale [M]) (a8w8) → bf16 [M, He]."""
        gu = self._linear_bf16(x, m.gate_up) if self.mode == "bf16" else self._linear_q(*x, m.gate_up)
        inter = gu.shape[-1] // 2
        g, u = gu[:, :inter].float(), gu[:, inter:].float()
        a = (torch.nn.functional.silu(g) * u).to(torch.bfloat16)
        return self._linear(a, m.down)

    # -- forward ------------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor, cache: PagedCache) -> torch.Tensor:
        return self.forward(x, cache)

    def forward(self, x: torch.Tensor, cache: PagedCache) -> torch.Tensor:
        cfg, w, a = self.cfg, self.w, self.w.attn
        _check_layer_cache(self.layer_idx, cache)
        _check_input(x, cache, cfg.hidden_size)      # before mla_prolog writes the cache
        B, S, He = x.shape
        T, N, Hckv, Dr, V = B * S, cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.v_head_dim
        x = x.to(torch.bfloat16)
        x2 = x.reshape(T, He)
        positions = cache.positions(S)
        sin, cos = self.rope_tables(positions.reshape(-1))
        cache_index = cache.slots(S)
        kv_cache, kr_cache = cache.kv[self.layer_idx], cache.kr[self.layer_idx]
        eps_l = cfg.latent_norm_eps

        # ---- MLA ----------------------------------------------------------------------------
        if self.mode == "bf16":
            xn = self._norm_bf16(x2, w.input_layernorm)
            q, q_rope, _ = self._op("mla_prolog")(
                xn, a.weight_dq, a.weight_uq_qr, a.weight_uk, a.weight_dkv_kr, a.gamma_cq, a.gamma_ckv, sin, cos,
                kv_cache, kr_cache, cache_index=cache_index, rmsnorm_epsilon_cq=eps_l, rmsnorm_epsilon_ckv=eps_l)
        else:
            xq, xs, _ = self._op("rms_norm_dynamic_quant")(x2, w.input_layernorm, epsilon=cfg.rms_norm_eps,
                                                      smooth_scales=a.smooth_x)
            q, q_rope, _ = self._op("mla_prolog")(
                xq, a.weight_dq, a.weight_uq_qr, a.weight_uk, a.weight_dkv_kr, a.gamma_cq, a.gamma_ckv, sin, cos,
                kv_cache, kr_cache, cache_index=cache_index, dequant_scale_x=xs.reshape(T, 1),
                dequant_scale_w_dq=a.dequant_scale_w_dq.reshape(1, -1),
                dequant_scale_w_uq_qr=a.dequant_scale_w_uq_qr.reshape(1, -1),
                dequant_scale_w_dkv_kr=a.dequant_scale_w_dkv_kr.reshape(1, -1),
                smooth_scales_cq=None if a.smooth_scales_cq is None else a.smooth_scales_cq.reshape(1, -1),
                rmsnorm_epsilon_cq=eps_l, rmsnorm_epsilon_ckv=eps_l)
        o_lat, _lse = self._op("amla")(q.reshape(B, S, N, Hckv), q_rope.reshape(B, S, N, Dr), kv_cache, kr_cache,
                                  cache.block_table, cache.seq_lens + S, self.softmax_scale, True)
        o_v = torch.bmm(o_lat.reshape(T, N, Hckv).transpose(0, 1), a.w_uv)          # [N, T, V] bf16
        o_v = o_v.transpose(0, 1).reshape(T, N * V)
        attn = self._linear(o_v, a.o_proj)                                           # [T, He] bf16

        # ---- MLP / MoE ----------------------------------------------------------------------
        if self.mode == "bf16":
            h = (x2 + attn).to(torch.bfloat16)
            hn = self._norm_bf16(h, w.post_attention_layernorm)
            act: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = hn
            hn_f = hn.float()
        else:
            m_in = self._mlp_smooth()
            hq, hs, h = self._op("rms_norm_dynamic_quant")(attn, w.post_attention_layernorm, epsilon=cfg.rms_norm_eps,
                                                      residual=x2, smooth_scales=m_in)
            act = (hq, hs)
            hn_f = hq.float() * hs.float().reshape(-1, 1)
            if m_in is not None:
                hn_f = hn_f / m_in.float()
        if isinstance(w.mlp, MoEWeights):
            y = self._moe(act, hn_f, w.mlp)
            if self.routing_log is not None:
                self.routing_log.append((positions.cpu(), self.last_routing[1].reshape(B, S, -1).cpu()))
        else:
            y = self._mlp(act, w.mlp).float()
        return (h.float() + y).to(torch.bfloat16).reshape(B, S, He)

    def _mlp_smooth(self) -> torch.Tensor | None:
        m = self.w.mlp
        return (m.experts[0] if isinstance(m, MoEWeights) else m).gate_up.smooth

    def _moe(self, act, hn_f: torch.Tensor, m: MoEWeights) -> torch.Tensor:
        """fp32 [T, He] = Σ routed (weights · expert(act)) + shared(act)."""
        cfg = self.cfg
        logits = hn_f @ m.gate_weight.float().t()                                    # [T, E] fp32
        y, ids, _ = self._op("moe_gating_top_k")(
            logits, cfg.num_experts_per_tok, bias=m.e_score_correction_bias.float(), k_group=cfg.topk_group,
            group_count=cfg.n_group, group_select_mode=1, renorm=0, norm_type=1, out_flag=False,
            routed_scaling_factor=float(cfg.routed_scaling_factor), eps=1e-20)
        self.last_routing = (y, ids)
        T = hn_f.shape[0]
        out = torch.zeros(T, cfg.hidden_size, dtype=torch.float32, device=hn_f.device)
        ids_l = ids.long()
        for e in torch.unique(ids_l).tolist():                                       # host sync: harness, not a kernel
            tok, slot = torch.nonzero(ids_l == e, as_tuple=True)
            xe = act[tok] if self.mode == "bf16" else (act[0][tok], act[1][tok])
            out.index_add_(0, tok, self._mlp(xe, m.experts[e]).float() * y[tok, slot, None].float())
        if m.shared is not None:
            out += self._mlp(act, m.shared).float()
        return out


# ----------------------------------------------------------------------------------------------
# running a stack of layers
# ----------------------------------------------------------------------------------------------
def decode_step(layers: Sequence[DeepseekV3DecodeLayer], x: torch.Tensor, cache: PagedCache) -> list[torch.Tensor]:
    """Run ``x`` [B, S_q, He] (hidden states, any float dtype; cast to bf16) through ``layers`` (each layer's
    output feeds the next), then advance the cache by S_q. Returns every layer's output [B, S_q, He] bf16 (the
    last one is the stack's output). Raises ValueError if x is not [cache.batch, S_q, hidden_size] or S_q is
    outside ds::amla's [1, 16], ``layers`` is empty or a layer has no cache, RuntimeError if a request would outgrow its cache pages;
    all before any cache row is written."""
    _check_steps(layers, x, cache, x.shape[1])
    return _run_steps(layers, x, cache)


def _run_steps(layers: Sequence[DeepseekV3DecodeLayer], x: torch.Tensor, cache: PagedCache) -> list[torch.Tensor]:
    """:func:`decode_step` after its checks: the layers in turn, then the cache advanced by S_q."""
    outs = []
    for layer in layers:
        x = layer(x, cache)
        outs.append(x)
    cache.advance(x.shape[1])
    return outs


def _check_layer_cache(layer_idx: int, cache: PagedCache) -> None:
    if layer_idx >= len(cache.kv):
        raise ValueError(f"layer_idx {layer_idx} has no cache: the PagedCache holds {len(cache.kv)} layers")


def _check_input(x: torch.Tensor, cache: PagedCache, hidden: int | None) -> None:
    """x against the cache: requests allocated, [cache.batch, S_q, hidden] (hidden None: not checked), S_q in
    ds::amla's [1, 16]. Raises ValueError naming what is wrong."""
    if x.dim() == 3 and cache.batch == 0 and x.shape[0] > 0:
        raise ValueError("the cache has no requests: call cache.allocate(batch, max_tokens) first")
    if hidden is not None and (x.dim() != 3 or x.shape[0] != cache.batch or x.shape[2] != hidden):
        raise ValueError(f"x must be [B={cache.batch}, S_q, {hidden}], got {list(x.shape)}")
    if not 1 <= x.shape[1] <= MAX_S_Q:
        raise ValueError(f"x: S_q (dim 1) must be in [1, {MAX_S_Q}] (ds::amla), got {x.shape[1]}")


def _check_steps(layers: Sequence[DeepseekV3DecodeLayer], x: torch.Tensor, cache: PagedCache, tokens: int) -> None:
    """The errors a layer would raise part-way, raised before any cache row is written: a layer without a cache,
    x's shape or S_q (ds::amla's [1, 16]), and ``tokens`` more tokens not fitting every request's pages; an empty
    ``layers`` (the cache would advance with nothing written: the next step would read unwritten slots)."""
    if len(layers) == 0:
        raise ValueError("layers is empty: pass at least one DeepseekV3DecodeLayer (the cache would advance with "
                         "no key written)")
    for layer in layers:
        _check_layer_cache(layer.layer_idx, cache)
    _check_input(x, cache, layers[0].cfg.hidden_size)
    capacity = cache.block_table.shape[1] * cache.block_size
    if cache.batch and int(cache.seq_lens.max()) + tokens > capacity:
        raise RuntimeError(f"a request outgrows its {cache.block_table.shape[1]} pages: {int(cache.seq_lens.max())} "
                           f"cached + {tokens} new tokens > {capacity} slots (nothing was written)")


def prefill(layers: Sequence[DeepseekV3DecodeLayer], x: torch.Tensor, cache: PagedCache, *,
            chunk: int = 4) -> list[torch.Tensor]:
    """Prefill a prompt x [B, P, He] in causal chunks of ≤ ``chunk`` query tokens through the decode path
    (``ds::amla`` takes S_q ≤ 16, ``ops.amla.MAX_S_Q``); x: any float dtype, cast to bf16. Returns every
    layer's output [B, P, He] bf16 (P = 0: empty outputs, the cache unchanged). Raises TypeError for a chunk
    that is not an int, ValueError for a chunk outside [1, 16] or an empty ``layers``, plus :func:`decode_step`'s
    errors, all before the first chunk runs (a prompt that does not fit is refused whole). P = 0 returns at
    once, one empty output per layer, after the chunk checks only."""
    if isinstance(chunk, bool) or not isinstance(chunk, int):
        raise TypeError(f"chunk must be an int, got {type(chunk).__name__} {chunk!r}")
    if not 1 <= chunk <= MAX_S_Q:
        raise ValueError(f"chunk must be in [1, {MAX_S_Q}] (query tokens per step: ds::amla's S_q), got {chunk}")
    if x.shape[1] == 0:     # an empty prompt: nothing to run, nothing cached
        return [x.new_empty(x.shape, dtype=torch.bfloat16) for _ in layers]
    _check_steps(layers, x[:, :min(chunk, x.shape[1])], cache, x.shape[1])   # the whole prompt, before chunk 1
    pieces: list[list[torch.Tensor]] = []
    for s in range(0, x.shape[1], chunk):     # every chunk is covered by the check above (no host sync per chunk)
        pieces.append(_run_steps(layers, x[:, s:s + chunk], cache))
    return [torch.cat([p[i] for p in pieces], dim=1) for i in range(len(layers))]
