"""Tests of the performance report (perf/): FLOP/byte formulas against FlopCounterMode, the CLI end to end on CPU,
what the CPU run prints, the modeled 910B rows, the markdown tables, the pytest-benchmark cases, the peak table's
sources, the checker. Speed is never asserted."""
from __future__ import annotations

import csv
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import ops
from ops._library import SPECS, DsOp, Kernel, OpSpec
from perf import check as C
from perf import peaks as P
from perf import specs as S
from perf.__main__ import main
from perf.runner import roofline_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the fake op's kernel is a plain function registered as a "triton" kernel on CPU tensors: dispatch runs it only
# with the Triton interpreter switched on, as on a CPU-only machine
INTERPRETER = pytest.mark.interpreter


# ----------------------------------------------------------------------------------------------
# a small fake op: y = bf16(x @ w · scale), s = Σ_n y (fp32), and row `index[m]` of `cache` ← y[m]
# ----------------------------------------------------------------------------------------------
def _fake_ref(x: torch.Tensor, w: torch.Tensor, cache: torch.Tensor, *, index: torch.Tensor,
              scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    y = (x.float() @ w.float() * scale).to(x.dtype)
    cache[index] = y
    return y, y.float().sum(-1)


def _fake_flops(x, w, cache=None, index=None, scale=1.0, **_):
    return 2 * x.shape[0] * x.shape[1] * w.shape[1]


def _fake_bytes(x, w, cache=None, index=None, scale=1.0, **_):
    M, K = x.shape
    N = w.shape[1]
    e = x.element_size()
    return (M * K + K * N + 2 * M * N) * e + M * 4 + index.numel() * index.element_size()


def _fake_make_inputs(shape, *, dtype, device, generator):
    M, K, N = shape["M"], shape["K"], shape["N"]
    x = torch.randn(M, K, generator=generator).to(device=device, dtype=dtype)
    w = (torch.randn(K, N, generator=generator) / K ** 0.5).to(device=device, dtype=dtype)
    cache = torch.full((2 * M + 3, N), float("nan"), dtype=dtype, device=device)
    index = torch.randperm(2 * M + 3, generator=generator)[:M].to(device)
    return dict(x=x, w=w, cache=cache, index=index, scale=0.5)


def _fake_fake(x, w, cache, *, index, scale=1.0):
    return x.new_empty(x.shape[0], w.shape[1]), x.new_empty(x.shape[0], dtype=torch.float32)


def _good_kernel(x, w, cache, *, index, scale=1.0):
    y = (x @ w * scale)  # computed in the input dtype: different rounding, same function
    cache[index] = y
    return y, y.float().sum(-1)


def _bad_kernel(x, w, cache, *, index, scale=1.0):
    y = (x.float() @ w.float() * scale * 1.01).to(x.dtype)
    cache[index] = y
    return y, y.float().sum(-1)


_FAKE: dict[str, S.OpEntry] = {}


def fake_entry(name: str = "perf_test_mm", kernel=_good_kernel, backend: str = "triton") -> S.OpEntry:
    """Register a fake ds op once per process, its one kernel a ``backend`` kernel on CPU tensors; it is kept out of
    ops.SPECS so other tests never see it."""
    if name not in _FAKE:
        spec = OpSpec(name=name, flops=_fake_flops, bytes=_fake_bytes, make_inputs=_fake_make_inputs,
                      shapes={"decode_b4": dict(M=4, K=64, N=48), "prefill_4k": dict(M=4096, K=64, N=48),
                              "decode_b1": dict(M=1, K=64, N=48)},
                      compute="bf16", tolerance="bf16")
        op = DsOp(name, _fake_ref, fake=_fake_fake, mutates_args=("cache",), spec=spec,
                  kernels=[Kernel(backend, "tests.test_perf", "_unused", ("cpu",), _fn=kernel)],
                  flop_formula=lambda *a, out_val=None, **kw: _fake_flops(*a, **kw))
        SPECS.pop(name, None)
        _FAKE[name] = S.OpEntry(spec, op, sys.modules[__name__])
    return _FAKE[name]


def real_entries() -> list[S.OpEntry]:
    return S.collect_ops()


def _all_entries():
    return [pytest.param(e, id=e.name) for e in real_entries()] + [pytest.param(fake_entry(), id="fake")]


# ----------------------------------------------------------------------------------------------
# FLOP / byte formulas
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", _all_entries())
def test_flops_match_flop_counter_and_bytes_are_bounded(entry):
    """SPEC.flops equals what FlopCounterMode counts for torch.ops.ds.<op> (the registered formula) on a tiny input;
    SPEC.bytes lies between the outputs' size (each written once) and inputs + outputs + mutated args."""
    own = [(n, s) for n, s in entry.spec.shapes.items() if S.is_cpu_shape(n, s)]
    name, shape = (own or list(entry.spec.shapes.items()))[0]
    small = shape if own else S.cpu_shape(entry, shape)
    inputs = entry.spec.make_inputs(small, dtype=torch.bfloat16, device=torch.device("cpu"),
                                    generator=torch.Generator().manual_seed(0))
    want = int(entry.spec.flops(**inputs))
    nbytes = int(entry.spec.bytes(**inputs))
    with ops.backend("reference"), FlopCounterMode(display=False) as fc:
        out = entry.registered(**inputs)
    counts = {str(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
    got = counts.get(f"ds.{entry.name}", 0)
    assert got == want, f"{entry.name} {name} {small}: FlopCounterMode counted {counts}, SPEC.flops = {want}"
    # other ops counted inside would mean the formula is not the one that counts (decomposition leaked)
    assert sum(counts.values()) == want, counts
    outs = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
    out_bytes = sum(t.numel() * t.element_size() for t in outs)
    ins = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    mut = set(S.mutated_args(entry))
    upper = sum(t.numel() * t.element_size() for t in ins) + out_bytes + \
        sum(inputs[k].numel() * inputs[k].element_size() for k in mut)
    assert out_bytes <= nbytes <= upper, f"{entry.name}: bytes {nbytes} not in [{out_bytes}, {upper}]"


def test_fake_flops_counter_sees_the_op_not_its_aten_ops():
    e = fake_entry()
    inputs = _fake_make_inputs(dict(M=3, K=16, N=8), dtype=torch.bfloat16, device="cpu",
                               generator=torch.Generator().manual_seed(1))
    with FlopCounterMode(display=False) as fc:
        e.registered(**inputs)
    assert {str(k) for k in fc.get_flop_counts()["Global"]} == {"ds.perf_test_mm"}
    assert fc.get_total_flops() == 2 * 3 * 16 * 8


# ----------------------------------------------------------------------------------------------
# peaks
# ----------------------------------------------------------------------------------------------
def test_every_peak_has_a_source():
    want = {"h100_sxm", "h200_sxm", "h800_sxm", "a100_sxm_80gb", "ascend_910b3", "ascend_910b2", "ascend_910c"}
    assert want <= set(P.PEAKS)
    for key, d in P.PEAKS.items():
        assert d.key == key
        for field in ("bf16", "int8", "fp32", "hbm_tbs"):
            p = getattr(d, field)
            if p is None:
                continue
            assert p.value > 0, (key, field)
            assert len(p.source) > 20, (key, field, p.source)
            if p.derived:
                assert "derived" in p.source or "unverified" in p.source, (key, field)
            else:
                assert "http" in p.source or "datasheet" in p.source.lower() or "brief" in p.source.lower(), (key, field)
    assert P.PEAKS["h200_sxm"].bf16.value == pytest.approx(989.4)
    assert P.PEAKS["h200_sxm"].hbm_tbs.value == 4.8
    assert P.PEAKS["ascend_910c"].bf16.value == pytest.approx(707.8)
    assert 614 / P.PEAKS["ascend_910c"].bf16.value == pytest.approx(0.868, abs=0.002)  # AMLA: 614 TFLOPS = 86.8%
    assert P.PEAKS["h200_sxm"].ridge("bf16") == pytest.approx(206, abs=1)  # H200.md: ~206 FLOP/byte


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H200", "h200_sxm"), ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("NVIDIA H800", "h800_sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm_80gb"), ("Ascend910B3", "ascend_910b3"), ("Ascend910B2", "ascend_910b2"),
    ("Ascend910_9382", "ascend_910c"), ("NVIDIA H100 PCIe", None), ("NVIDIA H200 NVL", None),
    ("NVIDIA A100-PCIE-40GB", None), ("cpu: AMD EPYC", None)])
def test_device_lookup(name, key):
    d = P.lookup_peaks(name)
    assert (d.key if d else None) == key


def test_measured_ceilings_on_cpu():
    c = P.measure_ceilings("cpu")
    assert c["bf16"].value and c["bf16"].value > 0
    assert c["hbm_tbs"].value and c["hbm_tbs"].value > 0
    assert c["bf16"].method and c["hbm_tbs"].method


# ----------------------------------------------------------------------------------------------
# metrics and checker
# ----------------------------------------------------------------------------------------------
def test_roofline_metrics_on_h200():
    pk = P.PEAKS["h200_sxm"]
    # memory-bound: 1 GB moved, 1 GFLOP, in 250 µs -> 4 TB/s = 83.3% of 4.8
    m = roofline_metrics(10 ** 9, 10 ** 9, 250.0, "bf16", pk, {})
    assert m["bound"] == "memory" and m["intensity"] == 1.0
    assert m["gbps"] == pytest.approx(4000)
    assert m["pct_peak"] == pytest.approx(100 * 4.0 / 4.8)
    assert m["pct_achievable"] is None
    # compute-bound: 989.4 GFLOP in 2 ms -> 50% of peak
    m = roofline_metrics(int(989.4e9), 10 ** 6, 2000.0, "bf16", pk, {"bf16": P.Ceiling(494.7, "x"),
                                                                     "hbm_tbs": P.Ceiling(4.3, "y")})
    assert m["bound"] == "compute"
    assert m["pct_peak"] == pytest.approx(50)
    assert m["pct_achievable"] == pytest.approx(100)


def test_tolerances_are_the_one_design_table():
    import ops.tolerances
    import tolerances
    assert C.TOLERANCES is ops.tolerances.TOLERANCES is tolerances.TOLERANCES
    assert ops.tolerances.TOLERANCES["bf16"] == {"cos_diff": 1e-5, "max_rel": 2e-2}


def test_checker_verdicts():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 64, generator=g)
    assert C.compare(ref.bfloat16(), ref, "bf16").ok
    assert not C.compare((ref * 1.05).bfloat16(), ref, "bf16").ok
    bad = ref.clone()
    bad[3, 3] = float("nan")
    assert not C.compare(bad, ref, "fp32").ok                     # NaN never passes
    lse = torch.tensor([1.0, float("-inf")])
    assert C.compare(lse.clone(), lse, "lse").ok                  # -inf where the reference has -inf
    assert not C.compare(torch.tensor([1.0, 0.0]), lse, "lse").ok
    assert not C.compare(torch.tensor([1, 2], dtype=torch.int8), torch.tensor([1, 3], dtype=torch.int8), "int8").ok
    assert not C.check_outputs((ref, ref), (ref,), "fp32").ok     # output count differs
    # an op whose SPEC row is fp32 but whose output follows a bf16 input is held to the bf16 row ...
    assert C.check_outputs((ref.bfloat16(),), (ref,), "fp32").ok
    assert not C.check_outputs(((ref * 1.05).bfloat16(),), (ref,), "fp32").ok
    # ... while an fp32 output is held to the fp32 row, and the second output to its dtype's row
    assert not C.check_outputs((ref.bfloat16().float(),), (ref,), "fp32").ok
    assert not C.check_outputs((ref, ref.bfloat16().float()), (ref, ref), "bf16").ok
    # mutated args are compared where either run wrote: a write to the wrong slot fails
    orig = torch.full((4, 2), float("nan"))
    exp, got = orig.clone(), orig.clone()
    exp[1] = 1.0
    got[2] = 1.0
    g_sel, e_sel = C.changed_region(got, exp, orig)
    assert not C.compare(g_sel, e_sel, "fp32").ok


