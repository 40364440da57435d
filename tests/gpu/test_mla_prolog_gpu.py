"""The Triton ``ds::mla_prolog`` kernels on CUDA at the DeepSeek-V3 shapes (``pytest -m gpu``).

T ∈ {1, 32, 128} tokens, N = 128 heads, He 7168, Hcq 1536, bf16 and A8W8, weights packed for CUDA: query and
query_rope within the bf16 tolerance of the reference on the same GPU inputs, and the cache rows written
(cache_index ≥ 0) likewise; cache rows not written keep their bytes. The smaller shapes, every mode, the field
cases P1–P5 and CUDA-graph capture are the ``gpu`` parameters of tests/test_mla_prolog_triton.py.
"""
from __future__ import annotations

import pytest
import torch

import ops.mla_prolog as MP
import ops.triton.mla_prolog as K
from reference import mla_prolog as R
from tests.tolerances import assert_close

pytestmark = pytest.mark.gpu


def _inputs(mode: str, T: int, N: int = 128, seed: int = 0) -> dict:
    shape = dict(MP.SPEC.shapes.get(f"t{T}_n{N}_{mode}") or dict(T=T, N=N, He=7168, Hcq=1536, Hckv=512, D=128,
                                                                  Dr=64, block_size=128, mode=mode))
    shape.update(cache_fill="random")
    inp = MP.make_inputs(shape, dtype=torch.bfloat16, device="cuda", generator=torch.Generator().manual_seed(seed))
    return K.pack_weights(inp, "cuda")


@pytest.mark.parametrize("T", [1, 32, 128])
@pytest.mark.parametrize("mode", ["bf16", "a8w8"])
def test_deepseek_shapes_match_the_reference(mode, T):
    inp = _inputs(mode, T)
    a = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    b = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    ra = R.mla_prolog(**a)
    rb = K.mla_prolog(**b)
    torch.cuda.synchronize()
    assert_close(rb[0], ra[0], "bf16", name="query")
    assert_close(rb[1], ra[1], "bf16", name="query_rope")
    idx = inp["cache_index"].reshape(-1)
    w = idx[idx >= 0]
    for cache, D in (("kv_cache", 512), ("kr_cache", 64)):
        assert_close(b[cache].reshape(-1, D)[w], a[cache].reshape(-1, D)[w], "bf16", name=f"{cache} rows written")
        keep = torch.ones(b[cache].reshape(-1, D).shape[0], dtype=torch.bool, device="cuda")
        keep[w] = False
        got, was = b[cache].reshape(-1, D)[keep], inp[cache].reshape(-1, D)[keep]
        assert torch.equal(got.view(torch.uint8), was.view(torch.uint8)), f"{cache}: a row not in cache_index changed"
