// Data movement GM <-> UB: DataCopy ("DataCopy" basic data movement page) and DataCopyPad ("DataCopyPad(ISASI)",
// atlasascendc_api_07_0265). GM -> UB runs on PIPE_MTE2, UB -> GM on PIPE_MTE3.
#pragma once
#include "sync.h"

namespace twin {
template <typename T> inline void check_ub_operand(const char* call, const AscendC::LocalTensor<T>& t,
                                                   uint64_t bytes, uint32_t align = 32) {
    Core& c = core();
    t.check_live(call);
    if (t.addr_ % align)
        c.fail("ub-align", call, std::string(mem_name(t.mem_)) + " address " + std::to_string(t.addr_) +
               " is not " + std::to_string(align) + "-byte aligned");
    if (bytes > uint64_t(t.size_) * sizeof(T))
        c.fail("operand-bounds", call, std::to_string(bytes) + " B exceed the LocalTensor's " +
               std::to_string(uint64_t(t.size_) * sizeof(T)) + " B");
}
// One GM write of `bytes` at `dst` from `src`, honouring the core's atomic mode.
inline void gm_store(Core& c, const char* call, uint8_t* dst, const uint8_t* src, uint64_t bytes, size_t elem) {
    if (c.atomic_kind == 0) { std::memcpy(dst, src, bytes); return; }
    size_t need = c.atomic_kind == 2 ? 2 : 4;
    if (elem != need)
        c.fail("atomic-type", call, "SetAtomicAdd element size " + std::to_string(need) +
               " B but the copied tensor has " + std::to_string(elem) + " B elements");
    for (uint64_t i = 0; i < bytes; i += need) {
        if (c.atomic_kind == 3) {
            int32_t v; std::memcpy(&v, src + i, 4);
            __atomic_fetch_add(reinterpret_cast<int32_t*>(dst + i), v, __ATOMIC_RELAXED);
        } else if (c.atomic_kind == 1) {
            float v; std::memcpy(&v, src + i, 4);
            auto* p = reinterpret_cast<uint32_t*>(dst + i);
            uint32_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nw;
            do { nw = f32_bits(bits_f32(old) + v); } while (!__atomic_compare_exchange_n(p, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        } else {
            uint16_t hv; std::memcpy(&hv, src + i, 2);
            float v = f16_to_f32(hv);
            uintptr_t a = reinterpret_cast<uintptr_t>(dst + i);
            auto* w = reinterpret_cast<uint32_t*>(a & ~uintptr_t(3));
            int sh = (a & 2) ? 16 : 0;
            uint32_t old = __atomic_load_n(w, __ATOMIC_RELAXED), nw;
            do {
                uint16_t cur = uint16_t(old >> sh);
                uint16_t sum = f32_to_f16_rne(f16_to_f32(cur) + v);
                nw = (old & ~(0xFFFFu << sh)) | (uint32_t(sum) << sh);
            } while (!__atomic_compare_exchange_n(w, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        }
    }
}
}  // namespace twin

namespace AscendC {
// DataCopy GM -> UB, `count` elements: the byte length and the UB address must be 32-byte multiples.
template <typename T> inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, uint32_t count) {
    const char* call = dst.mem_ == twin::M_L1 ? "DataCopy(GM->L1)" : "DataCopy(GM->UB)";
    Core& c = core();
    uint64_t bytes = uint64_t(count) * sizeof(T);
    if (bytes % 32)
        c.fail("datacopy-align", call, std::to_string(bytes) + " B is not a multiple of 32 B (the hardware moves "
               "whole 32-byte blocks; use DataCopyPad for unaligned lengths)");
    twin::check_ub_operand(call, dst, bytes);
    src.check(call, 0, count, false);
    uint32_t id = c.issue_dma(call, twin::P_MTE2, bytes);
    c.cnt.mte2_bytes += bytes;
    c.on_write(id, dst.mem_, dst.addr_, uint32_t(bytes));
    c.mark_write(id, dst.mem_, dst.addr_, uint32_t(bytes));
    c.gm_read(id, src.ptr_, bytes);
    std::memcpy(dst.data(), src.ptr_, bytes);
}
// DataCopy UB -> GM, `count` elements (same alignment rules; GM past the tensor would be overwritten).
template <typename T> inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, uint32_t count) {
    const char* call = "DataCopy(UB->GM)";
    Core& c = core();
    uint64_t bytes = uint64_t(count) * sizeof(T);
    if (bytes % 32)
        c.fail("datacopy-align", call, std::to_string(bytes) + " B is not a multiple of 32 B (the hardware writes "
               "whole 32-byte blocks past the end; use DataCopyPad for unaligned lengths)");
    twin::check_ub_operand(call, src, bytes);
    dst.check(call, 0, count, true);
    uint32_t id = c.issue_dma(call, twin::P_MTE3, bytes);
    c.cnt.mte3_bytes += bytes;
    c.on_read(id, src.mem_, src.addr_, uint32_t(bytes));
    c.mark_read(id, src.mem_, src.addr_, uint32_t(bytes));
    twin::gm_store(c, call, reinterpret_cast<uint8_t*>(dst.ptr_), reinterpret_cast<const uint8_t*>(src.data()), bytes, sizeof(T));
    c.gm_wrote(id, dst.ptr_, bytes);
}
namespace detail {
inline void check_copy_params(const char* call, const DataCopyParams& p) {
    if (p.blockCount < 1 || p.blockCount > 4095)
        core().fail("datacopy-params", call, "blockCount " + std::to_string(p.blockCount) + " outside [1, 4095]");
    if (p.blockLen < 1)
        core().fail("datacopy-params", call, "blockLen 0 (unit: 32-byte blocks, range [1, 65535])");
}
}  // namespace detail
// DataCopy GM -> UB with DataCopyParams: blockCount blocks of blockLen x 32 B; srcStride (GM) and dstStride
// (UB) are the gaps between blocks, in 32-byte units.
template <typename T> inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyParams& p) {
    const char* call = "DataCopy(GM->UB, DataCopyParams)";
    Core& c = core();
    detail::check_copy_params(call, p);
    uint64_t blk = uint64_t(p.blockLen) * 32, n = p.blockCount;
    uint64_t ub_extent = n * blk + (n - 1) * p.dstStride * 32, gm_extent = n * blk + (n - 1) * p.srcStride * 32;
    twin::check_ub_operand(call, dst, ub_extent);
    src.check_bytes(call, 0, gm_extent, false);
    uint32_t id = c.issue_dma(call, twin::P_MTE2, n * blk);
    c.cnt.mte2_bytes += n * blk;
    auto* g = reinterpret_cast<const uint8_t*>(src.ptr_);
    auto* u = reinterpret_cast<uint8_t*>(dst.data());
    for (uint64_t b = 0; b < n; ++b) {
        uint32_t uo = uint32_t(b * (blk + p.dstStride * 32));
        c.on_write(id, dst.mem_, dst.addr_ + uo, uint32_t(blk));
        c.mark_write(id, dst.mem_, dst.addr_ + uo, uint32_t(blk));
        c.gm_read(id, g + b * (blk + p.srcStride * 32), blk);
        std::memcpy(u + uo, g + b * (blk + p.srcStride * 32), blk);
    }
}
template <typename T> inline void DataCopy(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyParams& p) {
    const char* call = "DataCopy(UB->GM, DataCopyParams)";
    Core& c = core();
    detail::check_copy_params(call, p);
    uint64_t blk = uint64_t(p.blockLen) * 32, n = p.blockCount;
    uint64_t ub_extent = n * blk + (n - 1) * p.srcStride * 32, gm_extent = n * blk + (n - 1) * p.dstStride * 32;
    twin::check_ub_operand(call, src, ub_extent);
    dst.check_bytes(call, 0, gm_extent, true);
    uint32_t id = c.issue_dma(call, twin::P_MTE3, n * blk);
    c.cnt.mte3_bytes += n * blk;
    auto* g = reinterpret_cast<uint8_t*>(dst.ptr_);
    auto* u = reinterpret_cast<const uint8_t*>(src.data());
    for (uint64_t b = 0; b < n; ++b) {
        uint32_t uo = uint32_t(b * (blk + p.srcStride * 32));
        c.on_read(id, src.mem_, src.addr_ + uo, uint32_t(blk));
        c.mark_read(id, src.mem_, src.addr_ + uo, uint32_t(blk));
        twin::gm_store(c, call, g + b * (blk + p.dstStride * 32), u + uo, blk, sizeof(T));
        c.gm_wrote(id, g + b * (blk + p.dstStride * 32), blk);
    }
}

namespace detail {
inline void check_pad_params(const char* call, const DataCopyExtParams& p) {
    if (p.blockCount < 1 || p.blockCount > 4095)
        core().fail("datacopypad-range", call, "blockCount " + std::to_string(p.blockCount) + " outside [1, 4095]");
    if (p.blockLen < 1 || p.blockLen > 65535)
        core().fail("datacopypad-range", call, "blockLen " + std::to_string(p.blockLen) + " B outside [1, 65535]");
}
}  // namespace detail
// DataCopyPad GM -> UB: blockCount rows of blockLen bytes; GM gap srcStride in bytes, UB gap dstStride in
// 32-byte blocks. Each UB row is [leftPadding elems][data][rightPadding elems] rounded up to 32 B. With isPad the
// left/right padding holds paddingValue; every other byte of the row beyond the data is unspecified on hardware
// and POISONED (0xFF: NaN for float types) by the twin.
template <typename T>
inline void DataCopyPad(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const DataCopyExtParams& p,
                        const DataCopyPadExtParams<T>& pad) {
    const char* call = "DataCopyPad(GM->UB)";
    Core& c = core();
    detail::check_pad_params(call, p);
    if (pad.leftPadding * sizeof(T) > 32 || pad.rightPadding * sizeof(T) > 32)
        c.fail("datacopypad-range", call, "left/right padding beyond 32 B");
    uint64_t lp = pad.leftPadding * sizeof(T), rp = pad.rightPadding * sizeof(T), n = p.blockCount;
    uint64_t row = (lp + p.blockLen + rp + 31) / 32 * 32;
    uint64_t ub_extent = n * row + (n - 1) * uint64_t(p.dstStride) * 32;
    uint64_t gm_extent = n * p.blockLen + (n - 1) * uint64_t(p.srcStride);
    twin::check_ub_operand(call, dst, ub_extent);
    src.check_bytes(call, 0, gm_extent, false);
    uint32_t id = c.issue_dma(call, twin::P_MTE2, n * row);
    c.cnt.mte2_bytes += n * row;
    auto* g = reinterpret_cast<const uint8_t*>(src.ptr_);
    auto* u = reinterpret_cast<uint8_t*>(dst.data());
    for (uint64_t b = 0; b < n; ++b) {
        uint64_t uo = b * (row + uint64_t(p.dstStride) * 32);
        c.on_write(id, dst.mem_, dst.addr_ + uint32_t(uo), uint32_t(row));
        c.mark_write(id, dst.mem_, dst.addr_ + uint32_t(uo), uint32_t(row));
        std::memset(u + uo, twin::POISON, row);
        if (pad.isPad) {
            for (uint64_t i = 0; i < lp; i += sizeof(T)) std::memcpy(u + uo + i, &pad.paddingValue, sizeof(T));
            for (uint64_t i = 0; i < rp; i += sizeof(T)) std::memcpy(u + uo + lp + p.blockLen + i, &pad.paddingValue, sizeof(T));
        }
        c.gm_read(id, g + b * (uint64_t(p.blockLen) + p.srcStride), p.blockLen);
        std::memcpy(u + uo + lp, g + b * (uint64_t(p.blockLen) + p.srcStride), p.blockLen);
    }
}
// DataCopyPad UB -> GM: blockCount rows of blockLen bytes; UB gap srcStride in 32-byte blocks (rows start 32-byte
// aligned), GM gap dstStride in bytes. Writes exactly blockLen bytes per row.
template <typename T>
inline void DataCopyPad(const GlobalTensor<T>& dst, const LocalTensor<T>& src, const DataCopyExtParams& p) {
    const char* call = "DataCopyPad(UB->GM)";
    Core& c = core();
    detail::check_pad_params(call, p);
    uint64_t n = p.blockCount, row = (uint64_t(p.blockLen) + 31) / 32 * 32;
    uint64_t ub_extent = (n - 1) * (row + uint64_t(p.srcStride) * 32) + p.blockLen;
    uint64_t gm_extent = n * p.blockLen + (n - 1) * uint64_t(p.dstStride);
    twin::check_ub_operand(call, src, ub_extent);
    dst.check_bytes(call, 0, gm_extent, true);
    uint32_t id = c.issue_dma(call, twin::P_MTE3, n * row);
    c.cnt.mte3_bytes += n * p.blockLen;
    auto* g = reinterpret_cast<uint8_t*>(dst.ptr_);
    auto* u = reinterpret_cast<const uint8_t*>(src.data());
    for (uint64_t b = 0; b < n; ++b) {
        uint64_t uo = b * (row + uint64_t(p.srcStride) * 32);
        c.on_read(id, src.mem_, src.addr_ + uint32_t(uo), p.blockLen);
        c.mark_read(id, src.mem_, src.addr_ + uint32_t(uo), p.blockLen);
        twin::gm_store(c, call, g + b * (uint64_t(p.blockLen) + p.dstStride), u + uo, p.blockLen, sizeof(T));
        c.gm_wrote(id, g + b * (uint64_t(p.blockLen) + p.dstStride), p.blockLen);
    }
}
}  // namespace AscendC
