// Vector APIs (PIPE_V). Level-2 "count" forms operate on the first `count` elements; level-0 forms take a mask,
// repeatTimes and repeat strides. Arithmetic is fp32 IEEE (half is widened, computed, rounded to nearest even);
// Exp/Ln/Sqrt use the C library's expf/logf/sqrtf. Pages: "Add/Sub/Mul/Div/Max/Min" (dual-operand), "Adds/Muls/
// Maxs/Mins" (scalar), "Abs/Exp/Ln/Sqrt/Rsqrt/Reciprocal/Relu" (single-operand), "Duplicate", "Cast"
// (atlasascendc_api_07_0073) of the AscendC API reference.
#pragma once
#include <type_traits>
#include "convert.h"
#include "datacopy.h"

namespace twin {
template <typename T> constexpr bool is_fp = std::is_same_v<T, float> || std::is_same_v<T, half>;
template <typename T> constexpr bool is_vec_arith =
    is_fp<T> || std::is_same_v<T, int32_t> || std::is_same_v<T, int16_t>;
template <typename T> using calc_t = std::conditional_t<is_fp<T>, float, int64_t>;
template <typename T> inline calc_t<T> ld(const T& v) { return calc_t<T>(v); }
template <typename T> inline T st(calc_t<T> v) {
    if constexpr (std::is_same_v<T, half>) return half(float(v));
    else if constexpr (std::is_same_v<T, float>) return v;
    else return T(v);  // integer results wrap (two's complement)
}
inline double vec_ns(uint64_t repeats, double cyc_per_repeat) {
    return model::cycles_to_ns(model::VECTOR_LATENCY_CYCLES + double(repeats) * cyc_per_repeat);
}
inline uint64_t repeats_of(uint64_t bytes) { return (bytes + 255) / 256; }
inline void check_count(const char* call, int64_t count) {
    if (count < 0) core().fail("count-negative", call, "count " + std::to_string(count) + " < 0");
}

struct VOp {
    Core& c;
    uint32_t id;
    const char* name;
    VOp(const char* n, uint64_t repeats, double cyc) : c(core()), id(0), name(n) {
        id = c.issue(n, P_V, vec_ns(repeats, cyc));
        c.cnt.vector_calls++;
        c.cnt.vector_repeats += repeats;
    }
    template <typename T> void rd(const AscendC::LocalTensor<T>& t, uint64_t bytes) { c.on_read(id, t.mem_, t.addr_, uint32_t(bytes)); }
    template <typename T> void wr(const AscendC::LocalTensor<T>& t, uint64_t bytes) { c.on_write(id, t.mem_, t.addr_, uint32_t(bytes)); }
    template <typename T> void mrd(const AscendC::LocalTensor<T>& t, uint64_t bytes) { c.mark_read(id, t.mem_, t.addr_, uint32_t(bytes)); }
    template <typename T> void mwr(const AscendC::LocalTensor<T>& t, uint64_t bytes) { c.mark_write(id, t.mem_, t.addr_, uint32_t(bytes)); }
};

template <typename T, typename F>
inline void unary2(const char* name, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                   int32_t count, double cyc, F f) {
    check_count(name, count);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    check_ub_operand(name, dst, bytes);
    check_ub_operand(name, src, bytes);
    VOp op(name, repeats_of(bytes), cyc);
    op.rd(src, bytes); op.wr(dst, bytes); op.mrd(src, bytes); op.mwr(dst, bytes);
    T* d = dst.data(); const T* s = src.data();
    for (int32_t i = 0; i < count; ++i) d[i] = st<T>(f(ld(s[i])));
}
template <typename T, typename F>
inline void binary2(const char* name, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& a,
                    const AscendC::LocalTensor<T>& b, int32_t count, double cyc, F f) {
    check_count(name, count);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    check_ub_operand(name, dst, bytes);
    check_ub_operand(name, a, bytes);
    check_ub_operand(name, b, bytes);
    VOp op(name, repeats_of(bytes), cyc);
    op.rd(a, bytes); op.rd(b, bytes); op.wr(dst, bytes); op.mrd(a, bytes); op.mrd(b, bytes); op.mwr(dst, bytes);
    T* d = dst.data(); const T* x = a.data(); const T* y = b.data();
    for (int32_t i = 0; i < count; ++i) d[i] = st<T>(f(ld(x[i]), ld(y[i])));
}

// ---- level-0 engine: mask + repeatTimes + strides ----
struct L0Operand { uint32_t base; uint32_t size_bytes; uint32_t esz; uint32_t blk; uint32_t rep; uint8_t mem; };
struct L0Plan {
    uint32_t epr = 0;          // elements per repeat
    uint32_t repeats = 0;
    uint64_t count = 0;        // counter mode: total elements
    bool counter = false;
    uint64_t m0 = 0, m1 = 0;   // normal mode bit mask
    bool active(uint32_t r, uint32_t k) const {
        if (counter) return uint64_t(r) * epr + k < count;
        return k < 64 ? (m0 >> k & 1) : (m1 >> (k - 64) & 1);
    }
};
// mask_len >= 0: continuous mask; else the bit mask (mhi, mlo). isSetMask=false: use the mask register.
inline L0Plan l0_plan(const char* name, uint32_t max_esz, bool is_set_mask, int64_t mask_len, uint64_t mhi,
                      uint64_t mlo, int32_t repeat_times) {
    Core& c = core();
    L0Plan p;
    p.epr = 256 / max_esz;
    if (repeat_times < 0 || repeat_times > 255)
        c.fail("repeat-times", name, "repeatTimes " + std::to_string(repeat_times) +
               " outside [0, 255] (the hardware field is 8 bits wide and would wrap)");
    if (c.mask_counter) {
        p.counter = true;
        p.count = is_set_mask ? (mask_len >= 0 ? uint64_t(mask_len) : mlo) : c.mask_lo;
        p.repeats = uint32_t((p.count + p.epr - 1) / p.epr);
        return p;
    }
    p.repeats = uint32_t(repeat_times);
    if (!is_set_mask) { p.m1 = c.mask_hi; p.m0 = c.mask_lo; }
    else if (mask_len >= 0) {
        if (mask_len < 1 || mask_len > p.epr)
            c.fail("mask", name, "continuous mask " + std::to_string(mask_len) + " outside [1, " +
                   std::to_string(p.epr) + "] for this data type");
        p.m0 = mask_len >= 64 ? ~0ull : ((1ull << mask_len) - 1);
        p.m1 = mask_len >= 128 ? ~0ull : mask_len > 64 ? ((1ull << (mask_len - 64)) - 1) : 0;
    } else { p.m1 = mhi; p.m0 = mlo; }
    if (p.epr <= 64 && p.m1)
        c.fail("mask", name, "mask[1] must be 0 for 32-bit data (64 elements per repeat)");
    if (p.epr < 64) p.m0 &= (1ull << p.epr) - 1;
    if (!p.m0 && !p.m1) c.fail("mask", name, "mask selects no element");
    return p;
}
inline uint32_t l0_off(const L0Operand& o, uint32_t r, uint32_t k) {
    uint32_t epb = 32 / o.esz;
    return r * o.rep * 32 + (k / epb) * o.blk * 32 + (k % epb) * o.esz;
}
// Bounds, dst-stride and hazard checks for all operands of a level-0 call; ops[0] is the destination.
inline void l0_check(const char* name, VOp& op, const L0Plan& p, std::initializer_list<L0Operand> ops) {
    Core& c = core();
    bool first = true;
    for (const auto& o : ops) {
        uint32_t hi = 0;
        uint32_t epb = 32 / o.esz;
        uint32_t blocks = (p.epr + epb - 1) / epb;
        if (first && o.blk == 0 && blocks > 1 && p.repeats > 0)
            c.fail("stride", name, "dst block stride 0: the blocks of one repeat would overwrite each other");
        for (uint32_t r = 0; r < p.repeats; ++r)
            for (uint32_t k = 0; k < p.epr; ++k)
                if (p.active(r, k)) hi = std::max(hi, l0_off(o, r, k) + o.esz);
        if (hi > o.size_bytes)
            c.fail("operand-bounds", name, "repeats reach byte " + std::to_string(hi) + " of an operand of " +
                   std::to_string(o.size_bytes) + " B");
        for (uint32_t r = 0; r < p.repeats; ++r)
            for (uint32_t k = 0; k < p.epr; k += epb) {
                bool any = false;
                for (uint32_t j = k; j < std::min(k + epb, p.epr); ++j) any |= p.active(r, j);
                if (!any) continue;
                uint32_t a = o.base + l0_off(o, r, k);
                if (first) { c.on_write(op.id, o.mem, a, 32); } else { c.on_read(op.id, o.mem, a, 32); }
            }
        first = false;
    }
    first = true;
    for (const auto& o : ops) {
        uint32_t epb = 32 / o.esz;
        for (uint32_t r = 0; r < p.repeats; ++r)
            for (uint32_t k = 0; k < p.epr; k += epb) {
                bool any = false;
                for (uint32_t j = k; j < std::min(k + epb, p.epr); ++j) any |= p.active(r, j);
                if (!any) continue;
                uint32_t a = o.base + l0_off(o, r, k);
                if (first) c.mark_write(op.id, o.mem, a, 32); else c.mark_read(op.id, o.mem, a, 32);
            }
        first = false;
    }
}
template <typename T> inline L0Operand l0_opnd(const char* name, const AscendC::LocalTensor<T>& t, uint32_t blk, uint32_t rep) {
    t.check_live(name);
    if (t.addr_ % 32) core().fail("ub-align", name, "UB address " + std::to_string(t.addr_) + " is not 32-byte aligned");
    return {t.addr_, uint32_t(t.size_ * sizeof(T)), uint32_t(sizeof(T)), blk, rep, t.mem_};
}
}  // namespace twin

