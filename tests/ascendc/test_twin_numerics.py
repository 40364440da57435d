"""The twin's numerics against independent references: Cast per RoundMode bit-exact on edge values (ties, ±0, NaN,
±inf, saturation, subnormals), the Cast pair table, reductions (fixed order, ties, NaN), Compare/Select, vector math.
"""
import ctypes

import numpy as np
import pytest
import torch

from ops import _ascendc_build
from tests.ascendc.twin_fixtures import report, twin_lib  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.ascendc, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

NONE, RINT, FLOOR, CEIL, ROUND, TRUNC, ODD = range(7)
MODES = {"NONE": NONE, "RINT": RINT, "FLOOR": FLOOR, "CEIL": CEIL, "ROUND": ROUND, "TRUNC": TRUNC, "ODD": ODD}
F32, F16, BF16, S32, S16, S8, U8 = range(7)
NP = {F32: np.float32, F16: np.float16, S32: np.int32, S16: np.int16, S8: np.int8, U8: np.uint8}
INTS_ = [RINT, FLOOR, CEIL, ROUND, TRUNC]
# The Atlas A2 table the twin implements (README "Cast").
TABLE = {
    (F32, F16): [NONE, *INTS_, ODD], (F32, F32): INTS_, (F32, BF16): INTS_, (F32, S32): INTS_, (F32, S16): INTS_,
    (F16, F32): [NONE], (F16, S32): INTS_, (F16, S16): INTS_, (F16, S8): [NONE, *INTS_], (F16, U8): [NONE, *INTS_],
    (BF16, F32): [NONE], (BF16, S32): INTS_,
    (S32, F32): [NONE, *INTS_], (S32, F16): [NONE, *INTS_], (S32, S16): [NONE],
    (S16, F16): [NONE, *INTS_], (S16, F32): [NONE], (S8, F16): [NONE], (U8, F16): [NONE],
}


def _edge_f32(rng):
    e = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11),
         2 ** -25, 3 * 2 ** -25, 2 ** -24, -(2 ** -25), 1e-10, -1e-10, 65504.0, 65519.0, 65520.0, -65520.0, 7e4,
         -7e4, 1e10, -1e10, 3.4e38, -3.4e38, 1.4e-45, 2 ** 31, -(2 ** 31), 2 ** 31 + 256.0, 127.5, -128.5, 255.5,
         -0.3, 0.3, 1 + 2 ** -8, 1 + 3 * 2 ** -9, 8388607.5, 16777217.0, np.inf, -np.inf, np.nan, -np.nan]
    rand = rng.standard_normal(400) * np.exp2(rng.integers(-30, 30, 400))
    return np.concatenate([np.array(e, np.float64), rand, np.round(rand), rng.uniform(-300, 300, 200)]).astype(np.float32)


def _fmt_bits(x: np.ndarray, fmt: int) -> np.ndarray:
    """Round-to-nearest-even conversion (numpy / torch) as unsigned bit patterns."""
    if fmt == F16:
        return x.astype(np.float16).view(np.uint16).astype(np.int64)
    if fmt == BF16:
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    return x.astype(np.float32).view(np.uint32).astype(np.int64)


def _fmt_val(bits: np.ndarray, fmt: int) -> np.ndarray:
    if fmt == F16:
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt == BF16:
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def ref_float(x: np.ndarray, fmt: int, mode: int) -> np.ndarray:
    """Reference rounding to fp16/bf16/fp32 by bit neighbours: RNE from numpy/torch, then the neighbour the mode
    picks. Returns bit patterns."""
    x = x.astype(np.float64)
    signbit = {F16: 0x8000, BF16: 0x8000, F32: 0x80000000}[fmt]
    rne = _fmt_bits(x.astype(np.float32) if fmt != F32 else x, fmt) if fmt != F32 else _fmt_bits(x, fmt)
    out = rne.copy()
    for i, v in enumerate(x):
        if np.isnan(v) or np.isinf(v) or mode in (NONE, RINT):
            continue
        mag_bits = rne[i] & ~signbit
        a, neg = abs(v), np.signbit(v)
        dv = _fmt_val(np.array([mag_bits]), fmt)[0]
        if dv == a:
            continue
        lo, hi = (mag_bits - 1, mag_bits) if dv > a else (mag_bits, mag_bits + 1)
        dlo = _fmt_val(np.array([lo]), fmt)[0]
        dhi = _fmt_val(np.array([hi]), fmt)[0]
        if np.isinf(dhi):  # one step past the largest finite value
            dhi = dlo + (dlo - _fmt_val(np.array([lo - 1]), fmt)[0])
        if mode == TRUNC:
            pick = lo
        elif mode == FLOOR:
            pick = hi if neg else lo
        elif mode == CEIL:
            pick = lo if neg else hi
        elif mode == ROUND:
            pick = lo if a - dlo < dhi - a else hi
        else:  # ODD
            pick = lo if lo & 1 else hi
        out[i] = pick | (signbit if neg else 0)
    return out


