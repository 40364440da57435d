"""DeepSeek-V3 "noaux_tc" MoE routing: the golden semantics of ``ds::moe_gating_top_k``.

Mirrors ``torch_npu.npu_moe_gating_top_k`` / ``aclnnMoeGatingTopK`` (CANN ops-transformer
``moe/moe_gating_top_k``: doc formula and ``tests/assets/golden.py``) and the
Hugging Face ``DeepseekV3TopkRouter`` (sigmoid, ``e_score_correction_bias``, top-2-sum group score,
``norm_topk_prob``, ``routed_scaling_factor``). docs/architecture.md; docs/ops/moe_gating.md.

Everything is fp32 (bias too, even for bf16 logits: casting a fp32 correction bias to bf16 flips the
chosen experts, sglang PR #37133). Selection is deterministic: ties go to the lower group, then the
lower expert index (stable sorts, never ``torch.topk``, whose tie order is unspecified).
"""
from __future__ import annotations

import torch

_NEG_INF = float("-inf")


def _select_key(v: torch.Tensor) -> torch.Tensor:
    """Selection key: NaN ranks lowest (as −inf)."""
    return torch.where(torch.isnan(v), torch.full_like(v, _NEG_INF), v)


def _stable_desc(key: torch.Tensor) -> torch.Tensor:
    """Indices sorting ``key`` (no NaN) descending along the last axis; equal keys keep index order."""
    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def moe_gating_top_k(x: torch.Tensor, k: int, *, bias: torch.Tensor | None = None, k_group: int = 1, group_count: int = 1,
                     group_select_mode: int = 0, renorm: int = 0, norm_type: int = 0, out_flag: bool = False,
                     routed_scaling_factor: float = 1.0, eps: float = 1e-20
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group-limited top-k expert selection with bias-corrected choice and unbiased, renormalised weights.

    Parameters
    ----------
    x: Tensor[(num_tokens T, num_experts E)], float32 / bfloat16 / float16: router logits.
    k: experts per token (DeepSeek-V3: 8); 1 ≤ k ≤ k_group · E / group_count.
    bias: Tensor[(E,)], float32 (x's dtype accepted, upcast), or None: the per-expert correction bias
        (HF ``e_score_correction_bias``). It only affects *which* experts are chosen, never the weights.
    k_group: groups kept per token (DeepSeek-V3 topk_group: 4); 1 ≤ k_group ≤ group_count.
    group_count: number of contiguous expert groups (n_group: 8); E % group_count == 0.
    group_select_mode: 0 = group score is the group's max, 1 = sum of its top-2 (DeepSeek).
    renorm: softmax only — 1 divides the k weights by their sum (+eps), 0 leaves them. Ignored for sigmoid.
    norm_type: 0 = softmax (default, as torch_npu), 1 = sigmoid (DeepSeek-V3).
    out_flag: accepted for torch_npu compatibility; norm_out is always filled (see Returns).
    routed_scaling_factor: multiplies the final weights (DeepSeek-V3: 2.5), applied exactly once.
    eps: added to the weight sum before dividing (1e-20).

    Math (fp32)::

        s   = sigmoid(x) | softmax(x, -1)            # "normOut"
        b   = s + bias                               # choice scores (bias fp32)
        g   = max(b_group) | top1(b_group)+top2(b_group)   per contiguous group of E/group_count
        keep the k_group best groups (ties → lower group); b of every other group → −inf (never 0)
        idx = the k best b over kept groups (ties → lower expert id), ordered by descending b
        w   = s[idx]                                 # unbiased
        w   = w / (Σ w + eps)                        # sigmoid always; softmax only if renorm == 1
        y   = w · routed_scaling_factor

    Non-finite inputs (cases.md G4): a NaN choice score (b or group score) ranks as −inf, and a kept
    group's experts always rank above a dropped group's, so every row still yields k distinct
    in-range ids (all from kept groups). A NaN score s[idx] contributes weight 0, and a zero weight sum
    gives weights 0 (w / eps, or w / 1 when eps = 0), so y is always finite (given a finite
    routed_scaling_factor). +inf logits are fine for sigmoid (s = 1); for softmax they make the row's s NaN,
    hence weights 0.

    Returns
    -------
    y: Tensor[(T, k)], x.dtype (computed fp32, rounded once, RINT), the routing weights in idx order.
    expert_idx: Tensor[(T, k)], int32, expert ids in [0, E), distinct per row, by descending choice score.
    norm_out: Tensor[(T, E)], float32, the normalised scores s (unbiased; NaN where x's row makes them
        NaN). Always written — torch_npu fills it only when out_flag is True and leaves it
        uninitialised otherwise; we always fill it so the op is deterministic.

    T = 0 gives empty outputs.

    Raises (checked by the registered op ``ds::moe_gating_top_k``, ops/moe_gating.py; this reference
    trusts its inputs): TypeError if x is not a float tensor, an int attribute is not an int (a bool
    included), out_flag is not a bool, bias is neither fp32 nor x's dtype, or routed_scaling_factor / eps is
    not a real number; ValueError if x is not 2-D or E = 0, group_count does not divide E, k_group is outside
    [1, group_count], k outside [1, k_group·E/group_count], group_select_mode / renorm / norm_type outside
    {0, 1}, mode 1 with group_count > 1 and < 2 experts per group, bias is not [E] or not on x's device,
    routed_scaling_factor / eps not finite, or eps < 0.
    """
    T, E = x.shape
    xf = x.float()
    s = torch.sigmoid(xf) if norm_type == 1 else torch.softmax(xf, dim=-1)
    b = s + bias.float() if bias is not None else s
    key = _select_key(b)

    if group_count > 1:
        G, per = group_count, E // group_count
        kg = key.reshape(T, G, per)
        if group_select_mode == 1:
            gscore = kg.sort(dim=-1, descending=True).values[..., :2].sum(dim=-1)
        else:
            gscore = kg.amax(dim=-1)
        gscore = _select_key(gscore)                      # +inf + −inf = NaN → lowest
        gorder = _stable_desc(gscore)[:, :k_group]
        kept = torch.zeros(T, G, dtype=torch.bool, device=x.device)
        kept.scatter_(1, gorder, True)
        kept = kept[:, :, None].expand(T, G, per).reshape(T, E)
        key = torch.where(kept, key, torch.full_like(key, _NEG_INF))
        # lexicographic (kept desc, key desc, index asc): stable sort by key, then stably by kept
        p1 = _stable_desc(key)
        p2 = _stable_desc(kept.gather(1, p1).to(torch.int32))
        order = p1.gather(1, p2)
    else:
        order = _stable_desc(key)
    idx = order[:, :k]

    w = s.gather(1, idx)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    if norm_type == 1 or renorm == 1:
        den = w.sum(dim=-1, keepdim=True) + eps
        w = w / torch.where(den == 0, torch.ones_like(den), den)    # eps = 0 and a zero sum: weights 0, not 0/0
    y = w * routed_scaling_factor
    # contiguous outputs whatever x's strides, as the fake impl and the kernel allocate them
    return y.to(x.dtype).contiguous(), idx.to(torch.int32).contiguous(), s.contiguous()
