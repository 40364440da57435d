"""Pure-PyTorch references for the ds ops: fp32 math, the golden semantics every kernel is tested against.

Modules pair with ``ops/``: ``amla``, ``mla_prolog``, ``quant``, ``moe_gating``; ``deepseek`` holds the
helpers they share (RmsNorm, the Ascend/HF RoPE convention, rounding).
"""
