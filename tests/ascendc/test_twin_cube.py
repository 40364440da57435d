"""The twin's cube (AIC) side: a negative control per cube rule (controls/cube_controls.cpp, same order as
CONTROLS), and a full GM -> L1 -> L0A/L0B -> Mmad -> Fixpipe -> GM matmul (controls/cube_positive.cpp) against
torch.matmul: bit-exact for int8 -> int32, within fp32 accumulation rounding for fp16/bf16 -> fp32, and the
Fixpipe conversion modes (fp32 -> fp16/bf16 RNE, int32 -> fp16/bf16 with a per-tensor or per-channel scale)."""
import ctypes

import pytest
import torch

from ops import _ascendc_build
from tests.ascendc.twin_fixtures import assert_breaks, assert_fixed_passes, report  # noqa: F401 (fixture)

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
    ("nd2nz_position", "cube-position", f"{ND2NZ}: dst is in L0A, the API takes L1"),
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
    ("queue_sync_cube", "pipe-hazard", f"RAW: {LOAD} [PIPE_MTE1, call #2] reads L1 bytes [0, 32) last written by "
                                       f"{ND2NZ} [PIPE_MTE2, call #1]"),
    ("core_memory", "core-memory", "TPipe::InitBuffer: UB is not on this cube (AIC) core"),
    ("vector_core_memory", "core-memory", "TPipe::InitBuffer: L1 is not on this vector (AIV) core"),
    ("kernel_type", "kernel-type", "KERNEL_TASK_TYPE_DEFAULT: kernel type 0 does not match the launch (MIX_AIC_1_2)"),
    ("cross_flag_id", "cross-core-flag", "flagId 11 outside [0, 10] (Atlas A2)"),
    ("cross_flag_pending", "cross-core-flag", "CrossCoreSetFlag<2, PIPE_FIX>: flagId 1 already has 15 sets pending"),
    ("cross_flag_hang", "cross-core-flag", "CrossCoreWaitFlag: flagId 2 can never be set: every other core has "
                                           "returned or is waiting (a hang on hardware) (AIC 0)"),
    ("mix_sync_all", "sync-all", "SyncAll: SyncAll in a MIX_AIC_1_2 launch is not modeled"),
]


@pytest.fixture(scope="module")
def cube_lib() -> ctypes.CDLL:
    """The cube control + matmul kernels library (cached build)."""
    lib = _ascendc_build.load("twin_cube_tests", SOURCES)
    lib.twin_cube_mix.argtypes = [ctypes.c_uint32, ctypes.c_uint32] + [ctypes.c_void_p] * 4
    lib.twin_cube_matmul.argtypes = [ctypes.c_int] * 3 + [ctypes.c_uint32] * 4 + [ctypes.c_void_p] * 3 + [
        ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def test_every_cube_control_is_listed(cube_lib):
    assert cube_lib.twin_cube_control_count() == len(CONTROLS)


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_cube_control_breaks_the_rule(cube_lib, report, index):
    _, rule, text = CONTROLS[index]
    assert_breaks(lambda fixed, rep: cube_lib.twin_cube_control(index, fixed, rep), report, rule, text)


@pytest.mark.parametrize("index", range(len(CONTROLS)), ids=[c[0] for c in CONTROLS])
def test_fixed_cube_control_passes(cube_lib, report, index):
    assert_fixed_passes(lambda fixed, rep: cube_lib.twin_cube_control(index, fixed, rep), report)


NOQUANT, F322F16, F322BF16, DEQF16, VDEQF16, QS322BF16_PRE, VQS322BF16_PRE = 0, 1, 2, 3, 4, 9, 10
DTYPE_CODE = {torch.int8: 0, torch.float16: 1, torch.bfloat16: 2}
OUT_DTYPE = {F322F16: torch.float16, DEQF16: torch.float16, VDEQF16: torch.float16, F322BF16: torch.bfloat16,
             QS322BF16_PRE: torch.bfloat16, VQS322BF16_PRE: torch.bfloat16}


def scale_words(scale: torch.Tensor) -> torch.Tensor:
    """fp32 scales as the 64-bit deq words Fixpipe reads (fp32 bits in the low 32 bits), padded to 4."""
    n4 = (scale.numel() + 3) // 4 * 4
    words = torch.zeros(n4, dtype=torch.int64)
    words[:scale.numel()] = scale.float().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return words


def cube_matmul(lib, a, b, *, b_trans, quant=NOQUANT, deq=None, scales=None, ksplit=0):
    """Run the one-tile cube matmul on the twin: a [m, k]; b [k, n] (b_trans False) or [n, k]; -> out [m, n]."""
    m, k = a.shape
    n = b.shape[0] if b_trans else b.shape[1]
    acc = torch.int32 if a.dtype == torch.int8 else torch.float32
    out = torch.full((m, n), -7 if acc == torch.int32 else float("nan"), dtype=OUT_DTYPE.get(quant, acc))
    words = scale_words(scales) if scales is not None else None
    deq_word = int(scale_words(torch.tensor([deq]))[0]) if deq is not None else 0
    rep = _ascendc_build.TwinReport()
    a, b = a.contiguous(), b.contiguous()
    rc = lib.twin_cube_matmul(DTYPE_CODE[a.dtype], int(b_trans), quant, m, n, k, ksplit, a.data_ptr(), b.data_ptr(),
                              words.data_ptr() if words is not None else None, deq_word, out.data_ptr(),
                              ctypes.byref(rep))
    assert rc == 0
    rep.raise_if_violation()
    return out, rep


SHAPES = [(16, 16, 32), (37, 45, 70), (64, 48, 256), (5, 80, 33)]  # (m, n, k): tails in every axis


@pytest.mark.parametrize("ksplit", [0, 1])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_int8_matmul_is_bit_exact(cube_lib, m, n, k, ksplit):
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)  # weight [n, k], as a Linear layer holds it
    out, rep = cube_matmul(cube_lib, a, w, b_trans=True, ksplit=ksplit)
    torch.testing.assert_close(out, a.int() @ w.int().T, rtol=0, atol=0)
    assert rep.busy()["M"] > 0 and rep.busy()["MTE1"] > 0 and rep.busy()["FIX"] > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_trans", [False, True])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_float_matmul_accumulates_in_fp32(cube_lib, m, n, k, b_trans, dtype):
    g = torch.Generator().manual_seed(m + n * 100 + k)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    out, _ = cube_matmul(cube_lib, a, b.T if b_trans else b, b_trans=b_trans, ksplit=1)
    ref = a.double() @ b.double()
    # products are exact in fp32; k sequential fp32 adds err by at most k ulp-scale terms of |a||b|
    bound = (a.double().abs() @ b.double().abs()) * k * 2.0 ** -24
    assert out.dtype == torch.float32 and not out.isnan().any()
    assert ((out.double() - ref).abs() <= bound + 1e-30).all()