# ----------------------------------------------------------------------------------------------
# shapes
# ----------------------------------------------------------------------------------------------
def test_shape_selection_and_cpu_scaling():
    e = fake_entry()
    assert [n for n, _ in S.select_shapes(e.spec, ["decode"])] == ["decode_b4", "decode_b1"]
    assert [n for n, _ in S.select_shapes(e.spec, ["prefill_*"])] == ["prefill_4k"]
    assert [n for n, _ in S.select_shapes(e.spec, ["decode_b1"])] == ["decode_b1"]
    # sets that match on the shape dict when the name says nothing
    amla_like = types.SimpleNamespace(shapes={
        "b1_sq1_n128_l4096": dict(B=1, S_q=1, N=128, L=4096), "b64_sq2_n16_l4096": dict(B=64, S_q=2, N=16, L=4096),
        "t4096": dict(T=4096, N=128), "cpu_small": dict(B=2, S_q=2, N=8, L=300, cpu=True)})
    names = lambda pats: [n for n, _ in S.select_shapes(amla_like, pats)]  # noqa: E731
    assert names(["mtp"]) == ["b64_sq2_n16_l4096", "cpu_small"]
    assert names(["tp"]) == ["b64_sq2_n16_l4096", "cpu_small"]
    assert names(["prefill"]) == ["t4096"]
    assert names(["decode+mtp+tp"]) == ["b64_sq2_n16_l4096", "cpu_small"]
    assert names(["cpu"]) == ["cpu_small"]
    # GEMM dims: M capped like a batch, K/N kept when small
    assert S.cpu_shape(e, dict(M=4096, K=64, N=48)) == dict(M=4, K=64, N=48)
    cases = S.plan_shapes(e, None, device_type="cpu", quick=False)
    assert len({repr(c.shape) for c in cases}) == len(cases)       # de-duplicated (4096 and 4 both -> 4)
    assert any(c.scaled for c in S.plan_shapes(e, ["prefill_4k"], device_type="cpu", quick=False))
    # the generic reducer keeps DeepSeek's fixed head dims and top-k, caps batch / sequence / heads
    s = S.generic_cpu_shape(dict(B=256, S_q=2, N=128, L=16384, D=512, Dr=64, block_size=64, k=8, E=256))
    assert s == dict(B=4, S_q=2, N=16, L=256, D=512, Dr=64, block_size=64, k=8, E=256)
    s = S.generic_cpu_shape(dict(M=512, K=7168, N=18432))
    assert s == dict(M=4, K=2048, N=2048)
    assert S.generic_cpu_shape(dict(B=8, seq_lens=[4096, 1, 70000])) == dict(B=4, seq_lens=[256, 1, 256])


def test_real_specs_have_shapes_and_cpu_scaled_shapes_build():
    """Every registered op's first shape scales to something make_inputs accepts on CPU."""
    for e in real_entries():
        assert e.spec.shapes, e.name
        name, shape = next(iter(e.spec.shapes.items()))
        small = S.cpu_shape(e, shape)
        flops, nbytes = S.input_cost(e, small, dtype=torch.bfloat16)
        assert nbytes > 0, (e.name, name)
        assert flops <= S.CPU_BUDGET["flops"] * 4 and nbytes <= S.CPU_BUDGET["bytes"] * 4, (e.name, small)


# ----------------------------------------------------------------------------------------------
# the CLI end to end
# ----------------------------------------------------------------------------------------------
def _read(out):
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "results.json")) as f:
        js = json.load(f)
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    return rows, js, md


