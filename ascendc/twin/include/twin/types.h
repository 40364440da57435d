// Kernel-language macros, scalar types and enums of the AscendC API, as the twin defines them.
// Clean-room: names and values follow the public AscendC API reference (hiascend.com "ascendcopapi" pages).
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#define __global__
#define __aicore__
#define __gm__
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif
// Kernel types ("Kernel type" / KERNEL_TASK_TYPE_DEFAULT pages); the launcher states the kind it runs
// (twin::Launch(block_dim, kind)), and the macro checks the kernel agrees. ASCEND_IS_AIV / ASCEND_IS_AIC ask the
// running core.
enum KernelMetaType : uint8_t {
    KERNEL_TYPE_AIV_ONLY = 0, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIV_1_0, KERNEL_TYPE_MIX_AIC_1_0,
    KERNEL_TYPE_MIX_AIC_1_1, KERNEL_TYPE_MIX_AIC_1_2,
};
namespace twin {
bool core_is_aic();
void check_kernel_type(KernelMetaType t);
}  // namespace twin
#define KERNEL_TASK_TYPE_DEFAULT(x) twin::check_kernel_type(x)
#define ASCEND_IS_AIV (!twin::core_is_aic())
#define ASCEND_IS_AIC (twin::core_is_aic())

namespace twin {
// IEEE binary16 / bfloat16 <-> float, round-half-to-even (the default conversion of the `half` type).
inline uint16_t f32_to_f16_rne(float f);
inline float f16_to_f32(uint16_t h);
inline uint16_t f32_to_bf16_rne(float f);
inline float bf16_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
}  // namespace twin

// `half`: fp16 storage type; arithmetic goes through float (implicit conversions both ways).
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(twin::f32_to_f16_rne(f)) {}
    operator float() const { return twin::f16_to_f32(bits); }
    static half from_bits(uint16_t b) { half h; h.bits = b; return h; }
};
struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    bfloat16_t(float f) : bits(twin::f32_to_bf16_rne(f)) {}
    operator float() const { return twin::bf16_to_f32(bits); }
    static bfloat16_t from_bits(uint16_t b) { bfloat16_t h; h.bits = b; return h; }
};

using event_t = int32_t;

// pipe_t: "Hardware pipelines" table of the PipeBarrier page (atlasascendc_api_07_0271).
enum pipe_t : int32_t {
    PIPE_S = 0, PIPE_V = 1, PIPE_M = 2, PIPE_MTE1 = 3, PIPE_MTE2 = 4, PIPE_MTE3 = 5, PIPE_ALL = 6, PIPE_FIX = 10,
};

namespace AscendC {
constexpr int32_t ONE_BLK_SIZE = 32;       // one data block (bytes)
constexpr int32_t ONE_REPEAT_BYTE_SIZE = 256;  // one vector repeat = 8 blocks
constexpr uint64_t MASK_PLACEHOLDER = 0;

// TPosition (TQue/TBuf positions, "TPosition" page of the API reference).
enum class TPosition : uint8_t {
    GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, SPM, SHM = SPM, TSCM, MAX,
};
using QuePosition = TPosition;

// HardEvent: src_dst pipe pairs for SetFlag/WaitFlag ("SetFlag/WaitFlag" page, atlasascendc_api_07_0270).
enum class HardEvent : uint8_t {
    MTE2_MTE1, MTE1_MTE2, MTE1_M, M_MTE1, MTE2_V, V_MTE2, MTE3_V, V_MTE3, M_V, V_M, V_V, MTE3_MTE1, MTE1_MTE3,
    MTE1_V, MTE2_M, M_MTE2, V_MTE1, M_FIX, FIX_M, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S, S_MTE3, MTE3_S,
    MTE2_FIX, FIX_MTE2, FIX_S, M_S, FIX_MTE3,
};

// RoundMode ("Cast" page, atlasascendc_api_07_0073; scalar Cast page atlasascendc_api_07_0018 lists the enum).
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

// Compare / Select modes ("Compare" and "Select" pages).
enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };
enum class MaskMode : uint8_t { NORMAL = 0, COUNTER };

// Repeat parameters of level-0 vector APIs ("UnaryRepeatParams"/"BinaryRepeatParams", general parameter page).
struct UnaryRepeatParams {
    uint16_t dstBlkStride = 1, srcBlkStride = 1;
    uint8_t dstRepStride = 8, srcRepStride = 8;
    UnaryRepeatParams() = default;
    UnaryRepeatParams(uint16_t db, uint16_t sb, uint8_t dr, uint8_t sr)
        : dstBlkStride(db), srcBlkStride(sb), dstRepStride(dr), srcRepStride(sr) {}
};
struct BinaryRepeatParams {
    uint8_t dstBlkStride = 1, src0BlkStride = 1, src1BlkStride = 1;
    uint8_t dstRepStride = 8, src0RepStride = 8, src1RepStride = 8;
    BinaryRepeatParams() = default;
    BinaryRepeatParams(uint8_t db, uint8_t s0b, uint8_t s1b, uint8_t dr, uint8_t s0r, uint8_t s1r)
        : dstBlkStride(db), src0BlkStride(s0b), src1BlkStride(s1b), dstRepStride(dr), src0RepStride(s0r),
          src1RepStride(s1r) {}
};

// DataCopy / DataCopyPad parameter structs (DataCopy page; DataCopyPad page atlasascendc_api_07_0265).
struct DataCopyParams {
    uint16_t blockCount = 1, blockLen = 0, srcStride = 0, dstStride = 0;
    DataCopyParams() = default;
    DataCopyParams(uint16_t c, uint16_t l, uint16_t s, uint16_t d) : blockCount(c), blockLen(l), srcStride(s), dstStride(d) {}
};
struct DataCopyExtParams {
    uint16_t blockCount = 0;
    uint32_t blockLen = 0, srcStride = 0, dstStride = 0, rsv = 0;
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t c, uint32_t l, uint32_t s, uint32_t d, uint32_t r)
        : blockCount(c), blockLen(l), srcStride(s), dstStride(d), rsv(r) {}
};
template <typename T> struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0, rightPadding = 0;
    T paddingValue = T(0);
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool p, uint8_t l, uint8_t r, T v) : isPad(p), leftPadding(l), rightPadding(r), paddingValue(v) {}
};
}  // namespace AscendC
