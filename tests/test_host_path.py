"""The eager host path of the Triton launchers and of DsOp dispatch: memoised launch plans are keyed correctly.

The launchers memoise everything of a launch that depends only on shapes / dtypes / flags / config table /
core count (``ops.triton._common.clear_caches`` forgets them). These tests check that a memoised plan is
never reused for a different shape, device (config table, SM count), dtype, mode or stride: every launch a
warm cache produces equals the launch the same call produces with the caches cleared, and changing any of those
inputs changes the launch where it should. Kernel launches are replaced by recorders (no kernel runs), so the
file is fast. Also: Triton-equivalent host helpers, public plan functions return fresh dicts, and
``DsOp._unit_stride_vectors`` / ``check_tensor`` keep their semantics.
"""
from __future__ import annotations

import pytest
import torch

from ops import _library as L
from ops.triton._common import clear_caches
from tests.conftest import record_launches as _record, requires_triton

pytestmark = requires_triton


# ----------------------------------------------------------------------------------------------
# launch recorders
# ----------------------------------------------------------------------------------------------
def _clear(*caches):
    """Each of ``caches``: a launcher module (its memoised plans are forgotten) or a function that forgets them."""
    for c in caches:
        assert c() is None if callable(c) else clear_caches(c) > 0, c


def _warm_equals_cold(calls, log, caches):
    """Each call's launches with warm caches (all calls run twice, in order) == with the launcher modules'
    caches cleared."""
    cold = []
    for c in calls:
        _clear(*caches)
        log.clear()
        c()
        cold.append(list(log))
    _clear(*caches)
    for _ in range(2):
        warm = []
        for c in calls:
            log.clear()
            c()
            warm.append(list(log))
    for i, (w, k) in enumerate(zip(warm, cold)):
        assert w == k, f"call {i}: warm-cache launches differ from cold-cache launches"
    return cold


# ----------------------------------------------------------------------------------------------
# host helpers equal Triton's
# ----------------------------------------------------------------------------------------------
def test_cdiv_and_next_power_of_2_match_triton():
    import triton
    from ops.triton._common import cdiv, next_power_of_2
    ns = list(range(-40, 4200)) + [2 ** k + d for k in range(12, 40) for d in (-1, 0, 1)]
    assert [next_power_of_2(n) for n in ns] == [triton.next_power_of_2(n) for n in ns]
    for y in (1, 2, 3, 16, 64, 100, 128, 256):
        assert [cdiv(x, y) for x in range(-300, 5000, 7)] == [triton.cdiv(x, y) for x in range(-300, 5000, 7)]


# ----------------------------------------------------------------------------------------------
# mla_prolog
# ----------------------------------------------------------------------------------------------
def _mla_inputs(mode="bf16", dtype=torch.float16, T=6, N=2, He=64, Hcq=96, seed=0):
    from ops.mla_prolog import make_inputs
    return make_inputs(dict(T=T, N=N, He=He, Hcq=Hcq, block_size=16, mode=mode), dtype=dtype,
                       generator=torch.Generator().manual_seed(seed))