@pytest.mark.parametrize("quant,dtype", [(F322F16, torch.float16), (F322BF16, torch.bfloat16)])
def test_fixpipe_fp32_to_half_rounds_to_nearest_even(cube_lib, quant, dtype):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(37, 70, generator=g).half()
    b = torch.randn(70, 45, generator=g).half()
    acc, _ = cube_matmul(cube_lib, a, b, b_trans=False)
    out, _ = cube_matmul(cube_lib, a, b, b_trans=False, quant=quant)
    torch.testing.assert_close(out, acc.to(dtype), rtol=0, atol=0)  # torch's fp32 -> fp16/bf16 is RNE


@pytest.mark.parametrize("quant,dtype", [(DEQF16, torch.float16), (QS322BF16_PRE, torch.bfloat16)])
def test_fixpipe_int32_dequant_per_tensor(cube_lib, quant, dtype):
    g = torch.Generator().manual_seed(4)
    a = torch.randint(-128, 128, (37, 70), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (45, 70), generator=g, dtype=torch.int8)
    scale = 1.7e-4
    out, _ = cube_matmul(cube_lib, a, w, b_trans=True, quant=quant, deq=scale)
    ref = ((a.int() @ w.int().T).float() * torch.tensor(scale, dtype=torch.float32)).to(dtype)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize("quant,dtype", [(VDEQF16, torch.float16), (VQS322BF16_PRE, torch.bfloat16)])
def test_fixpipe_int32_dequant_per_channel(cube_lib, quant, dtype):
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-128, 128, (37, 70), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (45, 70), generator=g, dtype=torch.int8)
    scale = torch.rand(45, generator=g) * 1e-3 + 1e-5  # per-channel scale [n]
    out, _ = cube_matmul(cube_lib, a, w, b_trans=True, quant=quant, scales=scale)
    ref = ((a.int() @ w.int().T).float() * scale.float()).to(dtype)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_cube_time_follows_the_mac_rates(cube_lib):
    """Modeled M-pipe time: int8 runs twice the MACs per cycle of fp16 (model_910b.h); same fractal count here."""
    g = torch.Generator().manual_seed(6)
    a8 = torch.randint(-128, 128, (64, 256), generator=g, dtype=torch.int8)
    w8 = torch.randint(-128, 128, (64, 256), generator=g, dtype=torch.int8)
    a16 = torch.randn(64, 256, generator=g).half()
    w16 = torch.randn(64, 256, generator=g).half()
    _, r8 = cube_matmul(cube_lib, a8, w8, b_trans=True)
    _, r16 = cube_matmul(cube_lib, a16, w16, b_trans=True)
    assert r16.busy()["M"] == pytest.approx(2 * r8.busy()["M"], rel=1e-9)


@pytest.mark.parametrize("groups", [1, 3])
def test_mix_kernel_exchanges_through_gm(cube_lib, groups):
    """MIX_AIC_1_2: each group's AIC multiplies a 16-row tile, hands it to its two AIV through GM and
    CrossCoreSetFlag<2, PIPE_FIX>; AIV v (GetBlockIdx) finishes rows [8v, 8v+8), adding 1 + GetSubBlockIdx()."""
    k = 40
    g = torch.Generator().manual_seed(groups)
    a = torch.randn(groups * 16, k, generator=g).half()
    bt = torch.randn(16, k, generator=g).half()
    out = torch.full((groups * 16, 16), float("nan"))
    rep = _ascendc_build.TwinReport()
    assert cube_lib.twin_cube_mix(groups, k, a.data_ptr(), bt.data_ptr(), out.data_ptr(), ctypes.byref(rep)) == 0
    rep.raise_if_violation()
    sub = (torch.arange(groups * 16) // 8 % 2).float()[:, None]  # rows [8v, 8v+8) belong to AIV v, sub-block v % 2
    ref = a.double() @ bt.double().T + 1 + sub
    bound = (a.double().abs() @ bt.double().abs().T) * k * 2.0 ** -24 + 2.0 ** -20 * ref.abs()
    assert ((out.double() - ref).abs() <= bound).all()