@INTERPRETER
def test_cli_end_to_end_cpu(tmp_path):
    e = fake_entry()
    out = str(tmp_path / "perf")
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b4", "--backends", "reference,triton",
               "--out", out, "--quick", "--no-layer"], extra_ops=[e])
    assert rc == 0
    rows, js, md = _read(out)
    assert [(r["op"], r["backend"], r["shape"]) for r in rows] == [(e.name, "reference", "decode_b4"),
                                                                    (e.name, "triton", "decode_b4")]
    from perf.report import COLUMNS
    assert list(rows[0]) == COLUMNS
    ref, tri = rows
    assert ref["check"] == "baseline" and tri["check"] == "PASS", tri["check_detail"]
    for r in rows:
        assert float(r["us_p50"]) > 0 and float(r["us_p20"]) <= float(r["us_p50"]) <= float(r["us_p80"])
        assert int(r["flops"]) == 2 * 4 * 64 * 48
        assert float(r["tflops"]) > 0 and float(r["gbps"]) > 0 and float(r["intensity"]) > 0
        assert r["bound"] in ("compute", "memory")
        assert r["pct_peak"] == ""            # no datasheet peak for a CPU
        assert float(r["pct_achievable"]) > 0
        assert float(r["dispatch_us_registered"]) > 0 and float(r["dispatch_us_eager"]) > 0
        assert r["repro"] == (f"python -m perf --device cpu --ops {e.name} --shapes decode_b4 --backends "
                              f"{r['backend']} --no-layer --quick")
        spread = float(r["spread_pct"])
        assert spread == pytest.approx(100 * (float(r["us_p80"]) - float(r["us_p20"])) / float(r["us_p50"]))
        assert r["torch"] == torch.__version__ and r["git_sha"]
    assert js["meta"]["device_type"] == "cpu" and len(js["rows"]) == 2
    assert js["meta"]["ceilings"]["bf16"]["value"] > 0
    assert "layer view: unavailable (skipped" in md and "## perf_test_mm" in md
    assert "spread %" in md and "re-running its `repro` command" in md
    assert js["meta"]["golden"].startswith("the reference") and js["notes"] is not None
    png = [f for f in os.listdir(out) if f.startswith("roofline_") and f.endswith(".png")]
    assert len(png) == 1 and os.path.getsize(os.path.join(out, png[0])) > 1000


@INTERPRETER
def test_cli_marks_a_wrong_backend_fail(tmp_path):
    e = fake_entry("perf_test_bad", kernel=_bad_kernel)
    out = str(tmp_path / "bad")
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--backends", "triton", "--out", out,
               "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e])
    rows, _, md = _read(out)
    assert rc == 1
    assert [r["check"] for r in rows] == ["FAIL"]
    assert "FAIL" in md


def _raising_kernel(x, w, cache, *, index, scale=1.0):
    raise RuntimeError("kernel exploded on purpose")


@INTERPRETER
def test_cli_prints_why_rows_errored(tmp_path, capsys):
    """An ERROR row's reason is printed per row (not only in summary.md), and with every case errored the closing
    line says so instead of blaming an empty match."""
    e = fake_entry("perf_test_raise", kernel=_raising_kernel)
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--backends", "triton", "--out",
               str(tmp_path / "err"), "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e])
    err = capsys.readouterr().err
    assert rc == 2
    assert "ERROR: perf_test_raise decode_b1 triton: RuntimeError: kernel exploded on purpose" in err
    assert "every case that ran failed or errored" in err and "no op / shape / backend matched" not in err


def test_cli_merge_refuses_what_is_not_a_report(tmp_path, capsys):
    """--merge with a missing directory, a directory without results.json or a JSON without rows is a usage error
    naming the argument, not a traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    norows = tmp_path / "norows"
    norows.mkdir()
    (norows / "results.json").write_text('{"meta": {}}')
    for d, msg in ((tmp_path / "missing", "no readable results.json"), (empty, "no readable results.json"),
                   (norows, "is not a perf report")):
        with pytest.raises(SystemExit):
            main(["--merge", str(d), "--out", str(tmp_path / "m")])
        assert f"--merge {str(d)!r}: " in (e := capsys.readouterr().err) and msg in e, e


def test_cli_skips_unavailable_backend_with_reason(tmp_path):
    e = fake_entry()
    out = str(tmp_path / "skip")
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--backends", "reference,ascendc",
               "--out", out, "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e])
    rows, _, _ = _read(out)
    assert rc == 0
    assert [(r["backend"], r["check"]) for r in rows] == [("reference", "baseline"), ("ascendc", "SKIP")]
    assert "ascendc" in rows[1]["check_detail"]


def _install_layer(monkeypatch, hook=None) -> None:
    """Stand a module in for ops.deepseek_layer: ``hook`` as its perf_layer (none: a module without a hook)."""
    fake_mod = types.ModuleType("ops.deepseek_layer")
    if hook is not None:
        fake_mod.perf_layer = hook
    monkeypatch.setitem(sys.modules, "ops.deepseek_layer", fake_mod)
    monkeypatch.setattr(ops, "deepseek_layer", fake_mod, raising=False)


def _fake_layer(monkeypatch, e: S.OpEntry, *, relu: bool = True) -> None:
    """A 'layer' that calls the fake op through its eager fast path (then relu + a residual when ``relu``)."""
    inputs = _fake_make_inputs(dict(M=8, K=64, N=32), dtype=torch.bfloat16, device="cpu",
                               generator=torch.Generator().manual_seed(2))

    def forward(x):
        y, _ = e.op(x, inputs["w"], inputs["cache"], index=inputs["index"])   # eager fast path
        return torch.relu(y) + x[:, :32] if relu else y

    _install_layer(monkeypatch, lambda device, dtype: (forward, (inputs["x"],)))


def test_layer_view_with_a_fake_layer(monkeypatch):
    """The layer view attributes FLOPs and time to each ds op even when the layer calls the eager fast path."""
    from perf.layer import OTHER, layer_view
    e = fake_entry()
    _fake_layer(monkeypatch, e)
    lv = layer_view("cpu", specs={e.name: e.spec})
    assert lv["available"], lv["reason"]
    (view,) = lv["views"]
    row = {o["op"]: o for o in view["ops"]}[e.name]
    assert {o["op"] for o in view["ops"]} == {e.name, OTHER}
    assert row["calls"] == 1 and row["flops"] == 2 * 8 * 64 * 32
    assert {o["op"]: o for o in view["ops"]}[OTHER]["calls"] is None      # not a count of anything
    assert row["time_us"] > 0 and 0 < row["share_pct"] <= 100
    assert view["layer_flops"] == 2 * 8 * 64 * 32          # relu/add count no FLOPs; the ds op counted once


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, "ops", "deepseek_layer.py")), reason="no layer yet")
def test_layer_view_builtin_random_layer():
    """Without a hook, perf builds random bf16 and a8w8 layers through the public loader and sees every ds op."""
    import ops.deepseek_layer as L
    from perf import layer as PL
    if any(callable(getattr(L, h, None)) for h in PL.HOOKS):
        pytest.skip("ops.deepseek_layer has its own hook")
    lv = PL.layer_view("cpu", modes=("a8w8",))
    assert lv["available"], lv["reason"]
    seen = {o["op"] for v in lv["views"] for o in v["ops"]}
    assert {"mla_prolog", "amla", "moe_gating_top_k", "quant_matmul", "dynamic_quant", "rms_norm_dynamic_quant"} \
        <= seen, seen
    for v in lv["views"]:
        ds = [o for o in v["ops"] if not o["op"].startswith("(")]
        assert 0 < sum(o["share_pct"] for o in ds) <= 100 + 1e-6
        assert sum(o["share_pct"] for o in v["ops"]) == pytest.approx(100)
        for o in ds:
            assert o["calls"] >= 1 and o["flops"] >= 0 and o["time_us"] > 0


def test_layer_view_unavailable_reason(monkeypatch):
    from perf.layer import layer_view
    _install_layer(monkeypatch)
    lv = layer_view("cpu")
    assert not lv["available"] and "exposes none of" in lv["reason"] and lv["views"] == []


def test_cli_help_subprocess():
    r = subprocess.run([sys.executable, "-m", "perf", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--backends" in r.stdout


# ----------------------------------------------------------------------------------------------
# timers, golden, merge, re-run check
# ----------------------------------------------------------------------------------------------
def test_timing_spread_and_rotation_on_cpu():
    from perf.timers import Timing, graph_time_us, time_fn
    import inspect
    t = Timing(8.0, 10.0, 12.0, "cudagraph", calls=64, samples=20)
    assert t.spread_pct == pytest.approx(40.0)
    assert t.describe() == "cudagraph 64 calls × 20 replays"
    assert Timing(0.0, 0.0, 0.0, "wall").spread_pct is None
    # perf/batch_invariance.py calls it with these keywords
    sig = inspect.signature(graph_time_us)
    assert list(sig.parameters) == ["fns", "calls", "replays", "budget_s"]
    assert sig.parameters["budget_s"].default == 0.5
    seen = []
    fns = [lambda i=i: seen.append(i) for i in range(3)]
    t = time_fn(fns, "cpu", reps=6)
    assert t.method == "wall" and t.samples >= 3 and t.p20_us <= t.p50_us <= t.p80_us
    assert set(seen) == {0, 1, 2}                                    # every input set is timed
    assert len(t.samples_us) == t.samples and min(t.samples_us) <= t.p50_us <= max(t.samples_us)


def test_golden_math_flags_restored():
    from perf.runner import ieee_fp32_math
    m = torch.backends.cuda.matmul
    before = (m.allow_tf32, m.allow_bf16_reduced_precision_reduction, torch.backends.cudnn.allow_tf32)
    with ieee_fp32_math():
        assert not m.allow_tf32 and not m.allow_bf16_reduced_precision_reduction
        assert not m.allow_fp16_reduced_precision_reduction and not torch.backends.cudnn.allow_tf32
    assert (m.allow_tf32, m.allow_bf16_reduced_precision_reduction, torch.backends.cudnn.allow_tf32) == before


def _wrong_cache_kernel(x, w, cache, *, index, scale=1.0):
    """Right outputs, but every cache row written one slot off: only the mutated-argument check can see it."""
    y = (x.float() @ w.float() * scale).to(x.dtype)
    cache[(index + 1) % cache.shape[0]] = y
    return y, y.float().sum(-1)


@INTERPRETER
@pytest.mark.parametrize("golden", ["device", "upcast"])
def test_negative_controls_fail_with_each_golden(tmp_path, golden):
    """A kernel off by 1 % and a kernel writing the cache to the wrong slots both FAIL, whatever the golden; a
    right kernel PASSes against the default golden — and FAILs against the up-cast one, whose second output
    (Σ of the unrounded product) is not the op's (Σ of the bf16-rounded product): why up-cast is not the default."""
    right = "PASS" if golden == "device" else "FAIL"
    for name, kernel, want in (("perf_test_bad", _bad_kernel, "FAIL"), ("perf_test_badcache", _wrong_cache_kernel,
                                                                        "FAIL"), ("perf_test_mm", _good_kernel, right)):
        e = fake_entry(name, kernel=kernel)
        out = str(tmp_path / f"{name}_{golden}")
        rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b4", "--backends", "triton", "--out", out,
                   "--quick", "--no-layer", "--no-dispatch", "--golden", golden], extra_ops=[e])
        rows, _, _ = _read(out)
        assert [r["check"] for r in rows] == [want], (name, rows[0]["check_detail"])
        assert rc == (1 if want == "FAIL" else 0)


