import torch, ops, sys, os
from tests.mla_inputs import mla_small, clone_inputs, bits
from ops.mla_prolog import mla_prolog
BK=sys.argv[1]
for mode in ("bf16","a8w8_c8"):
    inp=mla_small(mode, dtype=torch.float16, T=6, N=2, num_blocks=2)
    a=clone_inputs(inp); b=clone_inputs(inp)
    for bad in (10**6, 32, 2**62):
        a=clone_inputs(inp); b=clone_inputs(inp)
        ci=a['cache_index'].clone(); ci[2]=bad; a['cache_index']=ci
        cb=ci.clone(); cb[2]=-1; b['cache_index']=cb
        os.environ["DS_OPS_CHECKS"]="0"
        with ops.backend(BK): oa=mla_prolog(**a)
        del os.environ["DS_OPS_CHECKS"]
        with ops.backend(BK): ob=mla_prolog(**b)
        print(BK, mode, bad, "caches same as -1:", torch.equal(bits(a['kv_cache']),bits(b['kv_cache'])), torch.equal(bits(a['kr_cache']),bits(b['kr_cache'])),
              "outputs same:", all(torch.equal(bits(x),bits(y)) for x,y in zip(oa,ob)))
    # 3-D token_x
    try:
        i3=mla_small(mode, dtype=torch.float16, B=2, S=3, N=2, num_blocks=2)
        c=clone_inputs(i3)
        with ops.backend(BK): o3=mla_prolog(**i3)
        with ops.backend("reference"): r3=mla_prolog(**c)
        print(BK, mode, "3d shapes", [tuple(x.shape) for x in o3], "maxdiff", max((x.float()-y.float()).abs().max().item() for x,y in zip(o3,r3) if x.numel()))
    except Exception as e: print(BK, mode, "3d", type(e).__name__, e)
