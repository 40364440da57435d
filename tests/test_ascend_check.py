"""Tests of tools/ascend_check.py, the Ascend 910B compile check of the Triton kernels.

Two layers:
* parsing of bishengir output (error filtering, overflow messages, planned footprint, docs markers) on text
  captured from bishengir-compile 1.2.0: always runs;
* end to end on the fixture kernels in tests/ascend_fixtures/ through triton-ascend + bishengir-compile: needs the
  triton-ascend venv (``$DS_OPS_ASCEND_VENV``, default build/ascend-venv; created by
  ``python tools/ascend_check.py --setup-only``). Without it these tests skip, unless ``DS_OPS_REQUIRE_ASCEND=1``
  (set in CI, which creates the venv first), where a missing venv is a failure.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "ascend_fixtures")
_spec = importlib.util.spec_from_file_location("ascend_check", os.path.join(REPO, "tools", "ascend_check.py"))
ac = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ac)

VENV = os.path.abspath(os.environ.get(ac.ENV_VENV) or ac.DEFAULT_VENV)

# ------------------------------------------------------------------------------------------------
# parsing (no toolchain needed)
# ------------------------------------------------------------------------------------------------
PASS_LOG = """[ERROR] Failed to run `hivmc --version`.
[WARNING] Failed to detect hivmc version for backward compatibility
[ERROR] Cannot find hivmc under $PATH
loc("/x/kernel.ttadapter.mlir":1:1): error: External hivmc run fails, returning module before running external compiler
[ERROR] Failed to run BiShengIR pipeline
"""
UB_LOG = """[NOTE] Ub overflow detected; automatically set enable-code-motion to false and retrying compilation.
loc("/x/kernel.ttadapter.mlir":1:1): error: Failed to run BiShengHIR pipeline
loc("/x/kernel.ttadapter.mlir":2:3): error: ub overflow, requires 4194304 bits while 1572864 bits available! (possible reason: tiling basic block is too large)
[ERROR] Failed to run BiShengIR pipeline
"""
HIVM = """module attributes {hacc.target_device_spec = #hacc.target_device_spec<#dlti.dl_entry<"UB_SIZE", 1572864 : i32>, #dlti.dl_entry<"L1_SIZE", 4194304 : i32>, #dlti.dl_entry<"L0C_SIZE", 1048576 : i32>>, hivm.module_core_type = #hivm.module_core_type<AIC>} {
    %c24576_i64 = arith.constant 24576 : i64
    %off = arith.constant 65536 : i64
    %0 = hivm.hir.pointer_cast(%c24576_i64) : memref<4x4x16x16xf16, #hivm.address_space<cbuf>>
    %1 = hivm.hir.pointer_cast(%c0_i64, %off) : memref<1024xf32, #hivm.address_space<ub>>
    %2 = hivm.hir.pointer_cast(%c0_i64) : memref<4x4x16x16xf32, strided<[1024, 256, 16, 1]>, #hivm.address_space<cc>>
    %3 = hivm.hir.pointer_cast(%c4096_i64) : memref<0xf32, #hivm.address_space<ub>>
"""


def test_hivmc_missing_alone_is_no_error():
    assert ac.compiler_errors(PASS_LOG) == []


def test_overflow_message_is_kept_without_location_and_parsed():
    errs = ac.compiler_errors(UB_LOG)
    assert errs == ["error: ub overflow, requires 4194304 bits while 1572864 bits available! "
                    "(possible reason: tiling basic block is too large)"]
    assert ac.overflow_requirements(errs) == {"ub": (512 << 10, 192 << 10)}
    assert ac.overflow_requirements(["error: cc overflow, requires 2097152 bits while 1048576 bits available!"]) \
        == {"cc": (256 << 10, 128 << 10)}


def test_footprint_reads_offsets_sizes_multibuffer_and_named_constants():
    fp = ac.planned_footprint(HIVM)
    # cbuf: 24576 + 4*4*16*16*2; ub: second buffer of a multi-buffered pair at the named constant 65536 + 4 KiB;
    # cc: strided layout still counts its 4*4*16*16 f32 = 16 KiB
    assert fp == {"cbuf": 24576 + 8192, "ub": 65536 + 4096, "cc": 16384}
    assert ac.device_budgets(HIVM)["ub"] == 192 << 10 and ac.device_budgets(HIVM)["cc"] == 128 << 10
    assert ac.core_type(HIVM) == "AIC"


def _manifest(status="PASS", fp=None, errors=()):
    case = dict(name="c1", kernel="k", constexprs={"BLOCK": 8}, status=status, footprint=fp or {"ub": 2048},
                budgets=dict(ac.BUDGETS), overflow={}, errors=list(errors), flags=["--target=Ascend910B3"],
                core="AIV")
    m = dict(arch="Ascend910B3", versions={"triton-ascend": "3.2.0", "ascendnpu-ir": "1.2.0"},
             modules=[dict(module="m", path="ops/triton/m.py", error=None, cases=[case])])
    m["failures"] = ac.failures(m)
    return m


def test_docs_section_replaced_between_markers_keeping_hand_text(tmp_path):
    md = tmp_path / "ascend.md"
    assert ac.write_docs(str(md), _manifest(), [])
    text = md.read_text()
    assert "compile-checked" in text and "2 KiB (1%)" in text and "PASS to hivmc" in text
    md.write_text("# my title\nhand text\n" + text[text.index(ac.DOC_BEGIN):] + "\nafter\n")
    assert ac.write_docs(str(md), _manifest(status="FAIL", errors=["error: ub overflow, x"]), [])
    text = md.read_text()
    assert text.startswith("# my title\nhand text\n") and text.endswith("\nafter\n")
    assert "FAIL" in text and "PASS to hivmc" not in text and text.count(ac.DOC_BEGIN) == 1
    assert not ac.write_docs(str(md), _manifest(status="FAIL", errors=["error: ub overflow, x"]), [])


def test_discovery_skips_init_and_private_helpers_only(tmp_path):
    d = tmp_path / "ops" / "triton"
    d.mkdir(parents=True)
    for f in ("__init__.py", "_common.py", "amla.py", "quant.py", "notes.txt"):
        (d / f).write_text("")
    mods, skipped = ac.discover(str(tmp_path))
    assert [os.path.basename(m) for m in mods] == ["amla.py", "quant.py"]
    assert [f for f, _ in skipped] == ["_common.py"]


def test_every_jit_function_of_the_kernel_modules_is_covered_or_listed():
    """The coverage rule of tools/_ascend_lower.py, in the test venv (upstream Triton), on every kernel module:
    each @triton.jit function is a case's kernel, a helper one of them calls, or in ASCEND_NOT_COMPILED with a
    reason. (The toolchain run reports the same, but only where the triton-ascend venv exists; a helper added to a
    CUDA-only kernel without a listing once passed here and failed only in CI's Ascend step.)"""
    pytest.importorskip("triton")
    spec = importlib.util.spec_from_file_location("_ascend_lower", os.path.join(REPO, "tools", "_ascend_lower.py"))
    low = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(low)
    mods, _ = ac.discover(REPO)
    assert mods
    for path in mods:
        mod = importlib.import_module("ops.triton." + os.path.splitext(os.path.basename(path))[0])
        kernels = low._jit_functions(mod)
        covered = {low._unwrap(c["fn"]).__name__ for c in mod.ascend_compile_cases()}
        not_compiled = dict(getattr(mod, "ASCEND_NOT_COMPILED", {}) or {})
        assert kernels and covered <= set(kernels), path
        assert low.uncovered_kernels(kernels, covered, not_compiled) == [], path
        assert all(isinstance(r, str) and r for r in not_compiled.values()), path
        if not_compiled:   # the rule bites: drop the listing of one CUDA-only kernel and it is reported
            name = sorted(not_compiled)[0]
            rest = {k: v for k, v in not_compiled.items() if k != name}
            assert name in low.uncovered_kernels(kernels, covered, rest), path


# ------------------------------------------------------------------------------------------------
# end to end through triton-ascend + bishengir-compile
# ------------------------------------------------------------------------------------------------
def _venv_or_skip():
    why = ac.venv_ok(VENV)
    if why is None:
        return VENV
    msg = (f"no triton-ascend venv at {VENV} ({why}); create it with `python tools/ascend_check.py --setup-only` "
           f"(about 35 s, 1.7 GB) or point ${ac.ENV_VENV} at one")
    if os.environ.get("DS_OPS_REQUIRE_ASCEND") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    venv = _venv_or_skip()
    mods = [os.path.join(FIX, f) for f in ("small_kernels.py", "oversized_kernels.py", "no_cases.py",
                                            "partial_cases.py", "unsupported_kernels.py")]
    man = ac.run_check(mods, venv, str(tmp_path_factory.mktemp("ascend_check")), create=False, log=lambda *a: None)
    return {m["module"]: m for m in man["modules"]}, man


def _case(results, module, name):
    return {c["name"]: c for c in results[0][module]["cases"]}[name]


def test_versions_are_the_pinned_toolchain(results):
    v = results[1]["versions"]
    assert v["triton-ascend"] == "3.2.0" and v["ascendnpu-ir"] == "1.2.0"
    assert "bishengir-compile 1.2.0" in v["bishengir-compile"]


@pytest.mark.parametrize("name", ["add_BLOCK1024", "persistent_scale_bf16", "matmul_f16_64x64x64", "dot_i8_64"])
def test_small_kernels_pass_to_hivmc_with_footprint(results, name):
    c = _case(results, "small_kernels", name)
    assert c["status"] == "PASS", c["errors"]
    assert c["errors"] == [] and c["flags"][0] == "--target=Ascend910B3"
    assert "--enable-auto-multi-buffer=True" in c["flags"] and "--enable-triton-kernel-compile=true" in c["flags"]
    assert c["footprint"], "a passing kernel must show its planned on-chip footprint"
    for mem, b in c["footprint"].items():
        assert 0 < b <= c["budgets"][mem]


def test_small_kernel_footprints_are_the_planned_tiles(results):
    add = _case(results, "small_kernels", "add_BLOCK1024")
    assert add["core"] == "AIV" and set(add["footprint"]) == {"ub"}
    assert add["footprint"]["ub"] == 2 * 1024 * 4          # x and y tiles; the sum reuses x's slot (bishengir 1.2.0)
    mm = _case(results, "small_kernels", "matmul_f16_64x64x64")
    assert mm["core"] == "AIC"
    assert mm["footprint"]["cc"] == 64 * 64 * 4           # the fp32 accumulator lives in L0C
    assert mm["footprint"]["cbuf"] == 4 * 64 * 64 * 2     # A and B fp16 tiles, double-buffered in L1


def test_oversized_ub_tile_fails_with_ub_overflow(results):
    c = _case(results, "oversized_kernels", "add_ub_overflow")
    assert c["status"] == "FAIL"
    assert any("ub overflow, requires 4194304 bits while 1572864 bits available" in e for e in c["errors"])
    assert c["overflow"] == {"ub": [512 << 10, 192 << 10]}
    assert "needs 512 KiB > 192 KiB" in ac._mem_cell(c, "ub")


def test_oversized_accumulator_fails_with_cc_overflow(results):
    c = _case(results, "oversized_kernels", "matmul_cc_overflow")
    assert c["status"] == "FAIL"
    assert any("cc overflow" in e for e in c["errors"]), c["errors"]
    assert c["overflow"]["cc"] == [256 << 10, 128 << 10]   # 256x256 fp32 accumulator vs 128 KiB L0C


def test_module_with_kernels_and_no_cases_is_a_failure(results):
    m = results[0]["no_cases"]
    assert m["cases"] == [] and "forgotten_kernel" in m["error"] and "ascend_compile_cases" in m["error"]
    assert any(f.startswith("tests/ascend_fixtures/no_cases.py:") for f in results[1]["failures"])


def test_uncovered_kernel_is_a_failure_but_helpers_and_excused_kernels_are_not(results):
    m = results[0]["partial_cases"]
    assert m["uncovered"] == ["orphan_kernel"] and "orphan_kernel" in m["error"]
    assert m["not_compiled"] == {"debug_kernel": "CUDA-only debugging aid, never launched on an NPU"}
    assert _case(results, "partial_cases", "covered_BLOCK256")["status"] == "PASS"
    assert results[0]["small_kernels"]["error"] is None    # _scale is a helper called by a covered kernel


def test_language_subset_violation_fails_in_the_front_end(results):
    c = _case(results, "unsupported_kernels", "add_f64")
    assert c["status"] == "FAIL"
    assert "Triton -> Linalg failed" in c["errors"][0] and "fp64" in c["errors"][0]


def test_cli_exit_status_and_report(tmp_path):
    venv = _venv_or_skip()
    cmd = [sys.executable, os.path.join(REPO, "tools", "ascend_check.py"), "--no-create", "--venv", venv,
           "--out", str(tmp_path / "out")]
    env = dict(os.environ)
    ok = subprocess.run(cmd + ["--write-docs", str(tmp_path / "a.md"), os.path.join(FIX, "small_kernels.py")],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "all cases PASS up to hivmc" in ok.stdout and "matmul_f16_64x64x64" in ok.stdout
    doc = (tmp_path / "a.md").read_text()
    assert "triton-ascend 3.2.0, ascendnpu-ir 1.2.0" in doc and "have not run on an NPU" in doc
    bad = subprocess.run(cmd + [os.path.join(FIX, "oversized_kernels.py")], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "ub overflow" in bad.stderr and "cc overflow" in bad.stderr
