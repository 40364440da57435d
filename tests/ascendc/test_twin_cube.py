"""The twin's cube (AIC) side: a negative control per cube rule (controls/cube_controls.cpp, same order as
CONTROLS), and a full GM -> L1 -> L0A/L0B -> Mmad -> Fixpipe -> GM matmul (controls/cube_positive.cpp) against
torch.matmul: bit-exact for int8 -> int32, within fp32 accumulation rounding for fp16/bf16 -> fp32, and the
Fixpipe conversion modes (fp32 -> fp16/bf16 RNE, int32 -> fp16/bf16 with a per-tensor or per-channel scale)."""
import ctypes

import pytest
import torch

from ops import _ascendc_build
from tests.ascendc.twin_fixtures import report  # noqa: F401 (fixture)

pytestmark = pytest.mark.ascendc

SOURCES = ["tests/ascendc/controls/cube_controls.cpp", "tests/ascendc/controls/cube_positive.cpp"]
LOAD = "LoadData(L1->L0, LoadData2DParams)"
ND2NZ = "DataCopy(GM->L1, Nd2NzParams)"

# (kernel, rule id, text the message must contain: the call, and the detail)
CONTROLS = [
    ("l1_overflow", "ub-overflow", "TPipe::InitBuffer: L1 overflow: 262176 B requested at offset 262144"),
    ("l0a_overflow", "ub-overflow", "TPipe::InitBuffer: L0A overflow: 65056 B requested at offset 512"),
    ("l0c_overflow", "ub-overflow", "TPipe::InitBuffer: L0C overflow: 65568 B requested at offset 65600"),
    ("l0a_align", "cube-align", f"{LOAD}: dst L0A address 544 is not 512-byte aligned"),
    ("nd2nz_params", "nd2nz-params", f"{ND2NZ}: dstNzC0Stride 0 outside [1, 16384]"),
    ("nd2nz_position", "cube-position", f"{ND2NZ}: dst is in UB, the API takes L1"),
    ("loaddata_fractal", "loaddata-fractal", f"{LOAD}: src holds 256 B, less than one 512-byte fractal"),
    ("loaddata_repeat", "loaddata-params", f"{LOAD}: repeatTimes 0 outside [1, 255]"),
    ("loaddata_transpose_int8", "loaddata-params", f"{LOAD}: ifTranspose on 1-byte elements"),
    ("mmad_position", "cube-position", "Mmad: fm is in L0B, the API takes L0A"),
    ("mmad_params", "mmad-params", "Mmad: m 4096 outside [0, 4095]"),
    ("mmad_bounds", "operand-bounds", "Mmad: fm: 1024 B exceed the LocalTensor's 512 B"),
    ("fixpipe_quant", "fixpipe-quant", "Fixpipe(L0C->GM): quantPre F322F16 does not convert float to float"),
    ("fixpipe_scale_tensor", "fixpipe-quant", "Fixpipe(L0C->GM): quantPre VDEQF16 needs the cbufWorkspace"),
    ("fixpipe_params", "fixpipe-params", "Fixpipe(L0C->GM): srcStride 8 < mSize 16"),
    ("raw_mte2_mte1", "pipe-hazard", f"RAW: {LOAD} [PIPE_MTE1, call #3] reads L1 bytes [0, 32) last written by "
                                     f"{ND2NZ} [PIPE_MTE2, call #1] with no EnQue/DeQue, "
                                     "SetFlag/WaitFlag<HardEvent::MTE2_MTE1>"),
    ("raw_mte1_m", "pipe-hazard", f"RAW: Mmad [PIPE_M, call #5] reads L0A bytes [0, 32) last written by {LOAD} "
                                  "[PIPE_MTE1, call #3] with no EnQue/DeQue, SetFlag/WaitFlag<HardEvent::MTE1_M>"),
    ("raw_m_fix", "pipe-hazard", "RAW: Fixpipe(L0C->GM) [PIPE_FIX, call #6] reads L0C bytes [0, 32) last written by "
                                 "Mmad [PIPE_M, call #5] with no EnQue/DeQue, SetFlag/WaitFlag<HardEvent::M_FIX>"),
    ("war_m_mte1", "pipe-hazard", f"WAR: {LOAD} [PIPE_MTE1, call #6] overwrites L0A bytes [0, 32) still being read "
                                  "by Mmad [PIPE_M, call #5] with no EnQue/DeQue, SetFlag/WaitFlag<HardEvent::M_MTE1>"),
    ("war_fix_m", "pipe-hazard", "WAR: Mmad [PIPE_M, call #7] overwrites L0C bytes [0, 32) still being read by "
                                 "Fixpipe(L0C->GM) [PIPE_FIX, call #6] with no EnQue/DeQue, "
                                 "SetFlag/WaitFlag<HardEvent::FIX_M>"),
    ("gm_raw_fix_mte2", "pipe-hazard", f"RAW on GM: {ND2NZ} [PIPE_MTE2, call #7] reads GM bytes this core wrote with "
                                       "Fixpipe(L0C->GM) [PIPE_FIX, call #6] with no "
                                       "SetFlag/WaitFlag<HardEvent::FIX_MTE2>"),
]


@pytest.fixture(scope="module")
def cube_lib() -> ctypes.CDLL:
    """The cube control + matmul kernels library (cached build)."""
    lib = _ascendc_build.load("twin_cube_tests", SOURCES)
    lib.twin_cube_matmul.argtypes = [ctypes.c_int] * 3 + [ctypes.c_uint32] * 4 + [ctypes.c_void_p] * 3 + [
        ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def test_every_cube_control_is_listed(cube_lib):
    assert cube_lib.twin_cube_control_count() == len(CONTROLS)


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_cube_control_breaks_the_rule(cube_lib, report, index):
    _, rule, text = CONTROLS[index]
    assert cube_lib.twin_cube_control(index, 0, ctypes.byref(report)) == 0
    assert not report.ok
    assert report.rule == rule, report.message
    assert report.message.startswith(f"[{rule}] ")
    assert text in report.message, report.message


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_fixed_cube_control_passes(cube_lib, report, index):
    assert cube_lib.twin_cube_control(index, 1, ctypes.byref(report)) == 0
    assert report.ok, report.message
    assert report.modeled_ns > 0