namespace AscendC {
#define TWIN_BIN2(NAME, CYC, EXPR, COND)                                                                       \
    template <typename T> inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0,               \
                                           const LocalTensor<T>& src1, const int32_t& count) {                  \
        static_assert(COND, #NAME ": data type not supported on Atlas A2");                                    \
        twin::binary2(#NAME, dst, src0, src1, count, CYC, [](auto a, auto b) { return EXPR; });                \
    }
// Add / Sub / Mul / Div / Max / Min (dual-operand pages); Max/Min return NaN if either input is NaN.
TWIN_BIN2(Add, 1.0, a + b, twin::is_vec_arith<T>)
TWIN_BIN2(Sub, 1.0, a - b, twin::is_vec_arith<T>)
TWIN_BIN2(Mul, 1.0, a * b, twin::is_vec_arith<T>)
TWIN_BIN2(Div, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, a / b, twin::is_fp<T>)
TWIN_BIN2(Max, 1.0, (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b), twin::is_vec_arith<T>)
TWIN_BIN2(Min, 1.0, (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b), twin::is_vec_arith<T>)
#undef TWIN_BIN2

#define TWIN_SCAL2(NAME, EXPR)                                                                                  \
    template <typename T> inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src,                \
                                           const T& scalarValue, const int32_t& count) {                        \
        static_assert(twin::is_vec_arith<T>, #NAME ": data type not supported on Atlas A2");                   \
        auto s = twin::ld(scalarValue);                                                                         \
        twin::unary2(#NAME, dst, src, count, 1.0, [s](auto a) { return EXPR; });                               \
    }
// Adds / Muls / Maxs / Mins (tensor-scalar pages).
TWIN_SCAL2(Adds, a + s)
TWIN_SCAL2(Muls, a * s)
TWIN_SCAL2(Maxs, (a != a) ? a : (a > s ? a : s))
TWIN_SCAL2(Mins, (a != a) ? a : (a < s ? a : s))
#undef TWIN_SCAL2

#define TWIN_UN2(NAME, CYC, EXPR, COND)                                                                        \
    template <typename T> inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src,                \
                                           const int32_t& count) {                                              \
        static_assert(COND, #NAME ": data type not supported on Atlas A2");                                    \
        twin::unary2(#NAME, dst, src, count, CYC, [](auto a) { return EXPR; });                                \
    }
// Abs / Exp / Ln / Sqrt / Rsqrt / Reciprocal / Relu (single-operand pages). Rsqrt = 1 / sqrtf(x).
TWIN_UN2(Abs, 1.0, std::fabs(a), twin::is_fp<T>)
TWIN_UN2(Exp, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, std::exp(a), twin::is_fp<T>)
TWIN_UN2(Ln, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, std::log(a), twin::is_fp<T>)
TWIN_UN2(Sqrt, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, std::sqrt(a), twin::is_fp<T>)
TWIN_UN2(Rsqrt, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, 1.0f / std::sqrt(a), twin::is_fp<T>)
TWIN_UN2(Reciprocal, twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT, 1.0f / a, twin::is_fp<T>)
TWIN_UN2(Relu, 1.0, (a != a) ? a : (a > 0 ? a : decltype(a)(0)), (twin::is_fp<T> || std::is_same_v<T, int32_t>))
#undef TWIN_UN2

// Sigmoid (advanced API "Sigmoid"): 1 / (1 + expf(-x)) in fp32; the sharedTmpBuffer form ignores the buffer.
template <typename T> inline void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount) {
    static_assert(twin::is_fp<T>, "Sigmoid: half or float");
    twin::unary2("Sigmoid", dst, src, int32_t(calCount), 4 * twin::model::VECTOR_SLOW_CYCLES_PER_REPEAT,
                 [](float a) { return 1.0f / (1.0f + std::exp(-a)); });
}
template <typename T> inline void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                                          const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount) {
    sharedTmpBuffer.check_live("Sigmoid");
    Sigmoid(dst, src, calCount);
}

// Duplicate (level-2): dst[i] = scalar.
template <typename T> inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, const int32_t& count) {
    const char* name = "Duplicate";
    twin::check_count(name, count);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    twin::check_ub_operand(name, dst, bytes);
    twin::VOp op(name, twin::repeats_of(bytes), 1.0);
    op.wr(dst, bytes); op.mwr(dst, bytes);
    T* d = dst.data();
    for (int32_t i = 0; i < count; ++i) d[i] = scalarValue;
}

// Cast (level-2): only the Atlas A2 src/dst pairs and modes of the Cast page; anything else is an error.
template <typename T, typename U>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode, const uint32_t count) {
    const char* name = "Cast";
    Core& c = core();
    twin::Kind sk = twin::kind_of<U>(), dk = twin::kind_of<T>();
    if (!(twin::cast_modes(sk, dk) >> int(round_mode) & 1))
        c.fail("cast-pair", name, std::string("Cast ") + twin::kind_name(sk) + " -> " + twin::kind_name(dk) + " with " +
               twin::mode_name(round_mode) + " is not a documented Atlas A2 conversion");
    uint64_t db = uint64_t(count) * sizeof(T), sb = uint64_t(count) * sizeof(U);
    twin::check_ub_operand(name, dst, db);
    twin::check_ub_operand(name, src, sb);
    twin::VOp op(name, twin::repeats_of(std::max(db, sb)), 1.0);
    op.rd(src, sb); op.wr(dst, db); op.mrd(src, sb); op.mwr(dst, db);
    T* d = dst.data(); const U* s = src.data();
    if (static_cast<const void*>(d) == static_cast<const void*>(s) && sizeof(T) != sizeof(U))
        c.fail("operand-overlap", name, "in-place Cast between types of different widths");
    for (uint32_t i = 0; i < count; ++i) d[i] = twin::convert<T, U>(s[i], round_mode);
}

