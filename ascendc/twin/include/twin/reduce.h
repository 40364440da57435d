// Reductions ("ReduceMax"/"ReduceMin"/"ReduceSum" pages, atlasascendc_api_07_0075..0077), "Compare",
// "CompareScalar", "Select" and "ArithProgression" (advanced API) of the AscendC API reference.
#pragma once
#include <vector>
#include "vector.h"

namespace twin {
// Minimum workLocal elements, following the ReduceMax page's "minimum work space" recipe: the first round's
// (value, index) pairs rounded up to a 32-byte block; with calIndex, plus every later round's output.
template <typename T> inline uint64_t reduce_work_elems(uint64_t count, bool cal_index) {
    uint64_t epr = 256 / sizeof(T), epb = 32 / sizeof(T);
    uint64_t rep = (count + epr - 1) / epr, out = rep * 2;
    uint64_t need = (out + epb - 1) / epb * epb;
    if (cal_index)
        while (out > 2) { rep = (out + epr - 1) / epr; out = rep * 2; need += (out + epb - 1) / epb * epb; }
    return std::max<uint64_t>(need, epb);
}
template <typename T> inline void reduce_checks(const char* name, const AscendC::LocalTensor<T>& dst,
                                                const AscendC::LocalTensor<T>& src, const AscendC::LocalTensor<T>& work,
                                                int32_t count, uint64_t work_need, uint32_t dst_elems) {
    check_count(name, count);
    if (count == 0) core().fail("count-negative", name, "count 0: a reduction needs at least one element");
    check_ub_operand(name, dst, dst_elems * sizeof(T), sizeof(T) == 2 ? 4 : 8);
    check_ub_operand(name, src, uint64_t(count) * sizeof(T));
    twin::check_ub_operand(name, work, 0);
    if (uint64_t(work.size_) < work_need)
        core().fail("operand-bounds", name, "workLocal holds " + std::to_string(work.size_) + " elements, needs " +
                    std::to_string(work_need));
}
template <typename T, bool is_max>
inline void reduce_minmax(const char* name, const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                          const AscendC::LocalTensor<T>& work, int32_t count, bool cal_index) {
    static_assert(is_fp<T>, "ReduceMax/ReduceMin: half or float on Atlas A2");
    reduce_checks(name, dst, src, work, count, reduce_work_elems<T>(uint64_t(count), cal_index), cal_index ? 2 : 1);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    uint64_t rep = repeats_of(bytes);
    VOp op(name, rep + 8, 1.0);
    op.rd(src, bytes); op.wr(work, 32); op.wr(dst, (cal_index ? 2 : 1) * sizeof(T));
    op.mrd(src, bytes); op.mwr(work, 32); op.mwr(dst, (cal_index ? 2 : 1) * sizeof(T));
    const T* s = src.data();
    // Ascending scan: NaN wins (first NaN), ties keep the lowest index.
    uint32_t best = 0; float bv = float(s[0]);
    for (int32_t i = 1; i < count && bv == bv; ++i) {
        float v = float(s[i]);
        if (v != v || (is_max ? v > bv : v < bv)) { bv = v; best = uint32_t(i); }
    }
    T* d = dst.data();
    d[0] = s[best];
    std::memset(work.data(), POISON, 32);
    if (cal_index) {
        if constexpr (sizeof(T) == 4) { uint32_t ix = best; std::memcpy(d + 1, &ix, 4); }
        else { uint16_t ix = uint16_t(best); std::memcpy(d + 1, &ix, 2); }
    }
}
}  // namespace twin

