"""The twin's runtime: DataCopyPad padding and poison, GM atomics across cores, level-0 masks and strides, the
timing model (double buffering models faster), and the cached build."""
import ctypes

import numpy as np
import pytest

from ops import _ascendc_build
from tests.ascendc.twin_fixtures import report, twin_lib  # noqa: F401 (fixtures)

pytestmark = pytest.mark.ascendc
POISON = np.frombuffer(b"\xff\xff\xff\xff", np.uint32)[0]


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("length,gap,is_pad,left,right", [
    (5, 0, 0, 0, 0), (5, 8, 1, 0, 3), (5, 4, 0, 0, 3), (8, 0, 0, 0, 0), (3, 0, 1, 2, 1), (13, 12, 1, 0, 3)])
def test_datacopypad_rows_padding_and_poison(twin_lib, report, length, gap, is_pad, left, right):
    rng = np.random.default_rng(length)
    src = rng.standard_normal(64).astype(np.float32)
    dst = np.zeros(64, np.float32)
    assert twin_lib.twin_pad(length, gap, is_pad, left, right, ctypes.c_float(-9.5), _p(src), 64, _p(dst),
                             ctypes.byref(report)) == 0
    assert report.ok, report.message
    row = -(-(left + length + right) // 8) * 8  # floats per UB row (rounded up to 32 B)
    bits = dst.view(np.uint32)
    for r in range(2):
        base = r * row
        g0 = r * (length + gap // 4)
        np.testing.assert_array_equal(dst[base + left:base + left + length], src[g0:g0 + length])
        pads = list(range(base, base + left)) + list(range(base + left + length, base + left + length + right))
        if is_pad:
            assert (dst[pads] == np.float32(-9.5)).all()
        else:
            assert (bits[pads] == POISON).all()
        rest = range(base + left + length + right, base + row)
        assert (bits[list(rest)] == POISON).all(), "unspecified UB bytes must be poisoned"
    assert np.isnan(dst[2 * row:][bits[2 * row:] == POISON]).all()


@pytest.mark.parametrize("kind,dtype", [(0, np.float32), (1, np.float16), (2, np.int32)])
def test_atomic_add_across_cores(twin_lib, report, kind, dtype):
    cores, n = 8, 256
    rng = np.random.default_rng(kind)
    if dtype == np.int32:
        src = rng.integers(-1000, 1000, (cores, n)).astype(dtype)
    else:
        src = rng.integers(-8, 8, (cores, n)).astype(dtype)  # small integers: exact in any order
    dst = rng.integers(-4, 4, n).astype(dtype)
    expect = dst.astype(np.float64) + src.astype(np.float64).sum(0)
    twin_lib.twin_atomic(cores, kind, _p(src), _p(dst), n, ctypes.byref(report))
    assert report.ok, report.message
    np.testing.assert_array_equal(dst.astype(np.float64), expect)


def test_atomic_int32_onto_fp32_bits(twin_lib, report):
    cores, n = 4, 64
    dst = np.linspace(1, 2, n, dtype=np.float32)
    inc = np.tile(np.arange(n, dtype=np.int32), (cores, 1))
    expect = (dst.view(np.int32) + cores * inc[0]).view(np.float32)
    twin_lib.twin_atomic(cores, 2, _p(inc), _p(dst), n, ctypes.byref(report))
    assert report.ok, report.message
    np.testing.assert_array_equal(dst.view(np.int32), expect.view(np.int32))


def test_syncall_orders_cores(twin_lib, report):
    cores = 6
    y = np.full(cores * 64, np.nan, np.float32)
    z = np.full(cores * 64, np.nan, np.float32)
    twin_lib.twin_syncall(cores, _p(y), _p(z), ctypes.byref(report))
    assert report.ok, report.message
    np.testing.assert_array_equal(y, np.repeat(np.arange(cores, dtype=np.float32), 64))
    np.testing.assert_array_equal(z, np.repeat(np.roll(np.arange(cores, dtype=np.float32), -1), 64))


def test_level0_masks_strides_counter_mode(twin_lib, report):
    x = np.arange(256, dtype=np.float32)
    cases = {}
    for which in range(4):
        y = np.full(256, np.nan, np.float32)
        twin_lib.twin_level0(which, _p(x), _p(y), ctypes.byref(report))
        assert report.ok, report.message
        cases[which] = y
    e0 = np.full(256, -1.0, np.float32)
    e0[:32], e0[64:96] = x[:32] + 1, x[64:96] + 1
    np.testing.assert_array_equal(cases[0], e0)
    e1 = np.full(256, -1.0, np.float32)
    e1[0:64:2] = x[0:64:2] * 2
    np.testing.assert_array_equal(cases[1], e1)
    e2 = np.full(256, -1.0, np.float32)
    e2[:100] = x[:100] * 3
    np.testing.assert_array_equal(cases[2], e2)
    # Cast level-0: 64 floats per repeat; repeat 1 reads x[64:128] (src rep stride 8 blocks), writes halves 64..127
    e3 = np.full(256, -1.0, np.float32)
    e3[:128] = x[:128].astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(cases[3], e3)


def _pipeline(lib, cores, bufs, tiles):
    x = np.random.default_rng(bufs).standard_normal(tiles * 4096).astype(np.float32)
    y = np.full_like(x, np.nan)
    r = _ascendc_build.TwinReport()
    lib.twin_pipeline(cores, bufs, tiles, _p(x), _p(y), ctypes.byref(r))
    assert r.ok, r.message
    np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
    return r


def test_double_buffering_models_faster(twin_lib):
    single = _pipeline(twin_lib, 2, 1, 16)
    double = _pipeline(twin_lib, 2, 2, 16)
    # same work, so the same counters; overlap of MTE2 / V / MTE3 only with two buffers per queue
    assert (single.mte2_bytes, single.mte3_bytes, single.vector_repeats) == \
           (double.mte2_bytes, double.mte3_bytes, double.vector_repeats)
    assert double.modeled_ns < single.modeled_ns
    assert single.busy()["MTE2"] > 0 and single.busy()["V"] > 0 and single.busy()["MTE3"] > 0


def test_counters(twin_lib):
    r = _pipeline(twin_lib, 4, 2, 8)
    assert r.block_dim == 4
    assert r.mte2_bytes == r.mte3_bytes == 8 * 4096 * 4
    assert r.vector_repeats == 8 * 2 * (4096 * 4 // 256)


def test_build_is_cached(tmp_path):
    src = tmp_path / "k.cpp"
    src.write_text('#include "kernel_operator.h"\nextern "C" int twin_probe() { return int(sizeof(half)); }\n')
    a = _ascendc_build.build_library("twin_probe", [src])
    assert a == _ascendc_build.build_library("twin_probe", [src])
    assert _ascendc_build.load("twin_probe", [src]).twin_probe() == 2
    src.write_text(src.read_text() + "// edit\n")
    b = _ascendc_build.build_library("twin_probe", [src])
    assert b != a
    for lib in (a, b):
        lib.unlink()
        lib.with_name(lib.name + ".lock").unlink(missing_ok=True)


def test_build_errors(tmp_path):
    bad = tmp_path / "bad.cpp"
    bad.write_text("this is not C++\n")
    with pytest.raises(RuntimeError, match="this is not C"):
        _ascendc_build.build_library("twin_bad", [bad])
    with pytest.raises(ValueError, match="name"):
        _ascendc_build.build_library("a b", [bad])
    with pytest.raises(ValueError, match="does not exist"):
        _ascendc_build.build_library("twin_missing", [tmp_path / "none.cpp"])


@pytest.mark.parametrize("length,rounded", [(1, 32), (20, 32), (32, 32), (33, 64), (1000, 1024)])
def test_init_buffer_rounds_to_32_bytes(twin_lib, report, length, rounded):
    got, nxt = ctypes.c_uint32(), ctypes.c_uint32()
    twin_lib.twin_tbuf_len(length, ctypes.byref(got), ctypes.byref(nxt), ctypes.byref(report))
    assert report.ok, report.message
    assert got.value == rounded and nxt.value == rounded


def test_hbm_reservation_ends_with_a_sub_ulp_remainder(twin_lib):
    twin_lib.twin_hbm_gap_probe.restype = ctypes.c_double
    n = ctypes.c_uint32()
    end = twin_lib.twin_hbm_gap_probe(ctypes.byref(n))
    assert end == pytest.approx(1e5 + 15.0, abs=1e-6)
    assert n.value == 1  # the gap is filled: one busy interval [1e5, 1e5 + 20)