// ---- level-0 forms ----
namespace detail {
template <bool isSetMask, typename T, typename F>
inline void l0_binary(const char* name, const LocalTensor<T>& dst, const LocalTensor<T>& a, const LocalTensor<T>& b,
                      int64_t mlen, uint64_t mhi, uint64_t mlo, int32_t rep, const BinaryRepeatParams& p, F f) {
    auto plan = twin::l0_plan(name, sizeof(T), isSetMask, mlen, mhi, mlo, rep);
    auto od = twin::l0_opnd(name, dst, p.dstBlkStride, p.dstRepStride);
    auto oa = twin::l0_opnd(name, a, p.src0BlkStride, p.src0RepStride);
    auto ob = twin::l0_opnd(name, b, p.src1BlkStride, p.src1RepStride);
    twin::VOp op(name, plan.repeats, 1.0);
    twin::l0_check(name, op, plan, {od, oa, ob});
    auto* D = reinterpret_cast<uint8_t*>(dst.data());
    auto* A = reinterpret_cast<const uint8_t*>(a.data());
    auto* B = reinterpret_cast<const uint8_t*>(b.data());
    for (uint32_t r = 0; r < plan.repeats; ++r)
        for (uint32_t k = 0; k < plan.epr; ++k) {
            if (!plan.active(r, k)) continue;
            T x, y; std::memcpy(&x, A + twin::l0_off(oa, r, k), sizeof(T)); std::memcpy(&y, B + twin::l0_off(ob, r, k), sizeof(T));
            T z = twin::st<T>(f(twin::ld(x), twin::ld(y)));
            std::memcpy(D + twin::l0_off(od, r, k), &z, sizeof(T));
        }
}
template <bool isSetMask, typename T, typename U, typename F>
inline void l0_unary(const char* name, const LocalTensor<T>& dst, const LocalTensor<U>& src, int64_t mlen,
                     uint64_t mhi, uint64_t mlo, int32_t rep, const UnaryRepeatParams& p, F f) {
    auto plan = twin::l0_plan(name, std::max(sizeof(T), sizeof(U)), isSetMask, mlen, mhi, mlo, rep);
    auto od = twin::l0_opnd(name, dst, p.dstBlkStride, p.dstRepStride);
    auto os = twin::l0_opnd(name, src, p.srcBlkStride, p.srcRepStride);
    twin::VOp op(name, plan.repeats, 1.0);
    twin::l0_check(name, op, plan, {od, os});
    auto* D = reinterpret_cast<uint8_t*>(dst.data());
    auto* S = reinterpret_cast<const uint8_t*>(src.data());
    for (uint32_t r = 0; r < plan.repeats; ++r)
        for (uint32_t k = 0; k < plan.epr; ++k) {
            if (!plan.active(r, k)) continue;
            U x; std::memcpy(&x, S + twin::l0_off(os, r, k), sizeof(U));
            T z = f(x);
            std::memcpy(D + twin::l0_off(od, r, k), &z, sizeof(T));
        }
}
}  // namespace detail