def ref_int(x: np.ndarray, dt, mode: int) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        r = {NONE: np.rint, RINT: np.rint, FLOOR: np.floor, CEIL: np.ceil, TRUNC: np.trunc,
             ROUND: lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}[mode](x)
    info = np.iinfo(dt)
    r = np.where(np.isnan(r), 0, np.clip(r, info.min, info.max))
    return r.astype(dt)


def _run_cast(lib, sk, dk, mode, src: np.ndarray, report):
    n = src.size
    size = {F32: 4, F16: 2, BF16: 2, S32: 4, S16: 2, S8: 1, U8: 1}[dk]
    dst = np.full(n * size, 0xEE, np.uint8)
    src = np.ascontiguousarray(src)
    lib.twin_cast(sk, dk, mode, src.ctypes.data_as(ctypes.c_void_p), dst.ctypes.data_as(ctypes.c_void_p), n,
                  ctypes.byref(report))
    return dst


def _src(sk, rng):
    f = _edge_f32(rng)
    if sk == F32:
        return f, f.astype(np.float64)
    if sk == F16:
        h = np.concatenate([f.astype(np.float16), np.array([65504, -65504, 2 ** -24, 0.5, 2.5, 127.5, -128.5, 255.5,
                                                             256.5, -0.0], np.float16)])
        return h, h.astype(np.float64)
    if sk == BF16:
        b = torch.from_numpy(f).to(torch.bfloat16)
        return b.view(torch.int16).numpy(), b.to(torch.float64).numpy()
    dt = NP[sk]
    info = np.iinfo(dt)
    v = np.concatenate([rng.integers(info.min, info.max, 300, endpoint=True),
                        [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 2049, 4097, 16777217, 65520, 65519]])
    v = np.clip(v, info.min, info.max).astype(dt)
    return v, v.astype(np.float64)


CASES = [(sk, dk, m) for (sk, dk), ms in TABLE.items() for m in ms]


@pytest.mark.parametrize("sk,dk,mode", CASES, ids=[f"{sk}->{dk}-{m}" for sk, dk, m in CASES])
def test_cast_bit_exact(twin_lib, report, sk, dk, mode):
    rng = np.random.default_rng(7 + 100 * sk + 10 * dk + mode)
    raw, val = _src(sk, rng)
    out = _run_cast(twin_lib, sk, dk, mode, raw, report)
    assert report.ok, report.message
    if dk in (F16, BF16, F32):
        width = np.uint16 if dk != F32 else np.uint32
        got = out.view(width).astype(np.int64)
        if dk == F32 and sk == F32:  # float -> float with a mode rounds to an integral value
            r = ref_int(val, np.int64, mode).astype(np.float64)
            big = np.isnan(val) | np.isinf(val) | (np.abs(val) >= 2 ** 23)
            expect_v = np.where(big, val, np.copysign(r, val))
            expect = expect_v.astype(np.float32).view(np.uint32).astype(np.int64)
        else:
            expect = ref_float(val, dk, mode)
        nan = np.isnan(val)
        np.testing.assert_array_equal(got[~nan], expect[~nan])
        assert np.isnan(_fmt_val(got[nan], dk)).all()
    else:
        got = out.view(NP[dk])
        np.testing.assert_array_equal(got, ref_int(val, NP[dk], mode))


@pytest.mark.parametrize("sk,dk,mode", [(F32, S8, RINT), (F32, BF16, ODD), (F16, BF16, RINT),
                                        (F32, F32, NONE), (F16, F16, RINT), (S32, S8, NONE), (BF16, F16, RINT),
                                        (F16, F32, RINT), (F32, S16, ODD)])
def test_cast_undocumented_pair_is_an_error(twin_lib, report, sk, dk, mode):
    if (sk, dk) in TABLE and mode in TABLE[(sk, dk)]:
        pytest.skip("documented")
    _run_cast(twin_lib, sk, dk, mode, np.zeros(16, NP.get(sk, np.int16)), report)
    assert report.rule == "cast-pair" and "Cast: Cast " in report.message