namespace AscendC {
// ReduceMax: dst[0] = max of src[0, count); with calIndex dst[1] holds the index's bits (read it through
// reinterpret as uint32_t for float, uint16_t for half, as the page says). Ties: lowest index. NaN: the first NaN.
template <typename T>
inline void ReduceMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
                      const int32_t count, bool calIndex = 0) {
    twin::reduce_minmax<T, true>("ReduceMax", dst, src, workLocal, count, calIndex);
}
template <typename T>
inline void ReduceMin(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
                      const int32_t count, bool calIndex = 0) {
    twin::reduce_minmax<T, false>("ReduceMin", dst, src, workLocal, count, calIndex);
}
// ReduceSum: fixed order. Each 256-byte repeat is summed by a halving tree (c[i] += c[i + w] for w = n/2 ... 1,
// n = elements per repeat, missing tail elements = +0); the per-repeat sums are reduced the same way, round after
// round, until one value remains. Every add is rounded to T.
template <typename T>
inline void ReduceSum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& workLocal,
                      const int32_t count) {
    static_assert(twin::is_fp<T>, "ReduceSum: half or float on Atlas A2");
    const char* name = "ReduceSum";
    uint64_t epr = 256 / sizeof(T), epb = 32 / sizeof(T);
    uint64_t rep = (uint64_t(std::max(count, 0)) + epr - 1) / epr;
    twin::reduce_checks(name, dst, src, workLocal, count, std::max<uint64_t>((rep + epb - 1) / epb * epb, epb), 1);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    twin::VOp op(name, rep + 8, 1.0);
    op.rd(src, bytes); op.wr(workLocal, 32); op.wr(dst, sizeof(T));
    op.mrd(src, bytes); op.mwr(workLocal, 32); op.mwr(dst, sizeof(T));
    std::vector<T> v(src.data(), src.data() + count);
    do {
        std::vector<T> next;
        for (size_t g = 0; g < v.size(); g += epr) {
            std::vector<T> c(epr, T(0.0f));
            for (size_t i = 0; i < epr && g + i < v.size(); ++i) c[i] = v[g + i];
            for (size_t w = epr / 2; w >= 1; w /= 2)
                for (size_t i = 0; i < w; ++i) c[i] = T(float(c[i]) + float(c[i + w]));
            next.push_back(c[0]);
        }
        v.swap(next);
    } while (v.size() > 1);
    std::memset(workLocal.data(), twin::POISON, 32);
    dst.data()[0] = v[0];
}

// Compare: dst bit i (byte i / 8, bit i % 8) = cmp(src0[i], src1[i]); NaN compares false except NE.
// count * sizeof(T) must be a multiple of 256 B (the page's constraint for the count form).
namespace detail {
template <typename T> inline bool cmp(CMPMODE m, T a, T b) {
    float x = float(a), y = float(b);
    switch (m) {
        case CMPMODE::LT: return x < y; case CMPMODE::GT: return x > y; case CMPMODE::EQ: return x == y;
        case CMPMODE::LE: return x <= y; case CMPMODE::GE: return x >= y; case CMPMODE::NE: return !(x == y);
    }
    return false;
}
template <typename T, typename U>
inline void compare_impl(const char* name, const LocalTensor<U>& dst, const LocalTensor<T>& src0,
                         const LocalTensor<T>* src1, T scalar, CMPMODE m, uint32_t count, uint32_t align_bytes) {
    Core& c = core();
    uint64_t bytes = uint64_t(count) * sizeof(T), mbytes = (uint64_t(count) + 7) / 8;
    if (bytes % align_bytes)
        c.fail("count-align", name, std::to_string(count) + " elements = " + std::to_string(bytes) +
               " B, not a multiple of " + std::to_string(align_bytes) + " B");
    twin::check_ub_operand(name, dst, mbytes);
    twin::check_ub_operand(name, src0, bytes);
    if (src1) twin::check_ub_operand(name, *src1, bytes);
    twin::VOp op(name, twin::repeats_of(bytes), 1.0);
    op.rd(src0, bytes); if (src1) op.rd(*src1, bytes); op.wr(dst, mbytes);
    op.mrd(src0, bytes); if (src1) op.mrd(*src1, bytes); op.mwr(dst, mbytes);
    auto* d = reinterpret_cast<uint8_t*>(dst.data());
    std::memset(d, 0, mbytes);
    const T* a = src0.data(); const T* b = src1 ? src1->data() : nullptr;
    for (uint32_t i = 0; i < count; ++i)
        if (cmp(m, a[i], b ? b[i] : scalar)) d[i / 8] |= uint8_t(1u << (i % 8));
}
}  // namespace detail
template <typename T, typename U>
inline void Compare(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, CMPMODE cmpMode,
                    uint32_t count) {
    detail::compare_impl("Compare", dst, src0, &src1, T(0), cmpMode, count, 256);
}
// CompareScalar: as Compare against one scalar; count * sizeof(T) must be a multiple of 32 B.
template <typename T, typename U>
inline void CompareScalar(const LocalTensor<U>& dst, const LocalTensor<T>& src0, const T src1Scalar, CMPMODE cmpMode,
                          uint32_t count) {
    detail::compare_impl("CompareScalar", dst, src0, static_cast<const LocalTensor<T>*>(nullptr), src1Scalar, cmpMode,
                         count, 32);
}