#define TWIN_BIN0(NAME, EXPR)                                                                                   \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,         \
                     uint64_t mask, const int32_t repeatTimes, const BinaryRepeatParams& repeatParams) {         \
        detail::l0_binary<isSetMask>(#NAME, dst, src0, src1, int64_t(mask), 0, 0, repeatTimes, repeatParams,    \
                                     [](auto a, auto b) { return EXPR; });                                      \
    }                                                                                                           \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1,         \
                     const uint64_t mask[], const int32_t repeatTimes, const BinaryRepeatParams& repeatParams) { \
        detail::l0_binary<isSetMask>(#NAME, dst, src0, src1, -1, mask[1], mask[0], repeatTimes, repeatParams,   \
                                     [](auto a, auto b) { return EXPR; });                                      \
    }
TWIN_BIN0(Add, a + b)
TWIN_BIN0(Sub, a - b)
TWIN_BIN0(Mul, a * b)
TWIN_BIN0(Max, (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b))
TWIN_BIN0(Min, (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b))
#undef TWIN_BIN0

#define TWIN_UN0(NAME, EXPR)                                                                                    \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, uint64_t mask,                       \
                     const int32_t repeatTimes, const UnaryRepeatParams& repeatParams) {                         \
        detail::l0_unary<isSetMask>(#NAME, dst, src, int64_t(mask), 0, 0, repeatTimes, repeatParams,            \
                                    [](T x) { auto a = twin::ld(x); return twin::st<T>(EXPR); });               \
    }                                                                                                           \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint64_t mask[],               \
                     const int32_t repeatTimes, const UnaryRepeatParams& repeatParams) {                         \
        detail::l0_unary<isSetMask>(#NAME, dst, src, -1, mask[1], mask[0], repeatTimes, repeatParams,           \
                                    [](T x) { auto a = twin::ld(x); return twin::st<T>(EXPR); });               \
    }