def test_upcast_golden_drops_rounding_points():
    """Why the default golden keeps the input dtypes: the reference with bf16 inputs rounds intermediates to bf16
    (the documented rounding points); up-cast to fp32 it does not, so the up-cast golden is a different function. On the
    fake op (y = bf16(x @ w)) the up-cast output is the unrounded product."""
    from perf.runner import upcast_floats
    e = fake_entry()
    inputs = _fake_make_inputs(dict(M=8, K=64, N=48), dtype=torch.bfloat16, device="cpu",
                               generator=torch.Generator().manual_seed(3))
    up = upcast_floats(inputs, ["cache"])
    assert up["x"].dtype == torch.float32 and up["index"].dtype == inputs["index"].dtype
    assert up["cache"] is not inputs["cache"]
    y_bf16, _ = e.op.reference(**{**inputs, "cache": inputs["cache"].clone()})
    y_up, _ = e.op.reference(**up)
    assert y_up.dtype == torch.float32 and not torch.equal(y_up, y_bf16.float())
    assert C.compare(y_bf16, y_up, "bf16").ok


def test_cpu_second_opinion_overrules_a_bad_device_golden(tmp_path):
    """On an accelerator a FAIL against the on-device reference is re-checked against the CPU reference; if that
    passes, PASS stands and the detail shows both. Simulated on CPU with a corrupted 'device' golden."""
    import perf.__main__ as M
    e = fake_entry()
    args = M.parse_args(["--device", "cpu", "--ops", e.name, "--no-layer", "--out", str(tmp_path)])
    runner, _ = M.setup(args, [], extra_ops=[e], ceilings={})
    inputs = _fake_make_inputs(dict(M=4, K=64, N=48), dtype=torch.bfloat16, device="cpu",
                               generator=torch.Generator().manual_seed(4))
    mutated = ["cache"]
    orig = {"cache": inputs["cache"].clone()}
    got_in = {**inputs, "cache": inputs["cache"].clone()}
    out = e.op(**got_in)
    bad = runner.golden(e, inputs, mutated, "device")
    bad.out = (bad.out[0] * 1.05, bad.out[1])
    chk, detail = runner._check(out, bad, e, mutated, got_in, orig)
    assert chk == "FAIL"
    runner.dev = types.SimpleNamespace(type="cuda")           # pretend: an accelerator run
    try:
        runner.golden = lambda entry, ins, mut, kind: M.Runner.golden(  # noqa: E731
            types.SimpleNamespace(dev=torch.device("cpu")), entry, ins, mut, kind)
        chk2, detail2 = runner._second_opinion({}, e, inputs, mutated, 10, 10, out, got_in, orig, chk, detail)
    finally:
        runner.dev = torch.device("cpu")
    assert chk2 == "PASS" and "vs CPU reference" in detail2 and "vs on-device reference: FAIL" in detail2
    # a wrong kernel stays FAIL after the second opinion
    wrong = (out[0] * 1.05, out[1])
    runner.dev = types.SimpleNamespace(type="cuda")
    try:
        chk3, detail3 = runner._second_opinion({}, e, inputs, mutated, 10, 10, wrong, got_in, orig, "FAIL", "x")
    finally:
        runner.dev = torch.device("cpu")
    assert chk3 == "FAIL" and "vs CPU reference too: FAIL" in detail3


