// Positive kernels for the twin's unit tests: conversions, reductions, DataCopyPad padding, atomics across cores,
// level-0 masks, Compare/Select, vector math and a copy -> compute -> copy pipeline (single vs double buffered).
#include <vector>
#include "kernel_operator.h"
using namespace AscendC;
using twin::TwinReportC;

namespace {
template <typename T> GlobalTensor<T> gt(GM_ADDR p, uint64_t n) { GlobalTensor<T> g; g.SetGlobalBuffer((__gm__ T*)p, n); return g; }
template <typename T> DataCopyExtParams row(uint32_t n) { return DataCopyExtParams(1, n * sizeof(T), 0, 0, 0); }

// one core: src (n x S) -> UB -> Cast -> UB -> dst (n x D)
template <typename D, typename S> void cast_kernel(GM_ADDR src, GM_ADDR dst, uint32_t n, RoundMode m) {
    TPipe pipe; TBuf<TPosition::VECIN> a; TBuf<TPosition::VECOUT> b;
    pipe.InitBuffer(a, n * sizeof(S)); pipe.InitBuffer(b, n * sizeof(D));
    DataCopyPad(a.Get<S>(), gt<S>(src, n), row<S>(n), DataCopyPadExtParams<S>());
    SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
    Cast(b.Get<D>(), a.Get<S>(), m, n);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    DataCopyPad(gt<D>(dst, n), b.Get<D>(), row<D>(n));
}
template <typename S> void cast_from(int dk, GM_ADDR s, GM_ADDR d, uint32_t n, RoundMode m) {
    switch (dk) {
        case twin::K_F32: return cast_kernel<float, S>(s, d, n, m);
        case twin::K_F16: return cast_kernel<half, S>(s, d, n, m);
        case twin::K_BF16: return cast_kernel<bfloat16_t, S>(s, d, n, m);
        case twin::K_S32: return cast_kernel<int32_t, S>(s, d, n, m);
        case twin::K_S16: return cast_kernel<int16_t, S>(s, d, n, m);
        case twin::K_S8: return cast_kernel<int8_t, S>(s, d, n, m);
        default: return cast_kernel<uint8_t, S>(s, d, n, m);
    }
}
const size_t KSIZE[] = {4, 2, 2, 4, 2, 1, 1};

template <typename T> void reduce_kernel(int op, GM_ADDR src, GM_ADDR dst, uint32_t n) {
    TPipe pipe; TBuf<TPosition::VECIN> a; TBuf<TPosition::VECOUT> o; TBuf<TPosition::VECCALC> w;
    pipe.InitBuffer(a, n * sizeof(T)); pipe.InitBuffer(o, 32); pipe.InitBuffer(w, n * sizeof(T) + 1024);
    DataCopyPad(a.Get<T>(), gt<T>(src, n), row<T>(n), DataCopyPadExtParams<T>());
    SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
    if (op == 0) ReduceMax(o.Get<T>(), a.Get<T>(), w.Get<T>(), n, true);
    else if (op == 1) ReduceMin(o.Get<T>(), a.Get<T>(), w.Get<T>(), n, true);
    else ReduceSum(o.Get<T>(), a.Get<T>(), w.Get<T>(), n);
    SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
    DataCopy(gt<T>(dst, 32 / sizeof(T)), o.Get<T>(), 32 / sizeof(T));
}

template <typename T> void atomic_kernel(GM_ADDR src, GM_ADDR dst, uint32_t n) {
    TPipe pipe; TBuf<TPosition::VECIN> a; pipe.InitBuffer(a, n * sizeof(T));
    DataCopy(a.Get<T>(), gt<T>(src, uint64_t(n) * GetBlockNum())[GetBlockIdx() * n], n);
    SetFlag<HardEvent::MTE2_MTE3>(0); WaitFlag<HardEvent::MTE2_MTE3>(0);
    SetAtomicAdd<T>();
    DataCopy(gt<T>(dst, n), a.Get<T>(), n);
    SetAtomicNone();
}

// copy -> (Muls, Adds) -> copy over `tiles` tiles of 4096 floats, with `bufs` buffers per queue
void pipeline_kernel(GM_ADDR x, GM_ADDR y, int bufs, uint32_t tiles) {
    constexpr uint32_t TILE = 4096;
    TPipe pipe; TQue<TPosition::VECIN, 2> qi; TQue<TPosition::VECOUT, 2> qo;
    pipe.InitBuffer(qi, bufs, TILE * 4); pipe.InitBuffer(qo, bufs, TILE * 4);
    uint32_t per = tiles / GetBlockNum();
    auto gx = gt<float>(x, uint64_t(TILE) * tiles), gy = gt<float>(y, uint64_t(TILE) * tiles);
    for (uint32_t t = 0; t < per; ++t) {
        uint64_t off = (GetBlockIdx() * per + t) * uint64_t(TILE);
        auto a = qi.AllocTensor<float>(); DataCopy(a, gx[off], TILE); qi.EnQue(a);
        auto b = qi.DeQue<float>(); auto o = qo.AllocTensor<float>();
        Muls(o, b, 2.0f, TILE); PipeBarrier<PIPE_V>(); Adds(o, o, 1.0f, TILE);
        qo.EnQue(o); qi.FreeTensor(b);
        auto p = qo.DeQue<float>(); DataCopy(gy[off], p, TILE); qo.FreeTensor(p);
    }
}
}  // namespace