TWIN_UN0(Abs, std::fabs(a))
TWIN_UN0(Exp, std::exp(a))
TWIN_UN0(Relu, (a != a) ? a : (a > 0 ? a : decltype(a)(0)))
#undef TWIN_UN0

#define TWIN_SCAL0(NAME, EXPR)                                                                                  \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue, uint64_t mask, \
                     const int32_t repeatTimes, const UnaryRepeatParams& repeatParams) {                         \
        auto s = twin::ld(scalarValue);                                                                         \
        detail::l0_unary<isSetMask>(#NAME, dst, src, int64_t(mask), 0, 0, repeatTimes, repeatParams,            \
                                    [s](T x) { auto a = twin::ld(x); return twin::st<T>(EXPR); });              \
    }                                                                                                           \
    template <typename T, bool isSetMask = true>                                                                \
    inline void NAME(const LocalTensor<T>& dst, const LocalTensor<T>& src, const T& scalarValue,                \
                     const uint64_t mask[], const int32_t repeatTimes, const UnaryRepeatParams& repeatParams) {  \
        auto s = twin::ld(scalarValue);                                                                         \
        detail::l0_unary<isSetMask>(#NAME, dst, src, -1, mask[1], mask[0], repeatTimes, repeatParams,           \
                                    [s](T x) { auto a = twin::ld(x); return twin::st<T>(EXPR); });              \
    }