def test_mla_prolog_cached_launches_keyed_by_shape_dtype_mode_table_cores_strides(monkeypatch):
    from ops.triton import mla_prolog as K
    log = _record(monkeypatch, K, ("_down_kernel", "_row_kernel", "_query_kernel"))
    cores = {"n": 132}   # stands in for the device's SM count
    base = _mla_inputs()
    strided = dict(base)
    strided["token_x"] = torch.cat([base["token_x"], base["token_x"]], dim=1)[:, :64]   # row stride 128
    variants = {
        "base": base,
        "T=40": _mla_inputs(T=40),
        "N=3": _mla_inputs(N=3),
        "fp32": _mla_inputs(dtype=torch.float32),
        "partial": _mla_inputs("partial"),
        "a8w8": _mla_inputs("a8w8"),
        "a8w8_c8": _mla_inputs("a8w8_c8"),
        "strided x": strided,
    }

    def call(inp, key):
        return lambda: K.mla_prolog_config(**inp, backend_key=key, cores=cores["n"] if key == "cuda" else None)

    names = list(variants)
    calls = [call(variants[n], key) for key in ("cuda", "ascend") for n in names]
    cold = _warm_equals_cold(calls, log, (K,))
    launches = dict(zip([(key, n) for key in ("cuda", "ascend") for n in names], cold))
    for n in names:            # the config table changes every launch
        assert launches[("cuda", n)] != launches[("ascend", n)], n
    for n in names[1:]:        # so does each variant
        assert launches[("cuda", n)] != launches[("cuda", "base")], n
    # fp32 sets IEEE (and may lower num_stages); the plan cache must not hand fp16's constexprs to fp32
    down = {k: v for k, v in launches[("cuda", "fp32")][0][3]}
    assert down["IEEE"] == ("bool", True)
    assert {k: v for k, v in launches[("cuda", "base")][0][3]}["IEEE"] == ("bool", False)
    # strides are read per call, never cached
    assert launches[("cuda", "strided x")][0][2][10] != launches[("cuda", "base")][0][2][10]
    # the device's core count: same shapes on a device with fewer SMs gets another split
    log.clear()
    K.mla_prolog_config(**_mla_inputs(T=1, He=7168, Hcq=64), backend_key="cuda", cores=132)
    first = list(log)
    log.clear()
    K.mla_prolog_config(**_mla_inputs(T=1, He=7168, Hcq=64), backend_key="cuda", cores=20)
    assert log != first and log[0][1] != first[0][1]   # down grid (split-K) follows the core count


def test_mla_prolog_plan_is_fresh_and_matches_uncached():
    from ops.triton import mla_prolog as K
    args = (1, 7168, 1536, 128, 128, 64, 512)
    cpu = torch.device("cpu")
    p0 = K.plan(*args, cpu, backend_key="cuda", cores=132)
    p1 = K.plan(*args, cpu, backend_key="cuda", cores=78)
    assert p0["down"]["SPLIT_K"] != p1["down"]["SPLIT_K"] or p0["down"]["grid"] != p1["down"]["grid"]
    for T in (1, 16, 17, 64, 200):
        for cores in (132, 78):
            for i8d, i8q, ab in ((False, False, 2), (True, True, 2), (False, True, 2), (False, False, 4)):
                got = K.plan(T, 7168, 1536, 128, 128, 64, 512, cpu, int8_down=i8d, int8_query=i8q,
                             backend_key="cuda", act_bytes=ab, cores=cores)
                # overrides that change nothing take the uncached path
                want = K.plan(T, 7168, 1536, 128, 128, 64, 512, cpu, int8_down=i8d, int8_query=i8q,
                              backend_key="cuda", act_bytes=ab, cores=cores, overrides={"down": {}})
                assert got == want, (T, cores, i8d, i8q, ab)
    p = K.plan(*args, torch.device("cpu"), backend_key="cuda", cores=132)
    p["down"]["SPLIT_K"] = -1
    p["query"].clear()
    q = K.plan(*args, torch.device("cpu"), backend_key="cuda", cores=132)
    assert q["down"]["SPLIT_K"] > 0 and q["query"]


# ----------------------------------------------------------------------------------------------
# amla
# ----------------------------------------------------------------------------------------------
def _amla_inputs(B=2, S_q=2, N=8, L=300, bs=64, dtype=torch.float16, seed=0):
    from ops.amla import make_inputs
    return make_inputs(dict(B=B, S_q=S_q, N=N, L=L, block_size=bs), dtype=dtype,
                       generator=torch.Generator().manual_seed(seed))


def test_amla_cached_plans_keyed_by_shape_table_strides(monkeypatch):
    from ops.triton import amla as A
    log = _record(monkeypatch, A, ("_amla_fwd_kernel", "_amla_merge_kernel"))
    base = _amla_inputs()
    strided = dict(base)
    strided["q_nope"] = torch.cat([base["q_nope"], base["q_nope"]], dim=0)[::2]   # batch stride doubled
    variants = [base, _amla_inputs(B=3), _amla_inputs(N=16), _amla_inputs(L=1000), _amla_inputs(bs=16),
                _amla_inputs(S_q=1), strided]
    calls = [lambda v=v: A.amla(**{n: v[n] for n in ("q_nope", "q_rope", "kv_cache", "kr_cache", "block_table",
                                                      "seq_lens", "softmax_scale")}) for v in variants]
    cold = _warm_equals_cold(calls, log, (A,))
    for i in range(1, len(variants)):
        assert cold[i] != cold[0]
    # the plans of the other tables differ from the interpreter's for every shape (uncached: config["key"])
    for v in variants[:-1]:
        B, S_q, N = v["q_nope"].shape[:3]
        mk = v["block_table"].shape[1] * v["kv_cache"].shape[1]
        plans = [A.launch_plan(B, S_q, N, mk, torch.device("cpu"), config={"key": k}, page=v["kv_cache"].shape[1])
                 for k in ("interpreter", "ascend", "cuda")]
        assert plans[0] != plans[1] and plans[1] != plans[2]
        assert plans[0] == A.launch_plan(B, S_q, N, mk, torch.device("cpu"), page=v["kv_cache"].shape[1])