// Select: dst[i] = bit i of selMask ? src0[i] : src1[i] (VSEL_TENSOR_TENSOR_MODE) or : scalar
// (VSEL_TENSOR_SCALAR_MODE).
namespace detail {
template <typename T, typename U>
inline void select_impl(const LocalTensor<T>& dst, const LocalTensor<U>& mask, const LocalTensor<T>& src0,
                        const LocalTensor<T>* src1, T scalar, SELMODE mode, uint32_t count) {
    const char* name = "Select";
    Core& c = core();
    if ((src1 && mode != SELMODE::VSEL_TENSOR_TENSOR_MODE) || (!src1 && mode != SELMODE::VSEL_TENSOR_SCALAR_MODE))
        c.fail("select-mode", name, "SELMODE does not match the operands (tensor/tensor or tensor/scalar form)");
    uint64_t bytes = uint64_t(count) * sizeof(T), mbytes = (uint64_t(count) + 7) / 8;
    twin::check_ub_operand(name, dst, bytes);
    twin::check_ub_operand(name, mask, mbytes);
    twin::check_ub_operand(name, src0, bytes);
    if (src1) twin::check_ub_operand(name, *src1, bytes);
    twin::VOp op(name, twin::repeats_of(bytes), 1.0);
    op.rd(mask, mbytes); op.rd(src0, bytes); if (src1) op.rd(*src1, bytes); op.wr(dst, bytes);
    op.mrd(mask, mbytes); op.mrd(src0, bytes); if (src1) op.mrd(*src1, bytes); op.mwr(dst, bytes);
    auto* m = reinterpret_cast<const uint8_t*>(mask.data());
    T* d = dst.data(); const T* a = src0.data(); const T* b = src1 ? src1->data() : nullptr;
    for (uint32_t i = 0; i < count; ++i) d[i] = (m[i / 8] >> (i % 8) & 1) ? a[i] : (b ? b[i] : scalar);
}
}  // namespace detail
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0,
                   const LocalTensor<T>& src1, SELMODE selMode, uint32_t count) {
    detail::select_impl(dst, selMask, src0, &src1, T(0), selMode, count);
}
template <typename T, typename U>
inline void Select(const LocalTensor<T>& dst, const LocalTensor<U>& selMask, const LocalTensor<T>& src0, T src1,
                   SELMODE selMode, uint32_t count) {
    detail::select_impl(dst, selMask, src0, static_cast<const LocalTensor<T>*>(nullptr), src1, selMode, count);
}

// ArithProgression (advanced API): dst[i] = firstValue + i * diffValue, computed in fp32 (ints: exactly).
template <typename T>
inline void ArithProgression(const LocalTensor<T>& dst, const T firstValue, const T diffValue, const int32_t count) {
    const char* name = "ArithProgression";
    twin::check_count(name, count);
    uint64_t bytes = uint64_t(count) * sizeof(T);
    twin::check_ub_operand(name, dst, bytes);
    twin::VOp op(name, twin::repeats_of(bytes) + 8, 1.0);
    op.wr(dst, bytes); op.mwr(dst, bytes);
    T* d = dst.data();
    auto f = twin::ld(firstValue), df = twin::ld(diffValue);
    for (int32_t i = 0; i < count; ++i) d[i] = twin::st<T>(f + decltype(f)(i) * df);
}
}  // namespace AscendC