def _reduce(lib, report, op, x: np.ndarray):
    is_half = x.dtype == np.float16
    dst = np.zeros(32, np.uint8)
    lib.twin_reduce(op, int(is_half), x.ctypes.data_as(ctypes.c_void_p), x.size, dst.ctypes.data_as(ctypes.c_void_p),
                    ctypes.byref(report))
    assert report.ok, report.message
    if is_half:
        return dst[:2].view(np.float16)[0], int(dst[2:4].view(np.uint16)[0])
    return dst[:4].view(np.float32)[0], int(dst[4:8].view(np.uint32)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [1, 7, 64, 129, 1000, 4099])
def test_reduce_max_min_with_index(twin_lib, report, dtype, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    x[rng.integers(0, n)] = x.max()  # a tie: the lowest index wins
    v, i = _reduce(twin_lib, report, 0, x)
    assert v == x.max() and i == int(np.argmax(x))
    v, i = _reduce(twin_lib, report, 1, x)
    assert v == x.min() and i == int(np.argmin(x))


def test_reduce_max_nan_wins(twin_lib, report):
    x = np.arange(300, dtype=np.float32)
    x[[17, 200]] = np.nan
    v, i = _reduce(twin_lib, report, 0, x)
    assert np.isnan(v) and i == 17


def _tree_sum(x: np.ndarray, epr: int) -> float:
    dt = x.dtype.type
    v = list(x)
    while True:
        nxt = []
        for g in range(0, len(v), epr):
            c = v[g:g + epr] + [dt(0)] * (epr - len(v[g:g + epr]))
            w = epr // 2
            while w >= 1:
                c = [dt(np.float32(c[i]) + np.float32(c[i + w])) for i in range(w)] + c[w:]
                w //= 2
            nxt.append(c[0])
        v = nxt
        if len(v) == 1:
            return v[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", [1, 50, 64, 65, 777, 4100])
def test_reduce_sum_fixed_order(twin_lib, report, dtype, n):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    v, _ = _reduce(twin_lib, report, 2, x)
    expect = _tree_sum(x, 256 // x.itemsize)
    assert v.tobytes() == dtype(expect).tobytes()


@pytest.mark.parametrize("mode,fn", [(0, np.less), (1, np.greater), (2, np.equal), (3, np.less_equal),
                                     (4, np.greater_equal), (5, np.not_equal)], ids="LT GT EQ LE GE NE".split())
def test_compare_select(twin_lib, report, mode, fn):
    rng = np.random.default_rng(mode)
    n = 256
    a = rng.integers(-3, 3, n).astype(np.float32)
    b = rng.integers(-3, 3, n).astype(np.float32)
    a[5], b[9] = np.nan, np.nan
    y = np.full(n, -7.0, np.float32)
    twin_lib.twin_cmpsel(mode, a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p), n,
                         y.ctypes.data_as(ctypes.c_void_p), ctypes.byref(report))
    assert report.ok, report.message
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(y, np.where(fn(a, b), a, b))


@pytest.mark.parametrize("op,fn", [
    (0, np.exp), (1, np.log), (2, np.sqrt), (3, lambda v: np.float32(1) / np.sqrt(v)),
    (4, lambda v: np.float32(1) / v), (5, np.abs), (6, lambda v: np.maximum(v, np.float32(0))),
    (7, lambda v: np.float32(1) / (np.float32(1) + np.exp(-v)))], ids="Exp Ln Sqrt Rsqrt Reciprocal Abs Relu Sigmoid".split())
def test_vector_math_fp32(twin_lib, report, op, fn):
    x = np.random.default_rng(op).uniform(-5, 5, 512).astype(np.float32)
    if op in (1, 2, 3):
        x = np.abs(x) + np.float32(0.01)
    y = np.full(512, np.nan, np.float32)
    twin_lib.twin_unary(op, x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), 512,
                        ctypes.byref(report))
    assert report.ok, report.message
    # the C library (expf, logf, sqrtf) against numpy: a few ulp at most
    np.testing.assert_allclose(y, fn(x).astype(np.float32), rtol=1e-6, atol=0)


def test_arith_progression(twin_lib, report):
    x = np.zeros(64, np.float32)
    x[:2] = [1.5, -0.25]
    y = np.full(64, np.nan, np.float32)
    twin_lib.twin_unary(8, x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p), 64,
                        ctypes.byref(report))
    assert report.ok, report.message
    np.testing.assert_array_equal(y, np.float32(1.5) + np.arange(64, dtype=np.float32) * np.float32(-0.25))


def test_report_struct_matches_the_header():
    # TwinReportC: int32 ok, uint32 block_dim, double modeled_ns, double[7], 6 x uint64, char[32], char[1024]
    assert ctypes.sizeof(_ascendc_build.TwinReport) == 4 + 4 + 8 + 7 * 8 + 6 * 8 + 32 + 1024
