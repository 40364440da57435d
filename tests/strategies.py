"""Input builders and Hypothesis strategies shared by several test suites (CPU and GPU).

Each op's own random inputs come from its ``OpSpec.make_inputs`` (``ops.SPECS[name]``); what lives here is what
more than one suite needs beyond that: the same logical AMLA keys paged two ways, int8 GEMM operands, and the
Hypothesis strategies of the AMLA paging edges and of valid grouped top-k layouts.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st


def paged_amla_inputs(B: int, S_q: int, N: int, lens, block_size: int, dtype: torch.dtype, device, gen: torch.Generator,
                      *, unused: int = -1, extra_blocks: int = 2, spare: int = 3, Dc: int = 512, Dr: int = 64,
                      c_kv: torch.Tensor | None = None, k_rope: torch.Tensor | None = None, q=None):
    """Random AMLA queries and a paged cache holding per-request keys, pages in random order.

    lens: B key counts (0 allowed); ``gen``: a generator on ``device``. Every unused slot of a last page and every
    spare page is NaN; unused block_table entries hold ``unused`` (−1, or a huge id: the kernels must not read
    them). ``c_kv`` / ``k_rope`` [B, Lmax, Dc | Dr] and ``q`` = (q_nope, q_rope) may be given to page the same
    logical data differently (page order, block size).
    Returns ((q_nope [B, S_q, N, Dc], q_rope [B, S_q, N, Dr], kv_cache [num_blocks, block_size, 1, Dc],
    kr_cache [num_blocks, block_size, 1, Dr], block_table [B, max_blocks] int32, seq_lens [B] int32),
    (c_kv, k_rope)): the positional ``ds::amla`` tensors and the logical keys.
    """
    lens = [int(x) for x in lens]
    Lmax = max(lens + [1])
    if c_kv is None:
        c_kv = torch.randn(B, Lmax, Dc, generator=gen, device=device).to(dtype)
        k_rope = torch.randn(B, Lmax, Dr, generator=gen, device=device).to(dtype)
    if q is None:
        q = (torch.randn(B, S_q, N, Dc, generator=gen, device=device).to(dtype),
             torch.randn(B, S_q, N, Dr, generator=gen, device=device).to(dtype))
    per = [-(-L // block_size) for L in lens]
    nb = sum(per) + spare
    order = torch.randperm(nb, generator=gen, device=device)
    kv = torch.full((nb, block_size, 1, Dc), float("nan"), dtype=dtype, device=device)
    kr = torch.full((nb, block_size, 1, Dr), float("nan"), dtype=dtype, device=device)
    bt = torch.full((B, max(per + [0]) + extra_blocks), unused, dtype=torch.int32, device=device)
    start = 0
    for b, (L, n) in enumerate(zip(lens, per)):
        if n == 0:
            continue
        pages = order[start:start + n]
        start += n
        bt[b, :n] = pages.to(torch.int32)
        for cache, keys in ((kv, c_kv), (kr, k_rope)):
            full = torch.full((n * block_size, keys.shape[-1]), float("nan"), dtype=dtype, device=device)
            full[:L] = keys[b, :L]
            cache[pages] = full.view(n, block_size, 1, keys.shape[-1])
    sl = torch.tensor(lens, dtype=torch.int32, device=device)
    return (q[0], q[1], kv, kr, bt, sl), (c_kv, k_rope)


def int8_weight(K: int, N: int, gen: torch.Generator, device="cpu"):
    """A random ``quant_matmul`` weight: weight_int8 [K, N] (row-major) int8 in [−127, 127] and its per-channel
    scale weight_scale [N] fp32, sized so outputs are O(1). ``gen`` on ``device``."""
    w = torch.randint(-127, 128, (K, N), generator=gen, device=device, dtype=torch.int8)
    return w, (0.5 + torch.rand(N, generator=gen, device=device)) / (127.0 * max(K, 1) ** 0.5)


def int8_activations(M: int, K: int, gen: torch.Generator, device="cpu"):
    """Random ``quant_matmul`` activations: x_int8 [M, K] int8 in [−127, 127] and the per-token scale x_scale [M]
    fp32. ``gen`` on ``device``."""
    x = torch.randint(-127, 128, (M, K), generator=gen, device=device, dtype=torch.int8)
    return x, (0.5 + torch.rand(M, generator=gen, device=device)) / 127.0


def int8_matmul_operands(M: int, K: int, N: int, gen: torch.Generator, device="cpu"):
    """(x_int8 [M, K], weight_int8 [K, N], weight_scale [N], x_scale [M]): :func:`int8_activations` and
    :func:`int8_weight`."""
    x, xs = int8_activations(M, K, gen, device)
    w, ws = int8_weight(K, N, gen, device)
    return x, w, ws, xs


def amla_seq_lens(block_size: int, batch: int, *, max_len: int = 300):
    """Strategy: ``batch`` per-request key counts weighted towards the edges of the paging: 0, 1–4, one page ± 1
    key (``block_size`` − 1, ``block_size``, ``block_size`` + 1), else anything up to ``max_len``."""
    one = st.one_of(st.just(0), st.integers(1, 4), st.sampled_from([block_size - 1, block_size, block_size + 1]),
                    st.integers(0, max_len))
    return st.lists(one, min_size=batch, max_size=batch)


@st.composite
def gating_groups(draw, *, group_counts=(1, 2, 4, 8), experts_per_group=st.sampled_from([2, 3, 8, 32]),
                  max_k: int = 16):
    """Strategy: a valid grouped top-k routing layout for ``moe_gating_top_k``: dict(E, group_count, k_group, k)
    with E = group_count · per-group experts, 1 ≤ k_group ≤ group_count, 1 ≤ k ≤ min(k_group · per, max_k)."""
    group_count = draw(st.sampled_from(list(group_counts)))
    per = draw(experts_per_group)
    k_group = draw(st.integers(1, group_count))
    return dict(E=group_count * per, group_count=group_count, k_group=k_group,
                k=draw(st.integers(1, min(k_group * per, max_k))))
