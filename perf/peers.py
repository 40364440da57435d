"""Optional peer implementations timed next to ours, only when importable (never required).

A peer is ``(name, build)`` where ``build(inputs) -> fn`` prepares a zero-argument callable returning the op's outputs
in our layout (or raises with the reason it cannot). Planning/host work happens in ``build``, outside the timing.

* ``flashinfer-mla`` for ``amla`` on CUDA: ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` (split nope/rope caches,
  like ours). Shapes: q [B·S_q, N, 512|64], caches [num_blocks, block_size, 512|64].
"""
from __future__ import annotations

from typing import Callable

import torch


def _flashinfer_mla(inputs: dict) -> Callable[[], tuple]:
    import flashinfer.mla as fim  # noqa: F401 - ImportError = unavailable
    q_nope, q_rope = inputs["q_nope"], inputs["q_rope"]
    kv, kr = inputs["kv_cache"], inputs["kr_cache"]
    bt, seq_lens = inputs["block_table"], inputs["seq_lens"]
    scale = float(inputs["softmax_scale"])
    causal = bool(inputs.get("causal", True))
    B, S_q, N, _ = q_nope.shape
    bs = kv.shape[1]
    dev = q_nope.device
    lens = seq_lens.to(torch.int64).cpu()
    pages = [(int(L) + bs - 1) // bs for L in lens]
    kv_indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    kv_indices = torch.cat([bt[b, :p].to(torch.int32) for b, p in enumerate(pages)]) if sum(pages) else \
        torch.zeros(0, dtype=torch.int32, device=dev)
    qo_indptr = torch.arange(0, (B + 1) * S_q, S_q, dtype=torch.int32, device=dev)
    ws = torch.empty(128 << 20, dtype=torch.int8, device=dev)
    w = fim.BatchMLAPagedAttentionWrapper(ws, backend="auto")
    w.plan(qo_indptr, kv_indptr, kv_indices, seq_lens.to(torch.int32), N, 512, 64, bs, causal, scale,
           q_nope.dtype, kv.dtype)
    qn = q_nope.reshape(B * S_q, N, 512)
    qr = q_rope.reshape(B * S_q, N, 64)
    ckv, kpe = kv.reshape(kv.shape[0], bs, 512), kr.reshape(kr.shape[0], bs, 64)

    def run():
        out, lse = w.run(qn, qr, ckv, kpe, return_lse=True)
        return out.reshape(B, S_q, N, 512), lse.reshape(B, S_q, N)
    return run


PEERS: dict[str, list[tuple[str, tuple[str, ...], Callable]]] = {
    # op name -> [(peer name, device types, build)]
    "amla": [("flashinfer-mla", ("cuda",), _flashinfer_mla)],
}


def peers_for(op_name: str, device_type: str) -> list[tuple[str, Callable]]:
    """Peers of ``op_name`` that could run on ``device_type`` and whose package imports."""
    import importlib.util
    out = []
    for name, devs, build in PEERS.get(op_name, []):
        if device_type not in devs:
            continue
        pkg = name.split("-")[0]
        if importlib.util.find_spec(pkg) is None:
            continue
        out.append((name, build))
    return out
