"""Diagnose the perf report's kv_cache mismatch for mla_prolog t128_n128_bf16 (Triton vs reference on CUDA)."""
import sys, os
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch, ops
from tolerances import cos_diff
spec = ops.SPECS["mla_prolog"]
NAMES = ("token_x", "weight_dq", "weight_uq_qr", "weight_uk", "weight_dkv_kr", "rmsnorm_gamma_cq", "rmsnorm_gamma_ckv",
         "rope_sin", "rope_cos", "kv_cache", "kr_cache")
for name in ("t128_n128_bf16", "t32_n128_bf16", "t1_n128_bf16"):
    inp = spec.make_inputs(spec.shapes[name], dtype=torch.bfloat16, device="cuda", generator=torch.Generator().manual_seed(0))
    res = {}
    for b, dev in (("reference", "cuda"), ("triton", "cuda"), ("reference", "cpu")):
        a = {k: (v.clone().to(dev) if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
        with ops.backend(b):
            out = torch.ops.ds.mla_prolog(*[a[k] for k in NAMES], **{k: v for k, v in a.items() if k not in NAMES})
        res[(b, dev)] = [o.cpu() for o in out] + [a["kv_cache"].cpu(), a["kr_cache"].cpu()]
    idx = inp["cache_index"].cpu()
    print(name, "written", int((idx >= 0).sum()), "of", idx.numel(), "unique", int(idx[idx >= 0].unique().numel()))
    for (b, dev) in (("triton", "cuda"), ("reference", "cuda")):
        for i, nm in enumerate(("query", "query_rope", "dq", "kv_cache", "kr_cache")):
            x, y = res[(b, dev)][i], res[("reference", "cpu")][i]
            if x.numel() == 0:
                continue
            xf, yf = x.float(), y.float()
            f = torch.isfinite(xf) & torch.isfinite(yf)
            nan_eq = torch.equal(torch.isnan(xf), torch.isnan(yf))
            d = (xf - yf).abs().nan_to_num(0)
            rows = int((d.reshape(d.shape[0] * (d.shape[1] if d.dim() > 3 else 1), -1).amax(-1) > 0).sum()) if d.dim() >= 2 else -1
            print(f"  {b}/{dev} vs reference/cpu {nm}: cos {cos_diff(xf[f], yf[f]):.2e} maxerr {d.max().item():.3e} nan-eq {nan_eq} rows-differ {rows}")
