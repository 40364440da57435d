"""ds-ops: fused DeepSeek-V3/R1 inference ops registered as ``torch.ops.ds.*``.

``import ops`` registers every op (needs only torch: no triton, torch_npu or Ascend C library):

* ``ds::amla`` — MLA decode attention over a paged latent cache, AMLA rescaling (ops/amla.py)
* ``ds::mla_prolog`` — fused MLA pre-attention, mirrors ``torch_npu.npu_mla_prolog_v3`` (ops/mla_prolog.py)
* ``ds::dynamic_quant``, ``ds::rms_norm_dynamic_quant``, ``ds::quant_matmul`` — SmoothQuant W8A8 (ops/quant.py)
* ``ds::moe_gating_top_k`` — DeepSeek noaux_tc routing, mirrors ``torch_npu.npu_moe_gating_top_k`` (ops/moe_gating.py)

Backends: ``with ops.backend("reference" | "triton" | "ascendc" | "auto"):`` or ``DS_OPS_BACKEND``.
Batch-invariant decode: ``with ops.batch_invariant():`` or ``DS_OPS_BATCH_INVARIANT=1`` (docs/ops/amla.md).
"""
from ._library import SPECS, BACKENDS, BackendUnavailable, OpSpec, backend, current_backend, checks_enabled  # noqa: F401
from ._library import batch_invariant, batch_invariant_enabled  # noqa: F401
from . import amla, mla_prolog, quant, moe_gating  # noqa: F401,E402  (registers the ops)


__all__ = ["SPECS", "BACKENDS", "BackendUnavailable", "OpSpec", "backend", "current_backend", "checks_enabled",
           "batch_invariant", "batch_invariant_enabled",
           "amla", "mla_prolog", "quant", "moe_gating"]