@INTERPRETER
def test_merge_two_runs_and_repro_check(tmp_path):
    """Two halves of a report merge into one CSV/JSON/summary/PNG; the re-run check re-runs rows from their repro
    commands and records the comparison (speed itself is never asserted)."""
    from perf.repro_check import pick_rows, repro_check
    e = fake_entry()
    a, b, m = (str(tmp_path / x) for x in ("a", "b", "m"))
    for out, shape in ((a, "decode_b4"), (b, "decode_b1")):
        assert main(["--device", "cpu", "--ops", e.name, "--shapes", shape, "--backends", "reference,triton",
                     "--out", out, "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e]) == 0
    assert main(["--merge", a, b, "--out", m]) == 0
    rows, js, md = _read(m)
    assert [(r["backend"], r["shape"]) for r in rows] == [("reference", "decode_b4"), ("triton", "decode_b4"),
                                                          ("reference", "decode_b1"), ("triton", "decode_b1")]
    assert len(js["meta"]["parts"]) == 2 and "merged from" in md
    assert any(f.startswith("roofline_") for f in os.listdir(m))
    # re-measuring one row and merging it into the merged report: the row keeps its place, the parts stay apart
    c, m2 = str(tmp_path / "c"), str(tmp_path / "m2")
    assert main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b4", "--backends", "triton",
                 "--out", c, "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e]) == 0
    assert main(["--merge", m, c, "--out", m2]) == 0
    rows3, js3, _ = _read(m2)
    assert [(r["backend"], r["shape"]) for r in rows3] == [(r["backend"], r["shape"]) for r in rows]
    assert len(js3["meta"]["parts"]) == 3
    new = next(r for r in _read(c)[1]["rows"])
    assert next(r for r in js3["rows"] if r["backend"] == "triton" and r["shape"] == "decode_b4")["us_p50"] == \
        new["us_p50"]
    picked = pick_rows(js["rows"], 3, seed=1)
    assert len(picked) == 3 and {r["backend"] for r in picked} == {"reference", "triton"}
    res = repro_check(m, n=2, seed=0, extra_ops=[e])
    assert len(res) == 2
    for x in res:
        assert x["rerun_p50"] and x["rerun_p50"] > 0 and x["tol_pct"] >= 3.0
        assert x["within"] == (abs(x["delta_pct"]) <= x["tol_pct"])
    rows2, js2, md2 = _read(m)
    assert len(js2["meta"]["repro_check"]) == 2 and "Re-run check" in md2
    assert os.path.exists(os.path.join(m, "repro_check.txt"))


class _FakeCuda:
    """Just enough of torch.cuda to run perf.timers' CUDA paths on the CPU: a virtual device clock (µs) that kernel
    launches advance, graphs that record launches while capturing and replay them, events that read the clock."""

    def __init__(self):
        self.clock, self.capturing, self.nodes = 0.0, None, None

    def launch(self, us: float, syncs: bool = False):
        if self.capturing is not None:
            if syncs:
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            self.capturing.append(us)
        else:
            self.clock += us

    def install(self, monkeypatch):
        import contextlib
        import perf.timers as T
        fake = self

        class Graph:
            def capture_begin(self, pool=None):
                self.nodes = []
                fake.capturing = self.nodes

            def capture_end(self):
                fake.capturing = None

            def replay(self):
                fake.clock += sum(self.nodes)

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = fake.clock

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e3

        class Stream:
            def wait_stream(self, other):
                pass

        cuda = torch.cuda
        monkeypatch.setattr(cuda, "synchronize", lambda *a, **k: None)
        monkeypatch.setattr(cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(cuda, "Event", Event)
        monkeypatch.setattr(cuda, "Stream", Stream)
        monkeypatch.setattr(cuda, "current_stream", lambda *a: Stream())
        monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(cuda, "graph_pool_handle", lambda: None)
        monkeypatch.setattr(cuda, "_sleep", lambda cycles: setattr(fake, "clock", fake.clock + cycles / 2000))
        monkeypatch.setattr(T, "_flush_buffer", lambda: types.SimpleNamespace(zero_=lambda: fake.launch(80.0)))


@pytest.mark.parametrize("dev_us,n_sets", [(4.0, 8), (240.0, 1), (80_000.0, 1), (3.0, 1)])
def test_graph_timer_logic_with_a_fake_cuda(monkeypatch, dev_us, n_sets):
    """graph_time_us on a simulated device: per-call time = replay / calls exactly, calls are whole passes over the
    input sets, slow calls get calls = 1 and few replays, fast ones many calls per replay; every set is used."""
    from perf.timers import GRAPH_MAX_CALLS, MAX_REPLAYS, graph_time_us
    fake = _FakeCuda()
    fake.install(monkeypatch)
    used = []
    fns = [lambda i=i: (used.append(i), fake.launch(dev_us)) for i in range(n_sets)]
    t = graph_time_us(fns)
    assert t.method == "cudagraph" and t.p50_us == pytest.approx(dev_us) and t.spread_pct == pytest.approx(0)
    assert 1 <= t.calls <= GRAPH_MAX_CALLS and 5 <= t.samples <= MAX_REPLAYS
    assert set(used) == set(range(n_sets))
    if dev_us >= 10_000:
        assert t.calls == 1 and t.samples <= 7          # an 80 ms reference: ≈ 0.5 s of replays
    else:
        assert t.calls % n_sets == 0 and t.calls * dev_us >= min(2000.0, GRAPH_MAX_CALLS * dev_us) * 0.5
    t2 = graph_time_us(fns, calls=3, replays=7)
    assert (t2.calls, t2.samples) == (3, 7) and t2.p50_us == pytest.approx(dev_us)


def test_auto_timer_falls_back_to_events_when_capture_fails(monkeypatch):
    from perf.timers import time_fn
    fake = _FakeCuda()
    fake.install(monkeypatch)
    fn = lambda: fake.launch(50.0, syncs=True)  # noqa: E731 - an op that syncs the host
    t = time_fn([fn], "cuda", mode="auto")
    assert t.method == "events" and t.note.startswith("graph capture failed (RuntimeError: CUDA error")
    assert t.p50_us == pytest.approx(50.0) and t.samples >= 5
    assert fake.capturing is None                     # the capture was ended
    with pytest.raises(RuntimeError, match="graph capture failed"):
        time_fn([fn], "cuda", mode="cudagraph")
    ok = lambda: fake.launch(7.0)  # noqa: E731
    assert time_fn([ok], "cuda", mode="events").p50_us == pytest.approx(7.0)
    assert time_fn([ok], "cuda").method == "cudagraph"


def _nudged_kernel(x, w, cache, *, index, scale=1.0):
    """A right kernel that rounds differently: y = bf16(x·w·scale·(1 + 2⁻¹⁰)) flips about a quarter of the bf16
    values by one ulp (cos_diff ≈ 4e-6 over all of them: PASS), but over only the flipped ones it is ≈ 1.5e-5."""
    y32 = x.float() @ w.float() * scale
    y = (y32 * (1 + 2 ** -10)).to(x.dtype)
    cache[index] = y
    return y, y32.to(x.dtype).float().sum(-1)


@INTERPRETER
def test_cache_check_is_not_polluted_by_an_earlier_backends_timing(tmp_path):
    """Regression (H200 report: mla_prolog t128_n128_bf16 kv_cache 'FAIL' cos 1.7e-5 while the kernel matched the
    CPU reference to 4.7e-9): timing the reference wrote its cache rows into the shared inputs, so the next
    backend's 'original' cache already held the reference's values and the changed-region comparison kept only
    the elements that differ by an ulp. The cache must be compared over every slot either run wrote."""
    e = fake_entry("perf_test_nudged", kernel=_nudged_kernel)
    out = str(tmp_path / "nudged")
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "prefill_4k", "--backends", "reference,triton",
               "--out", out, "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e])
    rows, _, _ = _read(out)
    assert [r["check"] for r in rows] == ["baseline", "PASS"], rows[1]["check_detail"]
    assert rc == 0


def test_graph_plan_calls_and_replays():
    from perf.timers import GRAPH_MAX_CALLS, plan_calls, plan_replays
    assert plan_calls(80_000.0, 0.08, 1, 0.5) == 1                       # a slow reference: one call per replay
    assert plan_replays(0.25, 80_000.0) == 5                             # ... and the minimum of replays
    assert plan_calls(4.0, 1e-4, 8, 0.5) == GRAPH_MAX_CALLS              # a 4 µs kernel: full graphs
    c = plan_calls(6.0, 4e-4, 8, 0.5)                                    # capture cost caps it: 0.1 s / 0.4 ms
    assert c % 8 == 0 and c <= 250
    assert plan_calls(300.0, 2e-4, 1, 0.5) == 7                          # ≈ 2 ms per replay
    assert plan_calls(1000.0, 2e-4, 8, 0.5) == 8                         # one pass over the sets (8 ms) ...
    assert plan_calls(3000.0, 2e-4, 8, 0.5) == 1                         # ... unless that is > 5× the target
    assert plan_replays(0.45, 2000.0) == 100


def test_int8_near_tie_row_allows_rare_single_lsb_flips_only():
    """rms_norm_dynamic_quant's int8 output (H200 full report, hidden_T4096: 13 of 29 M elements off by 1 at near-ties):
    ±1 LSB at ≤ 1e-5 of the elements passes; 2 LSB anywhere, or ±1 at many places, fails; plain int8 stays exact."""
    from perf.check import compare
    g = torch.Generator().manual_seed(0)
    ref = torch.randint(-127, 128, (1000, 1000), generator=g, dtype=torch.int8)
    out = ref.clone()
    out.view(-1)[[5, 70_000, 999_999]] += 1
    assert compare(out, ref, "int8_near_tie").ok
    assert not compare(out, ref, "int8").ok
    two = ref.clone()
    two.view(-1)[5] += 2
    assert not compare(two, ref, "int8_near_tie").ok
    base = ref.clamp(-126, 126)
    bumped = base.clone()
    bumped.view(-1)[:1000] += 1
    assert not compare(bumped, base, "int8_near_tie").ok


def test_host_bound_rows_carry_the_spread_floor():
    """A call that syncs the host is timed by events that hold host time; re-runs on the H200 moved 10–55 %, so its
    spread column is at least HOST_BOUND_SPREAD_PCT; graph-timed rows keep their own spread."""
    from perf.timers import HOST_BOUND_SPREAD_PCT, Timing
    assert Timing(10.0, 10.1, 10.2, "events", host_bound=True).spread_pct == HOST_BOUND_SPREAD_PCT
    assert Timing(10.0, 10.1, 10.2, "cudagraph").spread_pct == pytest.approx(100 * 0.2 / 10.1)


def test_cli_exits_2_when_nothing_is_timed_and_rejects_bad_arguments(tmp_path, capsys):
    # a --shapes pattern matching nothing, or an unknown backend, must not exit 0 with nothing timed
    e = fake_entry()
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "zzz*", "--out", str(tmp_path / "none"), "--quick",
               "--no-layer", "--no-dispatch"], extra_ops=[e])
    assert rc == 2 and "nothing was timed" in capsys.readouterr().err
    for bad, msg in ((["--backends", "bogus"], "--backends takes"), (["--max-shapes", "0"], "--max-shapes must be"),
                     (["--repro-check", "-3"], "--repro-check must be")):
        with pytest.raises(SystemExit):
            main(["--device", "cpu", "--out", str(tmp_path / "x")] + bad)
        assert msg in capsys.readouterr().err


def test_cli_usage_errors_before_anything_runs(tmp_path, capsys, monkeypatch):
    """An unwritable --out, --ops with no match, --device cuda without CUDA, --device tpu, --budget-s -1 and
    repro_check -n -3 are each a usage error naming the argument, before any case runs (results are never lost
    after a whole run)."""
    import perf.__main__ as PM
    from perf.repro_check import main as repro_main
    ran = []
    monkeypatch.setattr(PM, "run_plan", lambda *a, **k: ran.append(a))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for bad, msg in ((["--out", str(blocker / "sub")], "--out"), (["--device", "cuda"], "--device cuda"),
                     (["--device", "tpu"], "--device takes"), (["--budget-s", "-1"], "--budget-s must be")):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "x")] + bad if bad[0] != "--out" else bad)
        assert msg in capsys.readouterr().err
    assert main(["--device", "cpu", "--ops", "amlaa", "--out", str(tmp_path / "y"), "--no-layer"]) == 2
    assert "'amlaa' matches no registered op" in capsys.readouterr().err
    assert not ran
    for bad, msg in ((["-n", "-3"], "-n must be"), ([], "does not exist")):
        with pytest.raises(SystemExit):
            repro_main([str(tmp_path / "missing.json")] + bad)
        assert msg in capsys.readouterr().err