extern "C" int twin_cast(int sk, int dk, int mode, const void* src, void* dst, uint32_t n, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR s = L.gm_input(src, n * KSIZE[sk], "src");
    GM_ADDR d = L.gm_output(dst, n * KSIZE[dk], "dst");
    RoundMode m = RoundMode(mode);
    L.run([&] {
        switch (sk) {
            case twin::K_F32: return cast_from<float>(dk, s, d, n, m);
            case twin::K_F16: return cast_from<half>(dk, s, d, n, m);
            case twin::K_BF16: return cast_from<bfloat16_t>(dk, s, d, n, m);
            case twin::K_S32: return cast_from<int32_t>(dk, s, d, n, m);
            case twin::K_S16: return cast_from<int16_t>(dk, s, d, n, m);
            case twin::K_S8: return cast_from<int8_t>(dk, s, d, n, m);
            default: return cast_from<uint8_t>(dk, s, d, n, m);
        }
    });
    twin::to_c(L.report(), out);
    return 0;
}
// op: 0 ReduceMax (calIndex), 1 ReduceMin (calIndex), 2 ReduceSum; is_half: fp16 data else fp32. dst: 32 B.
extern "C" int twin_reduce(int op, int is_half, const void* src, uint32_t n, void* dst, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR s = L.gm_input(src, n * (is_half ? 2 : 4), "src");
    GM_ADDR d = L.gm_output(dst, 32, "dst");
    L.run([&] { if (is_half) reduce_kernel<half>(op, s, d, n); else reduce_kernel<float>(op, s, d, n); });
    twin::to_c(L.report(), out);
    return 0;
}
// Two rows of `len` floats (GM gap `gap` bytes) into UB with DataCopyPad, then the whole 2 x 32-float UB region out.
extern "C" int twin_pad(uint32_t len, uint32_t gap, int is_pad, int left, int right, float value, const float* src,
                        uint32_t src_n, float* dst64, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR s = L.gm_input(src, src_n * 4, "src");
    GM_ADDR d = L.gm_output(dst64, 64 * 4, "dst");
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECIN> a; pipe.InitBuffer(a, 256);
        DataCopyPad(a.Get<float>(), gt<float>(s, src_n), DataCopyExtParams(2, len * 4, gap, 0, 0),
                    DataCopyPadExtParams<float>(is_pad != 0, uint8_t(left), uint8_t(right), value));
        SetFlag<HardEvent::MTE2_MTE3>(0); WaitFlag<HardEvent::MTE2_MTE3>(0);
        DataCopy(gt<float>(d, 64), a.Get<float>(), 64);
    });
    twin::to_c(L.report(), out);
    return 0;
}
// kind: 0 float, 1 half, 2 int32, 3 int32 added onto the bits of an fp32 destination. src: cores x n elements.
extern "C" int twin_atomic(uint32_t cores, int kind, const void* src, void* dst, uint32_t n, TwinReportC* out) {
    twin::Launch L(cores);
    size_t es = kind == 1 ? 2 : 4;
    GM_ADDR s = L.gm_input(src, cores * n * es, "src");
    GM_ADDR d = L.gm_output(dst, n * es, "dst");
    L.run([&] {
        if (kind == 0) atomic_kernel<float>(s, d, n);
        else if (kind == 1) atomic_kernel<half>(s, d, n);
        else atomic_kernel<int32_t>(s, d, n);
    });
    twin::to_c(L.report(), out);
    return 0;
}
extern "C" int twin_pipeline(uint32_t cores, int bufs, uint32_t tiles, const float* x, float* y, TwinReportC* out) {
    twin::Launch L(cores);
    GM_ADDR gx = L.gm_input(x, uint64_t(tiles) * 4096 * 4, "x");
    GM_ADDR gy = L.gm_output(y, uint64_t(tiles) * 4096 * 4, "y");
    L.run([&] { pipeline_kernel(gx, gy, bufs, tiles); });
    twin::to_c(L.report(), out);
    return 0;
}
// Level-0 forms on 256 floats x (x[i] = i): dst preset to -1, then
//   case 0: Adds(+1), continuous mask 32, 2 repeats, strides 8       -> elements [0, 32) and [64, 96)
//   case 1: Muls(x2), bit mask {0x5555..., 0}, 1 repeat               -> even elements of [0, 64)
//   case 2: counter mode, count 100, Muls<float, false>(x3)           -> elements [0, 100)
//   case 3: Cast float -> half, mask 64, 2 repeats (dst rep stride 4) -> 128 halves, written back as floats
extern "C" int twin_level0(int which, const float* x, float* y, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR gx = L.gm_input(x, 256 * 4, "x");
    GM_ADDR gy = L.gm_output(y, 256 * 4, "y");
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECIN> a; TBuf<TPosition::VECOUT> o; TBuf<TPosition::VECCALC> h;
        pipe.InitBuffer(a, 1024); pipe.InitBuffer(o, 1024); pipe.InitBuffer(h, 512);
        auto A = a.Get<float>(), O = o.Get<float>();
        DataCopy(A, gt<float>(gx, 256), 256);
        Duplicate(O, -1.0f, 256);
        SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
        if (which == 0) Adds(O, A, 1.0f, 32, 2, UnaryRepeatParams(1, 1, 8, 8));
        else if (which == 1) { uint64_t m[2] = {0x5555555555555555ull, 0}; Muls(O, A, 2.0f, m, 1, UnaryRepeatParams()); }
        else if (which == 2) {
            SetMaskCount(); SetVectorMask<float, MaskMode::COUNTER>(0, 100);
            Muls<float, false>(O, A, 3.0f, MASK_PLACEHOLDER, 1, UnaryRepeatParams());
            SetMaskNorm(); ResetMask();
        } else {
            auto H = h.Get<half>();
            Cast(H, A, RoundMode::CAST_RINT, 64, 2, UnaryRepeatParams(1, 1, 4, 8));
            PipeBarrier<PIPE_V>();
            Cast(O, H, RoundMode::CAST_NONE, 128);
        }
        SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(gt<float>(gy, 256), O, 256);
    });
    twin::to_c(L.report(), out);
    return 0;
}
// out = where(cmp(a, b), a, b) through Compare + Select (n a multiple of 64), and cmp bits to mask_out.
extern "C" int twin_cmpsel(int mode, const float* a, const float* b, uint32_t n, float* y, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR ga = L.gm_input(a, n * 4, "a");
    GM_ADDR gb = L.gm_input(b, n * 4, "b");
    GM_ADDR gy = L.gm_output(y, n * 4, "y");
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECIN> ta, tb; TBuf<TPosition::VECCALC> m; TBuf<TPosition::VECOUT> o;
        pipe.InitBuffer(ta, n * 4); pipe.InitBuffer(tb, n * 4); pipe.InitBuffer(m, n / 8 + 32); pipe.InitBuffer(o, n * 4);
        DataCopy(ta.Get<float>(), gt<float>(ga, n), n); DataCopy(tb.Get<float>(), gt<float>(gb, n), n);
        SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
        Compare(m.Get<uint8_t>(), ta.Get<float>(), tb.Get<float>(), CMPMODE(mode), n);
        PipeBarrier<PIPE_V>();
        Select(o.Get<float>(), m.Get<uint8_t>(), ta.Get<float>(), tb.Get<float>(), SELMODE::VSEL_TENSOR_TENSOR_MODE, n);
        SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(gt<float>(gy, n), o.Get<float>(), n);
    });
    twin::to_c(L.report(), out);
    return 0;
}
// op: 0 Exp 1 Ln 2 Sqrt 3 Rsqrt 4 Reciprocal 5 Abs 6 Relu 7 Sigmoid 8 ArithProgression(x[0], x[1]); n % 8 == 0.
extern "C" int twin_unary(int op, const float* x, float* y, uint32_t n, TwinReportC* out) {
    twin::Launch L(1);
    GM_ADDR gx = L.gm_input(x, n * 4, "x");
    GM_ADDR gy = L.gm_output(y, n * 4, "y");
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECIN> a; TBuf<TPosition::VECOUT> o;
        pipe.InitBuffer(a, n * 4); pipe.InitBuffer(o, n * 4);
        auto A = a.Get<float>(), O = o.Get<float>();
        DataCopy(A, gt<float>(gx, n), n);
        SetFlag<HardEvent::MTE2_V>(0); WaitFlag<HardEvent::MTE2_V>(0);
        switch (op) {
            case 0: Exp(O, A, n); break; case 1: Ln(O, A, n); break; case 2: Sqrt(O, A, n); break;
            case 3: Rsqrt(O, A, n); break; case 4: Reciprocal(O, A, n); break; case 5: Abs(O, A, n); break;
            case 6: Relu(O, A, n); break; case 7: Sigmoid(O, A, n); break;
            default: {
                SetFlag<HardEvent::MTE2_S>(0); WaitFlag<HardEvent::MTE2_S>(0);
                float f = A.GetValue(0), d = A.GetValue(1);
                ArithProgression(O, f, d, n);
            }
        }
        SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(gt<float>(gy, n), O, n);
    });
    twin::to_c(L.report(), out);
    return 0;
}
// Each core writes its slice of y, meets the others in SyncAll, then copies its right neighbour's slice to z.
extern "C" int twin_syncall(uint32_t cores, float* y, float* z, TwinReportC* out) {
    twin::Launch L(cores);
    GM_ADDR gy = L.gm_output(y, cores * 64 * 4, "y");
    GM_ADDR gz = L.gm_output(z, cores * 64 * 4, "z");
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECOUT> a; pipe.InitBuffer(a, 256);
        auto Y = gt<float>(gy, cores * 64), Z = gt<float>(gz, cores * 64);
        uint32_t me = GetBlockIdx(), right = (me + 1) % GetBlockNum();
        Duplicate(a.Get<float>(), float(me), 64);
        SetFlag<HardEvent::V_MTE3>(0); WaitFlag<HardEvent::V_MTE3>(0);
        DataCopy(Y[me * 64], a.Get<float>(), 64);
        SyncAll();
        DataCopy(a.Get<float>(), Y[right * 64], 64);
        SetFlag<HardEvent::MTE2_MTE3>(0); WaitFlag<HardEvent::MTE2_MTE3>(0);
        DataCopy(Z[me * 64], a.Get<float>(), 64);
    });
    twin::to_c(L.report(), out);
    return 0;
}
// Bytes a TBuf of `len` bytes really gets (InitBuffer rounds up to 32 B), and the UB offset of a second buffer.
extern "C" int twin_tbuf_len(uint32_t len, uint32_t* got, uint32_t* next_offset, TwinReportC* out) {
    twin::Launch L(1);
    L.run([&] {
        TPipe pipe; TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, len); pipe.InitBuffer(b, 32);
        *got = a.Get<uint8_t>().GetSize();
        *next_offset = uint32_t(b.Get<uint8_t>().GetPhyAddr());
    });
    twin::to_c(L.report(), out);
    return 0;
}
// The HBM-share reservation when, after filling a gap, less than one ulp of t remains to reserve (a case that once
// looped forever, appending empty slices): returns when the reservation ends and how many busy intervals remain.
extern "C" double twin_hbm_gap_probe(uint32_t* intervals) {
    twin::Core c;
    c.hbm_busy = {{1e5, 1e5 + 10.0}, {1e5 + 15.0, 1e5 + 20.0}};
    double end = c.hbm_reserve(1e5, 5.0 + 3e-12);
    *intervals = uint32_t(c.hbm_busy.size());
    return end;
}