TWIN_SCAL0(Adds, a + s)
TWIN_SCAL0(Muls, a * s)
TWIN_SCAL0(Maxs, (a != a) ? a : (a > s ? a : s))
TWIN_SCAL0(Mins, (a != a) ? a : (a < s ? a : s))
#undef TWIN_SCAL0

// Duplicate (level-0): dstBlockStride / dstRepeatStride in 32-byte blocks.
template <typename T, bool isSetMask = true>
inline void Duplicate(const LocalTensor<T>& dst, const T& scalarValue, uint64_t mask, const int32_t repeatTimes,
                      const uint16_t dstBlockStride, const uint8_t dstRepeatStride) {
    UnaryRepeatParams p(dstBlockStride, 1, dstRepeatStride, 0);
    // the source operand is the dst itself with zero strides, used only for shape: write-only in effect
    auto plan = twin::l0_plan("Duplicate", sizeof(T), isSetMask, int64_t(mask), 0, 0, repeatTimes);
    auto od = twin::l0_opnd("Duplicate", dst, p.dstBlkStride, p.dstRepStride);
    twin::VOp op("Duplicate", plan.repeats, 1.0);
    twin::l0_check("Duplicate", op, plan, {od});
    auto* D = reinterpret_cast<uint8_t*>(dst.data());
    for (uint32_t r = 0; r < plan.repeats; ++r)
        for (uint32_t k = 0; k < plan.epr; ++k)
            if (plan.active(r, k)) std::memcpy(D + twin::l0_off(od, r, k), &scalarValue, sizeof(T));
}
// Cast (level-0): elements per repeat = 256 B / the wider of the two types.
template <typename T, typename U, bool isSetMask = true>
inline void Cast(const LocalTensor<T>& dst, const LocalTensor<U>& src, const RoundMode& round_mode, uint64_t mask,
                 const int32_t repeatTimes, const UnaryRepeatParams& repeatParams) {
    twin::Kind sk = twin::kind_of<U>(), dk = twin::kind_of<T>();
    if (!(twin::cast_modes(sk, dk) >> int(round_mode) & 1))
        core().fail("cast-pair", "Cast", std::string("Cast ") + twin::kind_name(sk) + " -> " + twin::kind_name(dk) +
                    " with " + twin::mode_name(round_mode) + " is not a documented Atlas A2 conversion");
    detail::l0_unary<isSetMask>("Cast", dst, src, int64_t(mask), 0, 0, repeatTimes, repeatParams,
                                [round_mode](U x) { return twin::convert<T, U>(x, round_mode); });
}
}  // namespace AscendC