def test_repro_command_keeps_arg_checks(tmp_path):
    # a run with --keep-arg-checks writes repro commands with it (the same configuration)
    e = fake_entry()
    out = str(tmp_path / "checks")
    rc = main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--out", out, "--quick", "--no-layer",
               "--no-dispatch", "--keep-arg-checks"], extra_ops=[e])
    rows, _, _ = _read(out)
    assert rc == 0 and rows and all("--keep-arg-checks" in r["repro"] for r in rows)


def test_every_python_file_of_the_repo_parses():
    """Scripts that CI never imports (GPU checks, tools) must at least parse: a stray parenthesis in a file no test
    imports is otherwise a SyntaxError that nothing notices."""
    import ast
    root = pathlib.Path(__file__).resolve().parents[1]
    skip = {".venv", "build", ".git", "__pycache__", "perf_out"}
    files = [p for p in root.rglob("*.py") if not (set(p.relative_to(root).parts) & skip)]
    assert len(files) > 50
    bad = []
    for p in files:
        try:
            ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        except SyntaxError as e:
            bad.append(f"{p.relative_to(root)}:{e.lineno}: {e.msg}")
    assert not bad, bad


# percent-of-peak arithmetic and explicit FLOP / byte counts
def test_roofline_percent_of_each_peak_on_h200():
    """pct_peak_compute / pct_peak_bw: TFLOPS over the TFLOPS peak, GB/s over the TB/s peak (×1e3)."""
    pk = P.PEAKS["h200_sxm"]
    m = roofline_metrics(10 ** 9, 10 ** 9, 250.0, "bf16", pk, {})      # 4 TFLOPS, 4000 GB/s
    assert m["pct_peak_bw"] == pytest.approx(100 * 4000 / (pk.hbm_tbs.value * 1e3))
    assert m["pct_peak_compute"] == pytest.approx(100 * 4.0 / pk.compute("bf16").value)
    assert 0 < m["pct_peak_bw"] <= 100 and 0 < m["pct_peak_compute"] <= 100


def test_layer_view_percent_of_peak(monkeypatch):
    """layer_view's per-op % peak = 100 · TFLOPS / the datasheet peak (and % achievable over the ceiling)."""
    from perf.layer import layer_view
    e = fake_entry()
    _fake_layer(monkeypatch, e, relu=False)
    pk = P.PEAKS["h200_sxm"]
    lv = layer_view("cpu", specs={e.name: e.spec}, peaks=pk, ceilings={"bf16": P.Ceiling(500.0, "test")})
    row = {o["op"]: o for o in lv["views"][0]["ops"]}[e.name]
    assert row["tflops"] > 0
    assert row["pct_peak"] == pytest.approx(100 * row["tflops"] / pk.compute("bf16").value)
    assert row["pct_achievable"] == pytest.approx(100 * row["tflops"] / 500.0)


def test_moe_gating_flops_count_the_bias_add():
    """The documented estimate: 6 ops per logit (+1 with a bias) + 3 per chosen expert."""
    M = ops.moe_gating
    x = torch.randn(4, 64)
    assert M.flops(x=x, k=8) == 4 * 64 * 6 + 3 * 4 * 8
    assert M.flops(x=x, k=8, bias=torch.zeros(64)) == 4 * 64 * 7 + 3 * 4 * 8


def test_rms_norm_dynamic_quant_bytes_formula():
    """Read x (+ residual), gamma (+ smooth); write x_int8, the fp32 scale and residual_out (always written)."""
    from ops import quant as Q
    x = torch.randn(4, 128).bfloat16()
    g = torch.ones(128).bfloat16()
    base = 4 * 128 * 2 + 128 * 2 + 4 * 128 + 4 * 4 + 4 * 128 * 2
    assert Q.bytes_rms_norm_dynamic_quant(x=x, gamma=g) == base
    assert Q.bytes_rms_norm_dynamic_quant(x=x, gamma=g, residual=x.clone(), smooth_scales=torch.ones(128)) == \
        base + 4 * 128 * 2 + 128 * 4


