"""Load one DeepSeek-V3 decoder layer's weights from a Hugging Face / DeepSeek state dict.

Produces the tensors :class:`ops.deepseek_layer.DeepseekV3DecodeLayer` feeds to the ``ds`` ops, in two modes:

* ``"bf16"``: every matmul weight bf16; the router weight and ``e_score_correction_bias`` fp32.
* ``"a8w8"``: SmoothQuant W8A8 (the "A8W8C16" deployment): the three MLAProlog projections, ``o_proj`` and
  every expert / dense-MLP projection int8 with a per-channel (per output column) fp32 scale; activations
  are quantised per token at run time; optional SmoothQuant factors from calibration activations are folded
  into the weights offline.  ``W_UK``/``W_UV`` (per-head absorbed), norms and router stay bf16/fp32;
  the caches stay bf16.

State-dict names (prefix ``model.layers.{i}.``; both the DeepSeek/HF-4 per-expert and the transformers-5
fused-expert spellings are accepted)::

    self_attn.q_a_proj.weight            [Hcq, He]            -> weight_dq     [He, Hcq]       (transposed)
    self_attn.q_a_layernorm.weight       [Hcq]                -> gamma_cq
    self_attn.q_b_proj.weight            [N·(D+Dr), Hcq]      -> weight_uq_qr  [Hcq, N·(D+Dr)] (transposed)
    self_attn.kv_a_proj_with_mqa.weight  [Hckv+Dr, He]        -> weight_dkv_kr [He, Hckv+Dr]   (transposed)
    self_attn.kv_a_layernorm.weight      [Hckv]               -> gamma_ckv
    self_attn.kv_b_proj.weight           [N·(D+V), Hckv]      -> weight_uk [N, D, Hckv], w_uv [N, Hckv, V]
    self_attn.o_proj.weight              [He, N·V]            -> o_proj (logical [N·V, He])
    input_layernorm.weight, post_attention_layernorm.weight [He]
    mlp.gate.weight [E, He], mlp.gate.e_score_correction_bias [E]
    mlp.experts.{e}.{gate,up,down}_proj.weight     or   mlp.experts.gate_up_proj [E, 2I, He], mlp.experts.down_proj [E, He, I]
    mlp.shared_experts.{gate,up,down}_proj.weight ;  dense layers: mlp.{gate,up,down}_proj.weight

FP8 checkpoints (DeepSeek's released weights): a ``float8_e4m3fn`` ``<name>.weight`` comes with
``<name>.weight_scale_inv`` (fp32, one scale per 128×128 block of the [out, in] matrix); it is
dequantised to fp32 (``w · scale_inv[i//128, j//128]``) before anything else.

RoPE: DeepSeek's checkpoints (and HF with ``rope_interleave=True``, the default) keep the rope columns of
``q_b_proj`` and ``kv_a_proj_with_mqa`` as interleaved pairs.  ``ds::mla_prolog`` takes exactly that
(interleaved in, rotate-half order out, like HF ``apply_rotary_pos_emb_interleave``), so no permutation
is applied here.  A checkpoint converted for ``rope_interleave=False`` (rotate-half layout) is
re-interleaved by :func:`load_layer_weights` when ``config.rope_interleave`` is False.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from reference import quant as _qref

__all__ = ["LayerConfig", "Linear", "MLPWeights", "MoEWeights", "AttentionWeights", "LayerWeights",
           "load_layer_weights", "fp8_block_dequant", "quantize_per_channel", "smooth_factors", "weight_absmax",
           "collect_calibration", "layer_state_dict", "CALIBRATION_KEYS"]

# the activations SmoothQuant calibrates (keys of load_layer_weights' ``calibration``, from collect_calibration)
CALIBRATION_KEYS = ("attn_in", "cq", "o_in", "mlp_in", "down_in", "shared_down_in")


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """The DeepSeek-V3 hyper-parameters one decoder layer needs (HF ``DeepseekV3Config`` field names).

    ``rope_scaling`` is HF's ``rope_parameters`` / DeepSeek's ``rope_scaling`` dict
    (``rope_type``/``type`` "yarn", ``factor``, ``original_max_position_embeddings``, ``beta_fast``,
    ``beta_slow``, ``mscale``, ``mscale_all_dim``) or None for plain RoPE.
    """

    hidden_size: int = 7168
    num_attention_heads: int = 128
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    rms_norm_eps: float = 1e-6
    intermediate_size: int = 18432
    moe_intermediate_size: int = 2048
    n_routed_experts: int = 256
    n_shared_experts: int = 1
    num_experts_per_tok: int = 8
    n_group: int = 8
    topk_group: int = 4
    routed_scaling_factor: float = 2.5
    norm_topk_prob: bool = True
    first_k_dense_replace: int = 3
    hidden_act: str = "silu"
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = dataclasses.field(default_factory=lambda: {
        "rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
        "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0})
    rope_interleave: bool = True
    # the q_a / kv_a RmsNorms: HF and DeepSeek build them with their default eps 1e-6, not rms_norm_eps
    latent_norm_eps: float = 1e-6

    @classmethod
    def from_hf(cls, config: Any) -> "LayerConfig":
        """From a transformers ``DeepseekV3Config`` or a DeepSeek ``config.json`` dict.

        Raises ValueError for ``q_lora_rank`` None, and NotImplementedError naming the field for a router or
        RoPE this layer does not implement: ``scoring_func`` other than "sigmoid", ``topk_method`` other than
        "noaux_tc" (DeepSeek-V2's softmax / greedy routers), a ``rope_type`` other than default or yarn.
        Absent fields take DeepSeek-V3's values, except: ``q_lora_rank`` is required (ValueError when absent or
        None); no ``rope_parameters`` / ``rope_scaling`` means plain RoPE (``rope_scaling`` None), not
        DeepSeek-V3's YaRN; ``latent_norm_eps`` is not read (the checkpoints' kv/q latent norms use 1e-6)."""
        get = (lambda k, d=None: config.get(k, d)) if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
        for name, supported in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc")):
            v = get(name)
            if v is not None and v != supported:
                raise NotImplementedError(f"{name}={v!r}: the layer implements DeepSeek-V3's router "
                                          f"({name}={supported!r}) only")
        kw = {}
        for f in dataclasses.fields(cls):
            if f.name in ("rope_scaling", "rope_theta", "latent_norm_eps"):
                continue
            v = get(f.name)
            if v is not None:
                kw[f.name] = v
        if get("q_lora_rank") is None:
            raise ValueError("q_lora_rank is None (DeepSeek-V2-Lite style q_proj): ds::mla_prolog needs the "
                             "low-rank q path (q_a_proj/q_b_proj); not supported")
        rp = get("rope_parameters") or get("rope_scaling")
        rp = dict(rp) if rp else {}
        theta = rp.get("rope_theta", get("rope_theta", 10000.0))
        rtype = rp.get("rope_type", rp.get("type", "default"))
        if rtype not in ("default", "yarn", None):
            raise NotImplementedError(f"rope_scaling rope_type={rtype!r}: only default and yarn RoPE are implemented")
        kw["rope_theta"] = float(theta)
        kw["rope_scaling"] = None if rtype in ("default", None) else rp
        return cls(**kw)

    def is_moe(self, layer_idx: int) -> bool:
        return layer_idx >= self.first_k_dense_replace


# ----------------------------------------------------------------------------------------------
# weight containers
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Linear:
    """A projection ``y = x @ weight`` with weight logically [K, N] (K = in features).

    bf16 mode: ``weight`` bf16 [K, N] (stored as the checkpoint's [N, K] contiguous and viewed ``.t()``,
    the K-major layout ``ds::quant_matmul`` and cuBLAS prefer), ``scale``/``smooth`` None.
    a8w8 mode: ``weight`` int8 [K, N] (same K-major view), ``scale`` fp32 [N] per-channel dequant scale,
    ``smooth`` fp32 [K] or None: the activation is multiplied by it before its per-token int8 quant
    (``ds::dynamic_quant(x, smooth_scales=smooth)``); the weight rows were divided by it offline.
    """

    weight: torch.Tensor
    scale: torch.Tensor | None = None
    smooth: torch.Tensor | None = None

    @property
    def in_features(self) -> int:
        return self.weight.shape[0]

    @property
    def out_features(self) -> int:
        return self.weight.shape[1]


@dataclasses.dataclass
class MLPWeights:
    """SwiGLU MLP: ``down(silu(x@W_gate) * (x@W_up))``; ``gate_up`` [He, 2I] columns [gate ‖ up], ``down`` [I, He]."""

    gate_up: Linear
    down: Linear


@dataclasses.dataclass
class MoEWeights:
    """Routed experts + shared expert. ``gate_weight`` fp32 [E, He]; ``e_score_correction_bias`` fp32 [E]."""

    gate_weight: torch.Tensor
    e_score_correction_bias: torch.Tensor
    experts: list[MLPWeights]
    shared: MLPWeights | None


@dataclasses.dataclass
class AttentionWeights:
    """MLA weights in ``ds::mla_prolog`` layout (names follow ``torch_npu.npu_mla_prolog_v3``).

    weight_dq [He, Hcq], weight_uq_qr [Hcq, N·(D+Dr)] (per head [nope D ‖ rope Dr], rope interleaved),
    weight_uk [N, D, Hckv] bf16, weight_dkv_kr [He, Hckv+Dr] ([c_kv ‖ k_rope], rope interleaved),
    gamma_cq [Hcq], gamma_ckv [Hckv], w_uv [N, Hckv, V] bf16, o_proj: Linear [N·V, He]. The three prolog
    weights (weight_dq, weight_uq_qr, weight_dkv_kr) are bf16 in mode "bf16";
    a8w8: the three prolog weights int8 with ``dequant_scale_w_*`` fp32 [cols]; ``smooth_x`` [He] is the
    SmoothQuant factor the input RmsNorm multiplies in before quantising token_x (folded into weight_dq and
    weight_dkv_kr rows); ``smooth_scales_cq`` [Hcq] multiplies RmsNorm(cq) before its quant (folded into
    weight_uq_qr rows).
    """

    weight_dq: torch.Tensor
    weight_uq_qr: torch.Tensor
    weight_uk: torch.Tensor
    weight_dkv_kr: torch.Tensor
    gamma_cq: torch.Tensor
    gamma_ckv: torch.Tensor
    w_uv: torch.Tensor
    o_proj: Linear
    dequant_scale_w_dq: torch.Tensor | None = None
    dequant_scale_w_uq_qr: torch.Tensor | None = None
    dequant_scale_w_dkv_kr: torch.Tensor | None = None
    smooth_x: torch.Tensor | None = None
    smooth_scales_cq: torch.Tensor | None = None


@dataclasses.dataclass
class LayerWeights:
    """Everything one :class:`ops.deepseek_layer.DeepseekV3DecodeLayer` needs (built by :func:`load_layer_weights`).

    mode "bf16" | "a8w8"; config; layer_idx; input_layernorm, post_attention_layernorm [He] bf16 (RmsNorm
    weights); attn: :class:`AttentionWeights`; mlp: :class:`MoEWeights` (layer_idx ≥ first_k_dense_replace) or
    :class:`MLPWeights`."""

    mode: str
    config: LayerConfig
    layer_idx: int
    input_layernorm: torch.Tensor
    post_attention_layernorm: torch.Tensor
    attn: AttentionWeights
    mlp: MLPWeights | MoEWeights

    @property
    def is_moe(self) -> bool:
        return isinstance(self.mlp, MoEWeights)


# ----------------------------------------------------------------------------------------------
# offline quantisation helpers (thin wrappers over reference/quant.py, the canonical ones)
# ----------------------------------------------------------------------------------------------
def fp8_block_dequant(weight: torch.Tensor, scale_inv: torch.Tensor, block: int = 128) -> torch.Tensor:
    """DeepSeek FP8 block-scaled weight → fp32: ``w[..., i, j] · scale_inv[..., i // block, j // block]``.

    weight: [out, in] or [E, out, in] (transformers-5 fused experts) float8_e4m3fn (any float dtype
    accepted); scale_inv: fp32 [..., ceil(out/block), ceil(in/block)]. Returns fp32 (one rounding, of the
    fp32 product; the loader rounds to bf16 once more). Raises ValueError on a scale grid that does not
    cover the weight, a weight that is not 2-D or 3-D, or block < 1; TypeError for a block that is not an int.
    Source: DeepSeek-V3 ``inference/kernel.py::weight_dequant``. Unlike :func:`reference.quant.fp8_block_dequant`
    (2-D only, bf16 by default, which this calls per matrix), it returns fp32 and takes [E, out, in].
    """
    if weight.dim() == 3:
        if scale_inv.dim() != 3 or scale_inv.shape[0] != weight.shape[0]:
            raise ValueError(f"scale_inv shape {list(scale_inv.shape)} does not match weight {list(weight.shape)}")
        return torch.stack([_qref.fp8_block_dequant(w, s, block, out_dtype=torch.float32) for w, s in zip(weight, scale_inv)])
    return _qref.fp8_block_dequant(weight, scale_inv, block, out_dtype=torch.float32)


def quantize_per_channel(w_kn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 quantisation of a logical [K, N] weight
    (:func:`reference.quant.quantize_weight_per_channel`): (w_int8 [K, N] contiguous, scale fp32 [N]),
    ``scale = max_k |w[:, n]| / 127``, ``q = round_half_even(w / scale)`` in [−127, 127]. w_kn: any float
    dtype (computed in fp32); an all-zero column gets scale 0 and q 0. Raises ValueError unless w_kn is 2-D
    (from :func:`reference.quant.quantize_weight_per_channel`)."""
    return _qref.quantize_weight_per_channel(w_kn.float())


def smooth_factors(act_absmax: torch.Tensor, weight_absmax: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """The ``smooth_scales`` ``m`` [K] fp32 for one activation: ``m = 1 / s`` with SmoothQuant's
    ``s_j = max|X_j|^α / max|W_j|^(1−α)`` (:func:`reference.quant.smoothquant_scales`; the ds quant ops
    *multiply* the activation by ``smooth_scales``, and the weight rows are divided by ``m``).

    act_absmax: [K] per-channel max |X| over calibration tokens; weight_absmax: [K] max |W[j, :]| over every
    weight (logical [K, N]) that reads this activation (see :func:`weight_absmax`; passing the row maxima
    instead of the concatenated weights keeps 256 experts × [7168, 4096] out of memory); alpha: the migration
    strength in [0, 1]. Raises ValueError (from :func:`reference.quant.smoothquant_scales`) if the two differ in
    K or alpha is outside [0, 1].
    """
    s = _qref.smoothquant_scales(act_absmax.float(), weight_absmax.float()[:, None], alpha)
    return (1.0 / s).float()


def weight_absmax(*weights_kn: torch.Tensor) -> torch.Tensor:
    """Per input channel max |W[j, :]| [K] fp32 over logical [K, N] weights (any float dtype) that read the same
    activation. Raises ValueError if no weight is given or their K differ."""
    if not weights_kn or len({w.shape[0] for w in weights_kn}) != 1:
        raise ValueError(f"weight_absmax needs weights with one K, got shapes {[list(w.shape) for w in weights_kn]}")
    return torch.stack([w.float().abs().amax(dim=1) for w in weights_kn]).amax(dim=0)


# ----------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------
def layer_state_dict(state_dict: Mapping[str, torch.Tensor], layer_idx: int, prefix: str = "model.layers.") -> dict[str, torch.Tensor]:
    """The entries of one layer with ``{prefix}{layer_idx}.`` stripped, FP8 ``*_scale_inv`` dequantised to fp32
    (DeepSeek-V3's 128×128 block scales, as its inference/fp8_cast_bf16.py). Raises ValueError naming the entry if
    an FP8 weight has no ``*_scale_inv``."""
    p = f"{prefix}{layer_idx}."
    raw = {k[len(p):]: state_dict[k] for k in state_dict.keys() if k.startswith(p)}
    out = {}
    for k, v in raw.items():
        if k.endswith("_scale_inv"):
            continue
        sk = k + "_scale_inv"
        if sk in raw:
            try:
                v = fp8_block_dequant(v, raw[sk])
            except ValueError as e:
                raise ValueError(f"{p}{k}: {e}") from None
        elif v.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
            raise ValueError(f"{p}{k} is {v.dtype} but {p}{sk} is missing")
        out[k] = v
    return out


def _interleave_rope_rows(w_out_in: torch.Tensor, head_dim: int, rope_dim: int, heads: int) -> torch.Tensor:
    """Rotate-half → interleaved order for the rope rows of each head of an [heads·head_dim, in] weight."""
    w = w_out_in.reshape(heads, head_dim, -1).clone()
    r = w[:, head_dim - rope_dim:]
    h = rope_dim // 2
    inter = torch.empty_like(r)
    inter[:, 0::2], inter[:, 1::2] = r[:, :h], r[:, h:]
    w[:, head_dim - rope_dim:] = inter
    return w.reshape(w_out_in.shape)


def _experts(sd: dict[str, torch.Tensor], cfg: LayerConfig, name: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """[(gate [I, He], up [I, He], down [He, I])] per routed expert, from either naming scheme."""
    E = cfg.n_routed_experts
    if f"{name}.experts.gate_up_proj" in sd:                      # transformers >= 5 fused layout
        gu, dn = sd[f"{name}.experts.gate_up_proj"], sd[f"{name}.experts.down_proj"]
        if gu.shape[0] != E or dn.shape[0] != E:
            raise ValueError(f"fused experts have {gu.shape[0]} experts, config says {E}")
        inter = gu.shape[1] // 2
        return [(gu[e, :inter], gu[e, inter:], dn[e]) for e in range(E)]
    out = []
    for e in range(E):
        k = f"{name}.experts.{e}."
        try:
            out.append((sd[k + "gate_proj.weight"], sd[k + "up_proj.weight"], sd[k + "down_proj.weight"]))
        except KeyError as err:
            raise KeyError(f"expert {e}: missing {err} (neither fused nor per-expert names found)") from None
    return out


def load_layer_weights(state_dict: Mapping[str, torch.Tensor], layer_idx: int, config: LayerConfig | Any, *,
                       mode: str = "bf16", calibration: Mapping[str, torch.Tensor] | None = None,
                       alpha: float = 0.5, prefix: str = "model.layers.", device: torch.device | str | None = None
                       ) -> LayerWeights:
    """Build a :class:`LayerWeights` for layer ``layer_idx`` from a full-model state dict.

    state_dict: any mapping name → tensor (a dict, or a lazy safetensors mapping); bf16/fp32 or FP8
        block-scaled (``*_scale_inv``) entries.
    layer_idx: the decoder layer (≥ ``first_k_dense_replace``: a MoE layer, else a dense MLP).
    config: :class:`LayerConfig` or an HF ``DeepseekV3Config`` / DeepSeek config dict (through
        :meth:`LayerConfig.from_hf`, whose errors pass through).
    mode: ``"bf16"`` or ``"a8w8"``.
    calibration (a8w8 only, optional): per-channel activation absmax [K] (or raw samples [M, K]) at the
        inputs of the quantised matmuls, keys as produced by :func:`collect_calibration`:
        ``"attn_in"`` [He] (input RmsNorm output), ``"cq"`` [Hcq] (q_a_layernorm output), ``"o_in"`` [N·V],
        ``"mlp_in"`` [He] (post-attention RmsNorm output), ``"down_in"`` [I] (dense MLP), ``"shared_down_in"``
        [I_shared]; missing keys → no smoothing for that activation (keys of the other layer type, e.g.
        ``"down_in"`` for a MoE layer, are not used).
    alpha: SmoothQuant migration strength.
    prefix: the state dict's layer prefix (``"model.layers."``); device: where the returned tensors live (None:
        where the state dict's tensors are).
    Raises KeyError naming a missing tensor; ValueError for an FP8 weight without its ``*_scale_inv``;
    NotImplementedError / ValueError from :meth:`LayerConfig.from_hf`; ValueError on shape mismatches (a weight, or a calibration entry
    whose channel count is not its matmul's K), an unknown mode, a calibration key outside
    :data:`CALIBRATION_KEYS`, or calibration given with mode "bf16".
    """
    if mode not in ("bf16", "a8w8"):
        raise ValueError(f"mode must be 'bf16' or 'a8w8', got {mode!r}")
    cfg = config if isinstance(config, LayerConfig) else LayerConfig.from_hf(config)
    sd = layer_state_dict(state_dict, layer_idx, prefix)
    if not sd:
        raise KeyError(f"no tensors named {prefix}{layer_idx}.* in the state dict")
    dev = torch.device(device) if device is not None else None
    if calibration:
        if mode != "a8w8":
            raise ValueError(f"calibration applies to mode 'a8w8' only (SmoothQuant of the int8 matmuls), got mode "
                             f"{mode!r} with keys {sorted(calibration)}")
        unknown = sorted(set(calibration) - set(CALIBRATION_KEYS))
        if unknown:
            raise ValueError(f"calibration has unknown keys {unknown}; the keys are {list(CALIBRATION_KEYS)} "
                             f"(as collect_calibration produces them)")
    calib = {k: (v.float().abs().reshape(-1, v.shape[-1]).amax(0) if v.dim() > 1 else v.float().abs())
             for k, v in (calibration or {}).items()}
    if dev is not None:     # calibration collected on another device (e.g. a CPU HF layer)
        calib = {k: v.to(dev) for k, v in calib.items()}

    def get(name: str) -> torch.Tensor:
        try:
            t = sd[name]
        except KeyError:
            raise KeyError(f"missing {prefix}{layer_idx}.{name}") from None
        return t.to(dev) if dev is not None else t

    N, D, Dr, V = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    He, Hcq, Hckv = cfg.hidden_size, cfg.q_lora_rank, cfg.kv_lora_rank
    bf = torch.bfloat16

    def expect(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        if tuple(t.shape) != shape:
            raise ValueError(f"{prefix}{layer_idx}.{name} has shape {list(t.shape)}, expected {list(shape)}")
        return t

    a = "self_attn."
    q_a = expect(a + "q_a_proj.weight", get(a + "q_a_proj.weight"), (Hcq, He)).float()
    q_b = expect(a + "q_b_proj.weight", get(a + "q_b_proj.weight"), (N * (D + Dr), Hcq)).float()
    kv_a = expect(a + "kv_a_proj_with_mqa.weight", get(a + "kv_a_proj_with_mqa.weight"), (Hckv + Dr, He)).float()
    kv_b = expect(a + "kv_b_proj.weight", get(a + "kv_b_proj.weight"), (N * (D + V), Hckv)).float()
    o = expect(a + "o_proj.weight", get(a + "o_proj.weight"), (He, N * V)).float()
    if not cfg.rope_interleave:
        q_b = _interleave_rope_rows(q_b, D + Dr, Dr, N)
        kv_a = _interleave_rope_rows(kv_a, Hckv + Dr, Dr, 1)
    kvb = kv_b.reshape(N, D + V, Hckv)
    weight_uk = kvb[:, :D].to(bf).contiguous()                    # [N, D, Hckv]
    w_uv = kvb[:, D:].transpose(1, 2).to(bf).contiguous()         # [N, Hckv, V]
    gamma_cq = expect(a + "q_a_layernorm.weight", get(a + "q_a_layernorm.weight"), (Hcq,)).to(bf)
    gamma_ckv = expect(a + "kv_a_layernorm.weight", get(a + "kv_a_layernorm.weight"), (Hckv,)).to(bf)
    ln_in = expect("input_layernorm.weight", get("input_layernorm.weight"), (He,)).to(bf)
    ln_post = expect("post_attention_layernorm.weight", get("post_attention_layernorm.weight"), (He,)).to(bf)

    def linear(w_out_in: torch.Tensor, m: torch.Tensor | None = None) -> Linear:
        """w_out_in [N, K] (checkpoint layout) → Linear with logical [K, N] weight (K-major view)."""
        if mode == "bf16":
            return Linear(w_out_in.to(bf).contiguous().t())
        w_kn = w_out_in.float().t()
        if m is not None:
            w_kn = w_kn / m[:, None]
        q, s = quantize_per_channel(w_kn)
        return Linear(_qref.pack_weight(q, "cuda"), s, m)          # K-major view of a contiguous [N, K]

    def smooth(key: str, *w_out_in: torch.Tensor) -> torch.Tensor | None:
        if mode != "a8w8" or key not in calib:
            return None
        K = w_out_in[0].shape[1]
        if calib[key].shape != (K,):
            raise ValueError(f"calibration[{key!r}] must have {K} channels (the input width of the matmul it "
                             f"smooths), got shape {list(calibration[key].shape)}")
        return smooth_factors(calib[key], weight_absmax(*(w.t() for w in w_out_in)), alpha)

    if mode == "bf16":
        attn = AttentionWeights(
            weight_dq=q_a.t().to(bf).contiguous(), weight_uq_qr=q_b.t().to(bf).contiguous(), weight_uk=weight_uk,
            weight_dkv_kr=kv_a.t().to(bf).contiguous(), gamma_cq=gamma_cq, gamma_ckv=gamma_ckv, w_uv=w_uv,
            o_proj=linear(o))
    else:
        w_dq, w_dkv, w_uq = q_a.t(), kv_a.t(), q_b.t()            # [He, Hcq], [He, Hckv+Dr], [Hcq, N·(D+Dr)]
        m_x = smooth("attn_in", q_a, kv_a)                         # token_x feeds both W_DQ and W_DKV_KR
        m_cq = smooth("cq", q_b)
        if m_x is not None:
            w_dq, w_dkv = w_dq / m_x[:, None], w_dkv / m_x[:, None]
        if m_cq is not None:
            w_uq = w_uq / m_cq[:, None]
        (q_dq, s_dq), (q_uq, s_uq), (q_dkv, s_dkv) = (quantize_per_channel(w) for w in (w_dq, w_uq, w_dkv))
        attn = AttentionWeights(
            weight_dq=q_dq.contiguous(), weight_uq_qr=q_uq.contiguous(), weight_uk=weight_uk,
            weight_dkv_kr=q_dkv.contiguous(), gamma_cq=gamma_cq, gamma_ckv=gamma_ckv, w_uv=w_uv,
            o_proj=linear(o, smooth("o_in", o)), dequant_scale_w_dq=s_dq, dequant_scale_w_uq_qr=s_uq,
            dequant_scale_w_dkv_kr=s_dkv, smooth_x=m_x, smooth_scales_cq=m_cq)

    def mlp_from(gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, m_in: torch.Tensor | None,
                 m_down: torch.Tensor | None) -> MLPWeights:
        gu = torch.cat([gate.float(), up.float()], dim=0)          # [2I, He]
        return MLPWeights(gate_up=linear(gu, m_in), down=linear(down.float(), m_down))

    if cfg.is_moe(layer_idx):
        E, I = cfg.n_routed_experts, cfg.moe_intermediate_size
        gw = expect("mlp.gate.weight", get("mlp.gate.weight"), (E, He)).float()
        bias_key = "mlp.gate.e_score_correction_bias"
        bias = expect(bias_key, get(bias_key), (E,)).float()      # noaux_tc routing needs it: never a silent 0
        ex = [tuple(t.to(dev) if dev is not None else t for t in trip) for trip in _experts(sd, cfg, "mlp")]
        for e, (g, u, d) in enumerate(ex):
            expect(f"mlp.experts.{e}.gate_proj.weight", g, (I, He))
            expect(f"mlp.experts.{e}.up_proj.weight", u, (I, He))
            expect(f"mlp.experts.{e}.down_proj.weight", d, (He, I))
        shared_raw = None
        if cfg.n_shared_experts > 0:      # every projection required (a missing one raises KeyError naming it)
            Is = I * cfg.n_shared_experts
            shared_raw = tuple(expect(f"mlp.shared_experts.{n}_proj.weight", get(f"mlp.shared_experts.{n}_proj.weight"),
                                      (He, Is) if n == "down" else (Is, He)) for n in ("gate", "up", "down"))
        # one SmoothQuant factor for the post-attention activation: every expert and the shared expert read it
        m_in = None
        if mode == "a8w8" and "mlp_in" in calib:
            wmax = torch.zeros(He)
            for g, u, _ in ex + ([shared_raw] if shared_raw is not None else []):
                wmax = torch.maximum(wmax.to(g.device), weight_absmax(g.float().t(), u.float().t()))
            m_in = smooth_factors(calib["mlp_in"], wmax, alpha)
        experts = [mlp_from(g, u, d, m_in, None) for g, u, d in ex]
        shared = None
        if shared_raw is not None:
            shared = mlp_from(*shared_raw, m_in, smooth("shared_down_in", shared_raw[2]))
        mlp: MLPWeights | MoEWeights = MoEWeights(gw, bias, experts, shared)
    else:
        Id = cfg.intermediate_size
        g, u, d = (expect(f"mlp.{n}_proj.weight", get(f"mlp.{n}_proj.weight"), (He, Id) if n == "down" else (Id, He))
                   for n in ("gate", "up", "down"))
        mlp = mlp_from(g, u, d, smooth("mlp_in", g, u), smooth("down_in", d))
    return LayerWeights(mode, cfg, layer_idx, ln_in, ln_post, attn, mlp)


# ----------------------------------------------------------------------------------------------
# calibration (SmoothQuant): per-channel activation absmax at the quantised matmuls' inputs
# ----------------------------------------------------------------------------------------------
def collect_calibration(hf_layer: torch.nn.Module, run: Any) -> dict[str, torch.Tensor]:
    """Per-channel max |activation| at the quantised matmul inputs of an HF ``DeepseekV3DecoderLayer``.

    hf_layer: the HF layer module (any object with ``self_attn.q_a_proj``, ``self_attn.q_b_proj``,
    ``self_attn.o_proj``, ``mlp`` [, ``mlp.down_proj`` | ``mlp.shared_experts.down_proj``] submodules).
    run: a callable that runs calibration data through ``hf_layer``.
    Returns keys ``attn_in``, ``cq``, ``o_in``, ``mlp_in`` and ``down_in`` (dense) or ``shared_down_in``
    (MoE) as fp32 [K], K = the module's input width (He, q_lora_rank, N·v_head_dim, He, intermediate size),
    each the max of |x| over every token ``run`` fed (forward pre-hooks on those modules, removed afterwards);
    a module that never ran has no key. Feed it to :func:`load_layer_weights` (``calibration=``).
    Mirrors SmoothQuant's ``get_act_scales`` (mit-han-lab/smoothquant, calibration.py; Xiao et al. 2023):
    max |X_j| per input channel, accumulated across calls with ``torch.maximum``.
    Raises nothing of its own: AttributeError if hf_layer lacks one of those submodules (e.g. an HF layer with
    ``q_lora_rank`` None has no ``q_a_proj``); whatever ``run`` raises propagates (the hooks are removed first).
    """
    acc: dict[str, torch.Tensor] = {}

    def hook(key):
        def fn(_mod, args):
            if args[0].numel() == 0:        # no tokens, or a zero-width module (n_shared_experts = 0): nothing seen
                return
            x = args[0].detach().float().abs().reshape(-1, args[0].shape[-1]).amax(0)
            acc[key] = torch.maximum(acc[key], x) if key in acc else x
        return fn

    sa = hf_layer.self_attn
    mods = {"attn_in": sa.q_a_proj, "cq": sa.q_b_proj, "o_in": sa.o_proj, "mlp_in": hf_layer.mlp}
    if hasattr(hf_layer.mlp, "shared_experts"):
        mods["shared_down_in"] = hf_layer.mlp.shared_experts.down_proj
    elif hasattr(hf_layer.mlp, "down_proj"):
        mods["down_in"] = hf_layer.mlp.down_proj
    handles = [m.register_forward_pre_hook(hook(k)) for k, m in mods.items()]
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return acc