def test_amla_launch_plan_is_fresh():
    from ops.triton import amla as A
    cpu = torch.device("cpu")
    for B, S_q, N, mk in ((1, 1, 16, 4096), (8, 2, 16, 4096), (64, 1, 16, 4096), (2, 2, 128, 1 << 15)):
        for ns in (None, 3):
            got = A.launch_plan(B, S_q, N, mk, cpu, num_splits=ns, page=64)
            assert got == A.launch_plan(B, S_q, N, mk, cpu, config={"key": "interpreter"}, num_splits=ns, page=64)
    a = A.launch_plan(8, 1, 16, 1 << 16, cpu)
    a["num_splits"] = -7
    assert A.launch_plan(8, 1, 16, 1 << 16, cpu)["num_splits"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA table's plan follows the device's SM count")
def test_amla_launch_plan_device_keyed():
    from ops.triton import amla as A
    dev = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for B, S_q, N, mk in ((1, 1, 16, 4096), (8, 2, 16, 4096), (64, 1, 16, 4096), (2, 2, 128, 1 << 15)):
        for ns in (None, 3):
            got = A.launch_plan(B, S_q, N, mk, dev, num_splits=ns, page=64)
            assert got == A.launch_plan(B, S_q, N, mk, dev, config={"key": "cuda", "cores": sms}, num_splits=ns,
                                        page=64) and got["key"] == "cuda"
    assert A.launch_plan(8, 1, 16, 1 << 16, dev) != A.launch_plan(8, 1, 16, 1 << 16, dev,
                                                                  config={"key": "cuda", "cores": sms // 4})


def test_amla_last_launch_plan_is_a_copy(monkeypatch):
    from ops.triton import amla as A
    if not hasattr(A, "LAST_LAUNCH"):
        pytest.skip("ops.triton.amla keeps no record of its last launch")
    _record(monkeypatch, A, ("_amla_fwd_kernel", "_amla_merge_kernel"))
    v = _amla_inputs()
    args = [v[n] for n in ("q_nope", "q_rope", "kv_cache", "kr_cache", "block_table", "seq_lens", "softmax_scale")]
    A.amla(*args)
    A.LAST_LAUNCH["plan"]["grid"] = -1
    A.amla(*args)
    assert A.LAST_LAUNCH["plan"]["grid"] > 0


# ----------------------------------------------------------------------------------------------
# quant
# ----------------------------------------------------------------------------------------------
def test_quant_cached_launches_keyed_by_shape_table_strides(monkeypatch):
    from ops.triton import quant as Q, quant_gemv as QG, quant_row as QR
    log = _record(monkeypatch, QR, ("_dynamic_quant_kernel", "_rms_norm_quant_kernel"))
    log2 = _record(monkeypatch, Q, ("_qmm_kernel", "_qmm_epilogue_kernel"))
    log3 = _record(monkeypatch, QG, ("_qmm_gemv_kernel",))
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(M, K, generator=g).to(torch.float16) for M, K in ((1, 64), (5, 64), (5, 3000), (70, 300))]
    xs.append(torch.randn(5, 128, generator=g)[:, ::2])        # strided rows
    mms = [(torch.randint(-127, 128, (M, K), generator=g, dtype=torch.int8),
            torch.randint(-127, 128, (K, N), generator=g, dtype=torch.int8)) for M, K, N in
           ((1, 64, 32), (3, 2048, 64), (40, 4096, 300), (3, 2048, 64))]
    mms[-1] = (mms[-1][0], mms[-1][1].t().contiguous().t())     # K-major weight: another W_LAYOUT

    calls = []
    for k in ("ascend", "cuda"):
        for x in xs:
            gam = torch.rand(x.shape[-1], generator=g)
            calls.append(lambda x=x, k=k: Q.dynamic_quant_config(x, backend_key=k))
            calls.append(lambda x=x, k=k, gam=gam: Q.rms_norm_dynamic_quant_config(x, gam, backend_key=k))
        for a, w in mms:
            ws, xsc = torch.rand(w.shape[1], generator=g), torch.rand(a.shape[0], generator=g)
            calls.append(lambda a=a, w=w, ws=ws, xsc=xsc, k=k: Q.quant_matmul_config(a, w, ws, xsc, backend_key=k))

    class Joined(list):   # the three modules' recorder logs as one (each in call order)
        def clear(self):
            for lg in (log, log2, log3):
                lg.clear()

        def __iter__(self):
            return iter(log + log2 + log3)
    cold = _warm_equals_cold(calls, Joined(), (Q.clear_caches,))
    half = len(calls) // 2
    assert all(cold[i] != cold[half + i] for i in range(half))
    assert len({repr(c) for c in cold}) == len(cold)


def test_quant_plans_keyed_by_split_target_and_fresh():
    from ops.triton import quant as Q, quant_row as QR
    cpu = torch.device("cpu")
    for M, N, K in ((1, 2112, 7168), (16, 7168, 2048), (200, 2048, 7168), (4096, 64, 64)):
        for target in (132, 16):
            got = Q.plan_quant_matmul(M, N, K, cpu, backend_key="cuda", split_target=target)
            bucket = Q.bucket(M, N, K, Q.tables()["cuda"]["quant_matmul"])
            assert got == Q.plan_quant_matmul(M, N, K, cpu, dict(bucket), backend_key="cuda", split_target=target)
    # a split-K ("auto") decode bucket: the split count follows the split target (the device's SM count)
    M, N, K = next((m, n, k) for m in (16, 8, 32) for n in (4096, 2048, 7168) for k in (7168, 16384)
                   if Q.plan_quant_matmul(m, n, k, cpu, backend_key="cuda", split_target=132)["SPLIT_K"] > 1)
    a = Q.plan_quant_matmul(M, N, K, cpu, backend_key="cuda", split_target=132)
    b = Q.plan_quant_matmul(M, N, K, cpu, backend_key="cuda", split_target=16)
    assert a["split_k"] == "auto" and a["SPLIT_K"] != b["SPLIT_K"]
    a["SPLIT_K"] = -3
    assert Q.plan_quant_matmul(M, N, K, cpu, backend_key="cuda", split_target=132)["SPLIT_K"] > 0
    row = QR.row_launch("dynamic_quant", 7, 7168, "ascend")
    assert row == QR.make_row_launch(QR.row_config("dynamic_quant", 7, "ascend"), 7, 7168)


# ----------------------------------------------------------------------------------------------
# moe_gating
# ----------------------------------------------------------------------------------------------
def test_moe_gating_cached_launches_keyed(monkeypatch):
    from ops.triton import moe_gating as G
    log = _record(monkeypatch, G, ("_moe_gating_kernel",))
    g = torch.Generator().manual_seed(0)
    bias = torch.randn(256, generator=g)
    x1, x40 = torch.randn(1, 256, generator=g), torch.randn(40, 256, generator=g)
    x64 = torch.randn(3, 64, generator=g)
    xs = torch.randn(40, 512, generator=g)[:, :256]      # row stride 512
    ds = dict(k_group=4, group_count=8, group_select_mode=1, norm_type=1, routed_scaling_factor=2.5)
    calls = []
    for key in ("cuda", "ascend"):
        calls += [lambda key=key: G.moe_gating_top_k_config(x1, 8, bias=bias, backend_key=key, **ds),
                  lambda key=key: G.moe_gating_top_k_config(x40, 8, bias=bias, backend_key=key, **ds),
                  lambda key=key: G.moe_gating_top_k_config(x40, 8, backend_key=key, **ds),
                  lambda key=key: G.moe_gating_top_k_config(x40, 6, bias=bias, backend_key=key, **ds),
                  lambda key=key: G.moe_gating_top_k_config(x40, 8, bias=bias, backend_key=key,
                                                            **{**ds, "group_select_mode": 0}),
                  lambda key=key: G.moe_gating_top_k_config(x40, 8, bias=bias, backend_key=key,
                                                            **{**ds, "group_select_mode": True}),
                  lambda key=key: G.moe_gating_top_k_config(x64, 2, backend_key=key),
                  lambda key=key: G.moe_gating_top_k_config(x64, 2, backend_key=key, norm_type=1),
                  lambda key=key: G.moe_gating_top_k_config(xs, 8, bias=bias, backend_key=key, **ds)]
    cold = _warm_equals_cold(calls, log, (G,))
    half = len(calls) // 2
    assert len({repr(c) for c in cold[:half]}) == half and len({repr(c) for c in cold[half:]}) == half
    assert cold[1] != cold[half + 1]          # T = 40: the tables' BLOCK_T / grid differ
    # group_select_mode True and 1 are distinct cache keys (typed): each launch keeps the caller's value
    assert dict(cold[5][0][3])["GROUP_MODE"] == ("bool", True)
    assert dict(cold[1][0][3])["GROUP_MODE"] == ("int", 1)


# ----------------------------------------------------------------------------------------------
# DsOp dispatch helpers keep their semantics
# ----------------------------------------------------------------------------------------------
def test_unit_stride_vectors_semantics():
    import ops
    op = ops.mla_prolog.mla_prolog
    inp = _mla_inputs()
    names = list(op.signature.parameters)
    args = tuple(inp[n] for n in names[:11])
    kw = {n: inp[n] for n in names[11:] if n in inp}
    a2, k2 = op._unit_stride_vectors(args, kw)
    assert a2 is args and k2 is kw                      # nothing to copy: the same objects
    gam = torch.rand(2 * inp["rmsnorm_gamma_cq"].numel())[::2]
    idx = torch.stack([inp["cache_index"], inp["cache_index"]], 1)[:, 0]
    kv = inp["kv_cache"]
    kvs = torch.cat([kv, kv], 0)[::2]                    # a strided mutated argument is never copied
    args = args[:5] + (gam,) + args[6:9] + (kvs,) + args[10:]
    kw = dict(kw, cache_index=idx)
    a2, k2 = op._unit_stride_vectors(args, kw)
    assert a2[5] is not gam and a2[5].is_contiguous() and torch.equal(a2[5], gam)
    assert a2[9] is kvs
    assert all(a2[i] is args[i] for i in range(len(args)) if i != 5)
    assert k2["cache_index"] is not idx and k2["cache_index"].stride(0) == 1 and torch.equal(k2["cache_index"], idx)
    assert all(k2[k] is kw[k] for k in kw if k != "cache_index")
    # integer tables: block_table-like non-contiguous int32 is copied, int8 / float matrices are not
    at = ops.amla.amla
    v = _amla_inputs()
    bt = torch.cat([v["block_table"], v["block_table"]], 1)[:, ::2]
    w8 = torch.zeros(4, 6, dtype=torch.int8).t()
    args = (v["q_nope"].transpose(1, 2), v["q_rope"], v["kv_cache"], v["kr_cache"], bt, w8, 0.1)
    a2, _ = at._unit_stride_vectors(args, {})
    assert a2[4].is_contiguous() and a2[0] is args[0] and a2[5] is w8


def test_check_tensor_messages_unchanged():
    t = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^w must have shape \[2, \*, 4\], got \[2, 3\]$"):
        L.check_tensor("w", t, shape=(2, None, 4))
    with pytest.raises(ValueError, match=r"^w must have shape \[2, 4\], got \[2, 3\]$"):
        L.check_tensor("w", t, shape=(2, 4))
    with pytest.raises(ValueError, match=r"^w must have 1 or 3 dimensions, got shape \(2, 3\)$"):
        L.check_tensor("w", t, ndim=(1, 3))
    with pytest.raises(TypeError, match=r"^w must be a torch.Tensor, got int$"):
        L.check_tensor("w", 3)
    L.check_tensor("w", t, dtypes=(torch.float32,), ndim=2, shape=(2, None))
    L.check_tensor("w", t, shape=[2, 3])
    assert L._device_type_of((1, t), {}) == "cpu" and L._device_type_of((), {"a": t}) == "cpu"
    assert L._device_type_of((1,), {"a": 2}) == "cpu"