# ----------------------------------------------------------------------------------------------
# what the CPU run prints
# ----------------------------------------------------------------------------------------------
def test_cpu_run_header_says_what_was_timed_and_leaves_out_empty_columns(tmp_path, capsys):
    """With only the reference run on CPU: a header naming the device, the timer, the shapes, that nothing was
    checked (no check column), what each column means, and the CPU's measured ceilings instead of an empty
    % peak column; the Triton-on-CPU note once, whatever the number of ops."""
    e, e2 = fake_entry(), fake_entry("perf_test_bad", kernel=_bad_kernel)
    rc = main(["--device", "cpu", "--ops", f"{e.name},{e2.name}", "--shapes", "decode_b1", "--out",
               str(tmp_path / "h"), "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e, e2])
    cap = capsys.readouterr()
    assert rc == 0
    out = cap.out
    assert "ds-ops performance report on cpu" in out and "torch threads" in out
    assert "timer: wall clock (time.perf_counter)" in out
    assert "shapes: --shapes decode_b1" in out
    assert "check: only the reference ran, so there is nothing to compare it with" in out
    assert "columns:" in out and "% ceil" in out and "bf16 matmul" in out and "GB/s" in out
    (heading,) = [line for line in out.splitlines() if "µs p50" in line and "shape" in line]
    assert "% ceil" in heading and "% peak" not in heading and "check" not in heading
    assert "baseline" not in out
    both = cap.out + cap.err
    assert both.count("the Triton kernels run on CPU only under the interpreter") == 2   # once live, once at the end
    with open(tmp_path / "h" / "summary.md") as f:
        md = f.read()
    assert "* timer: wall clock" in md and "* check: only the reference ran" in md


@INTERPRETER
def test_check_column_compares_with_the_reference_when_another_backend_ran(tmp_path, capsys):
    e = fake_entry()
    assert main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--backends", "reference,triton",
                 "--out", str(tmp_path / "c"), "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e]) == 0
    out = capsys.readouterr().out
    assert "check: each backend's outputs against the reference's" in out
    assert "golden" in out and "PASS" in out and "baseline" not in out
    (heading,) = [line for line in out.splitlines() if "µs p50" in line and "shape" in line]
    assert "check" in heading


def test_cpu_layer_view_needs_no_profiler(monkeypatch):
    """On CPU the layer view times each ds call with a wall clock: the torch profiler (whose start/stop log lines
    went to stderr) is never started; the rest of the layer is the explained '(not a ds op)' row."""
    import torch.profiler
    from perf.layer import OTHER, layer_view

    def no_profiler(*a, **k):
        raise AssertionError("the CPU layer view started the torch profiler")

    monkeypatch.setattr(torch.profiler, "profile", no_profiler)
    e = fake_entry()
    _fake_layer(monkeypatch, e)
    lv = layer_view("cpu", specs={e.name: e.spec})
    assert lv["available"], lv["reason"]
    (view,) = lv["views"]
    assert view["time_basis"].startswith("wall time of one call")
    ops_ = {o["op"]: o for o in view["ops"]}
    assert ops_[e.name]["calls"] == 1 and 0 < ops_[e.name]["time_us"] <= view["profiled_us"]
    assert sum(o["share_pct"] for o in view["ops"]) == pytest.approx(100) and OTHER in ops_


# ----------------------------------------------------------------------------------------------
# Ascend C twin rows: the modeled 910B time
# ----------------------------------------------------------------------------------------------
def _twin_entry() -> S.OpEntry:
    """A fake op with an Ascend C kernel that runs on CPU tensors (as through the twin)."""
    return fake_entry("perf_test_twin", backend="ascendc")


MODEL = {"time_us": 12.5, "pipes": {"MTE2": 11.0, "CUBE": 3.0}, "bound": "memory", "label": "910B3 pipe model"}


@pytest.fixture
def twin(monkeypatch):
    """The Ascend C twin 'built' and ops._ascendc.modeled returning MODEL (what it was called with in calls)."""
    from ops import _ascendc
    calls = []
    monkeypatch.setattr(_ascendc, "unavailable_reason", lambda device_type="npu": None if device_type == "cpu"
                        else "no NPU")

    def modeled(op_name, inputs):
        calls.append((op_name, sorted(inputs)))
        return dict(MODEL)

    monkeypatch.setattr(_ascendc, "modeled", modeled, raising=False)
    return calls


def test_ascendc_twin_rows_carry_the_modeled_910b_time(tmp_path, capsys, twin):
    """An Ascend C twin row is checked against the reference like any backend, but its time is the modeled 910B
    time (never the twin's wall time), its % peak is against the 910B3's peaks, and it says 'modeled 910B' in the
    row, the table and the header; the reference row beside it keeps its measured CPU time."""
    e = _twin_entry()
    out = str(tmp_path / "tw")
    assert main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b4", "--out", out, "--quick",
                 "--no-layer", "--no-dispatch"], extra_ops=[e]) == 0
    text = capsys.readouterr().out
    rows, js, md = _read(out)
    ref, tw = rows
    assert (ref["backend"], ref["time_kind"], tw["backend"], tw["time_kind"]) == \
        ("reference", "measured", "ascendc", "modeled 910B")
    assert tw["check"] == "PASS" and twin == [(e.name, ["cache", "index", "scale", "w", "x"])]
    assert float(tw["us_p50"]) == MODEL["time_us"] and tw["bound"] == "memory"
    assert "modeled 910B" in tw["timer"] and "MTE2 11 µs" in tw["timer"] and "modeled 910B" in tw["device"]
    pk = P.PEAKS["ascend_910b3"]
    flops, nbytes = int(tw["flops"]), int(tw["bytes"])
    roof_us = max(flops / (pk.bf16.value * 1e12), nbytes / (pk.hbm_tbs.value * 1e12)) * 1e6
    assert float(tw["pct_peak"]) == pytest.approx(100 * roof_us / MODEL["time_us"])
    assert float(tw["pct_peak_bw"]) == pytest.approx(100 * nbytes / (MODEL["time_us"] * 1e-6) / (pk.hbm_tbs.value * 1e12))
    assert ref["pct_peak"] == "" and float(ref["us_p50"]) > 0
    assert "ascendc (modeled 910B)" in text and "modeled 910B: the Ascend C kernels run through the CPU twin" in text
    assert "% peak" in text and "golden" in text
    assert "ascendc (modeled 910B)" in md
    from perf.repro_check import pick_rows
    assert {r["backend"] for r in pick_rows(js["rows"], 5, 0)} == {"reference"}     # nothing to re-measure


def test_ascendc_twin_row_without_a_model_is_checked_not_timed(tmp_path, monkeypatch, twin):
    from ops import _ascendc
    monkeypatch.delattr(_ascendc, "modeled")
    e = _twin_entry()
    out = str(tmp_path / "nm")
    assert main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b1", "--backends", "ascendc", "--out", out,
                 "--quick", "--no-layer", "--no-dispatch"], extra_ops=[e]) == 2       # nothing was timed
    (row,) = _read(out)[0]
    assert row["check"] == "PASS" and row["us_p50"] == "" and "no modeled 910B time: AttributeError" in row["note"]


def test_modeled_chip_follows_the_models_label():
    from perf.modeled import MODELED_CHIP, chip_for
    assert chip_for("910B2 pipe model").key == "ascend_910b2"
    assert chip_for("Ascend 910B3").key == "ascend_910b3"
    assert chip_for("").key == MODELED_CHIP


# ----------------------------------------------------------------------------------------------
# markdown tables, pytest-benchmark, batch invariance
# ----------------------------------------------------------------------------------------------
def test_markdown_tables_of_the_committed_h200_report(capsys):
    """`python -m perf --markdown` prints the committed H200 report (path: perf.report.H200_REPORT) as one table:
    every timed, passing row, the achieved rate of its bound and that rate's % of the datasheet peak."""
    from perf.markdown import resolve
    from perf.report import H200_REPORT, load_json
    js = load_json(resolve(H200_REPORT))
    assert main(["--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### NVIDIA H200\n") and out.count("### ") == 1
    assert "| op | shape | backend | µs | achieved | % of peak | bound |" in out
    timed = [r for r in js["rows"] if r.get("us_p50") is not None and r["check"] in ("PASS", "baseline")]
    assert out.count("\n| ") - 1 == len(timed) > 100
    r = next(r for r in timed if r["backend"] == "triton" and r["bound"] == "memory")
    from perf.report import _fmt
    assert (f"| {r['op']} | {r['shape']} | triton | {_fmt(r['us_p50'])} | {_fmt(r['gbps'] / 1e3)} TB/s | "
            f"{_fmt(r['pct_peak_bw'])} | memory |") in out
    c = next(r for r in timed if r["backend"] == "triton" and r["bound"] == "compute")
    assert f"| {_fmt(c['tflops'])} {'TOP/s' if c['compute'] == 'int8' else 'TFLOP/s'} | {_fmt(c['pct_peak_compute'])} |" in out
    assert main(["--markdown", "--ops", "amla", "--backends", "triton"]) == 0
    assert capsys.readouterr().out.count("| amla |") == sum(1 for r in timed if r["op"] == "amla"
                                                           and r["backend"] == "triton")


def test_markdown_splits_devices_and_refuses_a_non_report(tmp_path, capsys, twin):
    e = _twin_entry()
    out = str(tmp_path / "m")
    main(["--device", "cpu", "--ops", e.name, "--shapes", "decode_b4", "--out", out, "--quick", "--no-layer",
          "--no-dispatch"], extra_ops=[e])
    capsys.readouterr()
    assert main(["--markdown", out]) == 0
    text = capsys.readouterr().out
    assert text.count("### ") == 2 and "(modeled 910B)" in text and "time from the Ascend C pipe model" in text
    assert main(["--markdown", str(tmp_path / "missing")]) == 2
    assert "is not a readable perf report" in capsys.readouterr().err


def test_pytest_benchmark_runs_the_report_cases(tmp_path):
    """`pytest perf --benchmark-only` collects one benchmark per op × the report's CPU shapes × runnable backend
    (the reference on CPU, and the Ascend C twin where it builds) and records FLOPs, bytes, % of the measured ceiling and the bound in extra_info; the
    repository's own `pytest` (testpaths) never collects it."""
    import tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
    from perf.benchmarks import cases
    want = cases(torch.device("cpu"))
    from ops import _ascendc
    twin = {"ascendc"} if _ascendc.unavailable_reason("cpu") is None else set()
    assert want and {b for _, _, b in want} == {"reference"} | twin
    for e, c, _ in want:
        assert c.name in e.spec.shapes
        if any(S.is_cpu_shape(n, s) for n, s in e.spec.shapes.items()):
            assert S.is_cpu_shape(c.name, e.spec.shapes[c.name])
    js = tmp_path / "b.json"
    # a fresh pytest, not an xdist worker (pytest-benchmark disables itself under xdist)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("PYTEST_")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "perf", "--benchmark-only", "-q", "-k",
                        "moe_gating_top_k-deepseek_v3_T1-reference", f"--benchmark-json={js}"], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"1 passed, {len(want) - 1} deselected" in r.stdout
    (b,) = json.loads(js.read_text())["benchmarks"]
    info = b["extra_info"]
    assert info["flops"] > 0 and info["bytes"] > 0 and info["bound"] in ("memory", "compute")
    assert info["pct_ceiling"] > 0 and info["pct_peak"] is None and info["timer"].startswith("wall")
    assert b["stats"]["rounds"] >= 3 and b["stats"]["min"] > 0


def test_benchmark_extra_info_keeps_the_modeled_time_apart(twin):
    from perf.benchmarks import extra_info, make_runner, run, runnable_backends
    e = _twin_entry()
    cpu = torch.device("cpu")
    assert runnable_backends(e, cpu) == ["reference", "ascendc"]
    assert runnable_backends(fake_entry(), cpu) == ["reference"]         # the interpreter is not a benchmark
    runner = make_runner(cpu)
    case = S.plan_shapes(e, ["decode_b1"], device_type="cpu", quick=True)[0]
    row = run(runner, e, case, "ascendc")
    info = extra_info(row)
    assert row["check"] == "PASS" and row["samples_us"] and info["timer"].startswith("CPU twin wall clock")
    m = info["modeled 910B"]
    assert m["time_us"] == MODEL["time_us"] and "modeled 910B" in m["device"] and m["pct_peak"] > 0
    assert info["device"].startswith("cpu") and info["pct_peak"] is None


def test_amla_batch_invariance_needs_the_mode_and_cuda(monkeypatch, capsys):
    from perf import batch_invariance as BI
    monkeypatch.delattr(ops, "batch_invariant", raising=False)
    assert main(["--amla-batch-invariance"]) == 2
    assert "ops.batch_invariant() does not exist" in capsys.readouterr().err
    entered = []

    class Mode:
        def __enter__(self):
            entered.append(os.environ.get(BI.ENV))

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(ops, "batch_invariant", Mode, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--amla-batch-invariance"]) == 2
    assert "runs on CUDA only" in capsys.readouterr().err
    monkeypatch.setenv(BI.ENV, "1")
    with BI.mode(False):
        assert BI.ENV not in os.environ           # off means off, whatever the environment says
    assert os.environ[BI.ENV] == "1"
    names = BI.shape_names()
    assert len(names) == 36 and set(names) <= set(SPECS["amla"].shapes)


def test_part_sets_the_h200_halves():
    """--part 1 / 2 split the ops of the H200 report in two (every registered op in exactly one), with a budget and
    a re-run check that fit one device command; explicit options win."""
    import perf.__main__ as PM
    assert sorted(PM.PARTS["1"]["ops"] + PM.PARTS["2"]["ops"]) == sorted(SPECS)
    a = PM.parse_args(["--part", "2", "--device", "cpu", "--out", os.devnull])
    assert a.ops == PM.PARTS["2"]["ops"] and a.no_layer and a.budget_s == PM.PART_BUDGET_S
    assert a.repro_check == PM.PART_REPRO_N
    b = PM.parse_args(["--part", "1", "--ops", "amla", "--budget-s", "10", "--device", "cpu", "--out", os.devnull])
    assert b.ops == ["amla"] and b.budget_s == 10 and not b.no_layer


def test_amla_batch_invariance_times_each_mode_alternately(monkeypatch):
    """run_grid times off / on / on / off (each timing inside its mode), reports each mode's median, their ratio,
    and checks the on output against the off one; the table shows both times and the ratio."""
    from perf import batch_invariance as BI
    from perf.timers import Timing
    active, seen = [False], []

    class Mode:
        def __enter__(self):
            active[0] = True

        def __exit__(self, *exc):
            active[0] = False

    def timer(fns, budget_s):
        seen.append(active[0])
        fns[-1]()
        return Timing(0.0, (2.0 if active[0] else 1.0) + 0.1 * len(seen), 0.0, "cudagraph")

    monkeypatch.setattr(ops, "batch_invariant", Mode, raising=False)
    (row,) = BI.run_grid(["cpu_b2_sq2_n8_l300"], torch.device("cpu"), backend="reference", timer=timer)
    assert seen == [False, True, True, False]
    assert row["us_off"] == pytest.approx((1.1 + 1.4) / 2) and row["us_on"] == pytest.approx((2.2 + 2.3) / 2)
    assert row["ratio"] == pytest.approx(row["us_on"] / row["us_off"])
    assert row["check"] == "PASS" and row["bitwise_equal"]
    text = BI.table([row], "cpu")
    assert "| cpu_b2_sq2_n8_l300 | 1.25 | 2.25 | 1.800 | PASS | yes |" in text
