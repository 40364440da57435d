// The cube (AIC) side: GM -> L1 ND->NZ copy, L1 -> L0A/L0B LoadData, Mmad, Fixpipe L0C -> GM.
// Pages (hiascend "ascendcopapi"): DataCopy ND2NZ ("随路格式转换", atlasascendc_api_07_0108; loop semantics and
// ranges of its intrinsic copy_gm_to_cbuf_multi_nd2nz, cceapi_0096), LoadData Load2D (atlasascendc_api_07_0238;
// LoadData2DParams table of atlasascendc_api_07_0135), Mmad (atlasascendc_api_07_0242 and asc-devkit docs
// Mmad.md: A ZZ, B ZN, C NZ), Fixpipe (atlasascendc_api_07_0251, QuantMode_t). Layouts: ascendc/twin/README.md.
#pragma once
#include <type_traits>
#include "datacopy.h"

namespace AscendC {
// ---- parameter structs ------------------------------------------------------------------------------
struct Nd2NzParams {
    uint16_t ndNum = 1, nValue = 0, dValue = 0, srcNdMatrixStride = 0, srcDValue = 0, dstNzC0Stride = 1,
             dstNzNStride = 1, dstNzMatrixStride = 1;
    Nd2NzParams() = default;
    Nd2NzParams(uint16_t nd, uint16_t n, uint16_t d, uint16_t sm, uint16_t sd, uint16_t c0, uint16_t ns, uint16_t dm)
        : ndNum(nd), nValue(n), dValue(d), srcNdMatrixStride(sm), srcDValue(sd), dstNzC0Stride(c0),
          dstNzNStride(ns), dstNzMatrixStride(dm) {}
};
struct LoadData2DParams {
    uint16_t startIndex = 0;
    uint8_t repeatTimes = 0;
    uint16_t srcStride = 0;
    uint8_t sid = 0;
    uint16_t dstGap = 0;
    bool ifTranspose = false;
    uint8_t addrMode = 0;
    LoadData2DParams() = default;
    LoadData2DParams(uint16_t s, uint8_t r, uint16_t ss, uint8_t id, uint16_t g, bool t, uint8_t a)
        : startIndex(s), repeatTimes(r), srcStride(ss), sid(id), dstGap(g), ifTranspose(t), addrMode(a) {}
};
struct MmadParams {
    uint16_t m = 0, n = 0, k = 0;
    bool isBias = false;
    int32_t fmOffset = 0;
    bool enSsparse = false, enWinogradA = false, enWinogradB = false;
    uint8_t unitFlag = 0;
    bool kDirectionAlign = false;
    bool cmatrixSource = false, cmatrixInitVal = true;
    MmadParams() = default;
    MmadParams(uint16_t m_, uint16_t n_, uint16_t k_, bool bias) : m(m_), n(n_), k(k_), isBias(bias) {}
};
enum QuantMode_t : uint8_t {
    NoQuant = 0, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE, REQ8, VREQ8, QS322BF16_PRE,
    VQS322BF16_PRE,
};
struct FixpipeParamsV220 {
    uint16_t nSize = 0, mSize = 0, srcStride = 0;
    uint32_t dstStride = 0;
    QuantMode_t quantPre = NoQuant;
    uint64_t deqScalar = 0;
    uint16_t ndNum = 1, srcNdStride = 0, dstNdStride = 0;
    bool reluEn = false;
    uint8_t unitFlag = 0;
    bool isChannelSplit = false;
};
enum class CO2Layout : uint8_t { NZ = 0, ROW_MAJOR };
struct FixpipeConfig { CO2Layout format; };
inline constexpr FixpipeConfig CFG_ROW_MAJOR = {CO2Layout::ROW_MAJOR};
inline constexpr FixpipeConfig CFG_NZ = {CO2Layout::NZ};
}  // namespace AscendC

namespace twin::cube {
using AscendC::LocalTensor;
constexpr uint32_t FRACTAL_BYTES = 512;
template <typename T> constexpr uint32_t c0() { return 32 / sizeof(T); }  // fractal width: 16 x (32 B / sizeof(T))

template <typename T> inline void need_mem(const char* call, const char* what, const LocalTensor<T>& t, int mem) {
    t.check_live(call);
    if (t.mem_ != mem)
        core().fail("cube-position", call, std::string(what) + " is in " + mem_name(t.mem_) + ", the API takes " +
                    mem_name(mem));
    if (t.addr_ % mem_align(mem))
        core().fail("cube-align", call, std::string(what) + " " + mem_name(mem) + " address " +
                    std::to_string(t.addr_) + " is not " + std::to_string(mem_align(mem)) + "-byte aligned");
}
template <typename T> inline void need_bytes(const char* call, const char* what, const LocalTensor<T>& t, uint64_t bytes) {
    if (bytes > uint64_t(t.size_) * sizeof(T))
        core().fail("operand-bounds", call, std::string(what) + ": " + std::to_string(bytes) +
                    " B exceed the LocalTensor's " + std::to_string(uint64_t(t.size_) * sizeof(T)) + " B");
}
inline void range(const char* rule, const char* call, const char* field, uint64_t v, uint64_t lo, uint64_t hi) {
    if (v < lo || v > hi)
        core().fail(rule, call, std::string(field) + " " + std::to_string(v) + " outside [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
}
inline double cycles_ns(double c) { return model::cycles_to_ns(c); }
}  // namespace twin::cube

namespace AscendC {
// DataCopy GM -> L1 (A1/B1) with ND -> NZ: for each of ndNum matrices (src i*srcNdMatrixStride elements, dst
// i*dstNzMatrixStride elements), row j (src j*srcDValue elements) goes to dst j*dstNzNStride 32-byte blocks, its
// 32-byte chunk c to c*dstNzC0Stride blocks further; a last partial chunk is zero-filled to 32 B. Runs on MTE2.
template <typename T> inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p) {
    const char* call = "DataCopy(GM->L1, Nd2NzParams)";
    using namespace twin::cube;
    Core& c = core();
    need_mem(call, "dst", dst, twin::M_L1);
    range("nd2nz-params", call, "ndNum", p.ndNum, 0, 4095);
    range("nd2nz-params", call, "nValue", p.nValue, 0, 16384);
    range("nd2nz-params", call, "srcDValue", p.srcDValue, 1, 65535);
    range("nd2nz-params", call, "dstNzC0Stride", p.dstNzC0Stride, 1, 16384);
    range("nd2nz-params", call, "dstNzNStride", p.dstNzNStride, 1, 16384);
    range("nd2nz-params", call, "dstNzMatrixStride", p.dstNzMatrixStride, 1, 65535);
    if (p.dValue > p.srcDValue)
        c.fail("nd2nz-params", call, "dValue " + std::to_string(p.dValue) + " > srcDValue " +
               std::to_string(p.srcDValue) + " (rows would overlap in GM)");
    const uint64_t E = sizeof(T), chunks = (uint64_t(p.dValue) * E + 31) / 32;
    uint64_t gm_hi = 0, l1_hi = 0;
    if (p.ndNum && p.nValue && p.dValue) {
        gm_hi = (uint64_t(p.ndNum - 1) * p.srcNdMatrixStride + uint64_t(p.nValue - 1) * p.srcDValue + p.dValue) * E;
        l1_hi = uint64_t(p.ndNum - 1) * p.dstNzMatrixStride * E + uint64_t(p.nValue - 1) * p.dstNzNStride * 32 +
                (chunks - 1) * p.dstNzC0Stride * 32 + 32;
    }
    src.check_bytes(call, 0, gm_hi, false);
    need_bytes(call, "dst", dst, l1_hi);
    uint64_t moved = uint64_t(p.ndNum) * p.nValue * chunks * 32;
    uint32_t id = c.issue_dma(call, twin::P_MTE2, moved);
    c.cnt.mte2_bytes += moved;
    auto* g = reinterpret_cast<const uint8_t*>(src.ptr_);
    uint8_t* l1 = reinterpret_cast<uint8_t*>(dst.data());
    for (uint64_t i = 0; i < p.ndNum; ++i)
        for (uint64_t j = 0; j < p.nValue; ++j) {
            const uint8_t* row = g + (i * p.srcNdMatrixStride + j * p.srcDValue) * E;
            c.gm_read(id, row, p.dValue * E);
            for (uint64_t k = 0; k < chunks; ++k) {
                uint64_t off = i * p.dstNzMatrixStride * E + j * p.dstNzNStride * 32 + k * p.dstNzC0Stride * 32;
                uint64_t n = std::min<uint64_t>(32, p.dValue * E - k * 32);
                c.on_write(id, dst.mem_, dst.addr_ + uint32_t(off), 32);
                c.mark_write(id, dst.mem_, dst.addr_ + uint32_t(off), 32);
                std::memset(l1 + off, 0, 32);
                std::memcpy(l1 + off, row + k * 32, n);
            }
        }
}

// LoadData (Load2D) L1 (A1/B1) -> L0A (A2) / L0B (B2): repeat r moves the 512-byte fractal at
// (startIndex + r*srcStride) fractals into dst fractal r*(1 + dstGap); with ifTranspose each 16x16 fractal of a
// 2-byte type is transposed. Moving less than one fractal is a hardware exception. Runs on MTE1.
template <typename T> inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LoadData2DParams& p) {
    const char* call = "LoadData(L1->L0, LoadData2DParams)";
    using namespace twin::cube;
    Core& c = core();
    need_mem(call, "src", src, twin::M_L1);
    dst.check_live(call);
    if (dst.mem_ != twin::M_L0A && dst.mem_ != twin::M_L0B)
        c.fail("cube-position", call, std::string("dst is in ") + twin::mem_name(dst.mem_) + ", the API takes L0A or L0B");
    need_mem(call, "dst", dst, dst.mem_);
    range("loaddata-params", call, "repeatTimes", p.repeatTimes, 1, 255);
    if (p.ifTranspose && sizeof(T) != 2)
        c.fail("loaddata-params", call, "ifTranspose on " + std::to_string(sizeof(T)) +
               "-byte elements (Load2D transposes 16x16 fractals of 2-byte types; use LoadDataWithTranspose)");
    const uint64_t F = FRACTAL_BYTES;
    uint64_t src_avail = uint64_t(src.size_) * sizeof(T), dst_avail = uint64_t(dst.size_) * sizeof(T);
    if (src_avail < F || dst_avail < F)
        c.fail("loaddata-fractal", call, std::string(src_avail < F ? "src" : "dst") + " holds " +
               std::to_string(src_avail < F ? src_avail : dst_avail) + " B, less than one 512-byte fractal "
               "(a hardware exception on the device)");
    uint64_t n = p.repeatTimes;
    need_bytes(call, "src", src, (p.startIndex + (n - 1) * p.srcStride) * F + F);
    need_bytes(call, "dst", dst, (n - 1) * (1 + p.dstGap) * F + F);
    uint32_t id = c.issue(call, twin::P_MTE1, cycles_ns(double(n * F) / twin::model::MTE1_BYTES_PER_CYCLE));
    const uint8_t* s = reinterpret_cast<const uint8_t*>(src.data());
    uint8_t* d = reinterpret_cast<uint8_t*>(dst.data());
    for (uint64_t r = 0; r < n; ++r) {
        uint64_t so = (p.startIndex + r * p.srcStride) * F, doff = r * (1 + p.dstGap) * F;
        c.on_read(id, src.mem_, src.addr_ + uint32_t(so), uint32_t(F));
        c.mark_read(id, src.mem_, src.addr_ + uint32_t(so), uint32_t(F));
        c.on_write(id, dst.mem_, dst.addr_ + uint32_t(doff), uint32_t(F));
        c.mark_write(id, dst.mem_, dst.addr_ + uint32_t(doff), uint32_t(F));
        if (!p.ifTranspose) { std::memcpy(d + doff, s + so, F); continue; }
        uint16_t tmp[256];
        std::memcpy(tmp, s + so, F);
        auto* o = reinterpret_cast<uint16_t*>(d + doff);
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j) o[j * 16 + i] = tmp[i * 16 + j];
    }
}

// Mmad: C[m, n] (L0C, NZ) = A[m, k] (L0A, ZZ) x B[k, n] (L0B, ZN), or += with cmatrixInitVal = false (and
// cmatrixSource = false: the initial C is L0C itself). int8 x int8 -> int32 (wrapping), half/bf16 -> float
// (each product exact in fp32, summed in k order in fp32). Fractal counts round m, n up to 16 and k up to
// 32 B / sizeof(A); the rows/columns beyond m, n in L0C are poisoned. Runs on PIPE_M.
template <typename D, typename A, typename B>
inline void Mmad(const LocalTensor<D>& dst, const LocalTensor<A>& fm, const LocalTensor<B>& filter, const MmadParams& p) {
    static_assert(std::is_same_v<A, B>, "Mmad: the twin supports A and B of one type");
    static_assert((std::is_same_v<A, int8_t> && std::is_same_v<D, int32_t>) ||
                  ((std::is_same_v<A, half> || std::is_same_v<A, bfloat16_t>) && std::is_same_v<D, float>),
                  "Mmad: Atlas A2 pairs in the twin are int8 x int8 -> int32 and half/bfloat16_t -> float");
    const char* call = "Mmad";
    using namespace twin::cube;
    Core& c = core();
    need_mem(call, "dst", dst, twin::M_L0C);
    need_mem(call, "fm", fm, twin::M_L0A);
    need_mem(call, "filter", filter, twin::M_L0B);
    range("mmad-params", call, "m", p.m, 0, 4095);
    range("mmad-params", call, "n", p.n, 0, 4095);
    range("mmad-params", call, "k", p.k, 0, 4095);
    if (p.cmatrixSource) c.fail("mmad-params", call, "cmatrixSource = true (C from the bias table) is not modeled");
    constexpr uint32_t C0 = c0<A>();
    const uint64_t M1 = (p.m + 15) / 16, N1 = (p.n + 15) / 16, K1 = (p.k + C0 - 1) / C0;
    need_bytes(call, "fm", fm, M1 * K1 * FRACTAL_BYTES);
    need_bytes(call, "filter", filter, K1 * N1 * FRACTAL_BYTES);
    need_bytes(call, "dst", dst, M1 * N1 * 256 * sizeof(D));
    constexpr double macs = std::is_same_v<A, int8_t> ? twin::model::CUBE_INT8_MACS_PER_CYCLE
                                                       : twin::model::CUBE_FP16_MACS_PER_CYCLE;
    double cyc = double(M1 * N1 * K1) * (16.0 * 16.0 * C0) / macs;
    uint32_t id = c.issue(call, twin::P_M, cycles_ns(cyc));
    c.done_t[twin::P_M] = std::max(c.done_t[twin::P_M], c.free_t[twin::P_M] + cycles_ns(twin::model::CUBE_LATENCY_CYCLES));
    uint32_t abytes = uint32_t(M1 * K1 * FRACTAL_BYTES), bbytes = uint32_t(K1 * N1 * FRACTAL_BYTES);
    uint32_t cbytes = uint32_t(M1 * N1 * 256 * sizeof(D));
    c.on_read(id, fm.mem_, fm.addr_, abytes); c.mark_read(id, fm.mem_, fm.addr_, abytes);
    c.on_read(id, filter.mem_, filter.addr_, bbytes); c.mark_read(id, filter.mem_, filter.addr_, bbytes);
    if (!p.cmatrixInitVal) c.on_read(id, dst.mem_, dst.addr_, cbytes);
    c.on_write(id, dst.mem_, dst.addr_, cbytes);
    c.mark_write(id, dst.mem_, dst.addr_, cbytes);
    const A* a = fm.data();
    const B* b = filter.data();
    D* out = dst.data();
    auto val = [](auto v) {
        if constexpr (std::is_same_v<decltype(v), int8_t>) return int32_t(v);
        else return float(v);
    };
    for (uint64_t i = 0; i < M1 * 16; ++i)
        for (uint64_t j = 0; j < N1 * 16; ++j) {
            D* cp = out + ((j / 16) * M1 + i / 16) * 256 + (i % 16) * 16 + j % 16;  // NZ: 16x16 fractals, columns of fractals
            if (i >= p.m || j >= p.n) { std::memset(cp, twin::POISON, sizeof(D)); continue; }
            D acc = p.cmatrixInitVal ? D(0) : *cp;
            for (uint64_t kk = 0; kk < p.k; ++kk) {
                auto av = val(a[((i / 16) * K1 + kk / C0) * 16 * C0 + (i % 16) * C0 + kk % C0]);   // ZZ
                auto bv = val(b[((kk / C0) * N1 + j / 16) * 16 * C0 + (j % 16) * C0 + kk % C0]);   // ZN
                if constexpr (std::is_same_v<D, int32_t>) acc = int32_t(uint32_t(acc) + uint32_t(av * bv));
                else acc = acc + av * bv;
            }
            *cp = acc;
        }
}
}  // namespace AscendC

namespace twin::cube {
// Fixpipe's element conversion (the mode is fixed by the Src/Dst pair once quant_ok passed); `scale` is the
// dequant scale (fp32 bits in the low 32 bits of the 64-bit deq word: our reading, see README).
template <typename Dst, typename Src> inline Dst fix_convert(Src v, float scale) {
    if constexpr (std::is_same_v<Src, float>) {
        if constexpr (std::is_same_v<Dst, float>) return v;
        else if constexpr (std::is_same_v<Dst, half>) return half::from_bits(f32_to_f16_rne(v));
        else return bfloat16_t::from_bits(f32_to_bf16_rne(v));
    } else {
        if constexpr (std::is_same_v<Dst, int32_t>) return v;
        else {
            float f = float(v) * scale;  // int32 -> fp32 (RNE), times the scale in fp32, then RNE to the target
            if constexpr (std::is_same_v<Dst, half>) return half::from_bits(f32_to_f16_rne(f));
            else return bfloat16_t::from_bits(f32_to_bf16_rne(f));
        }
    }
}
template <typename Dst, typename Src> inline bool quant_ok(AscendC::QuantMode_t q, bool& per_channel) {
    using namespace AscendC;
    per_channel = q == VDEQF16 || q == VQS322BF16_PRE;
    if (std::is_same_v<Src, float>)
        return (q == NoQuant && std::is_same_v<Dst, float>) || (q == F322F16 && std::is_same_v<Dst, half>) ||
               (q == F322BF16 && std::is_same_v<Dst, bfloat16_t>);
    return (q == NoQuant && std::is_same_v<Dst, int32_t>) || ((q == DEQF16 || q == VDEQF16) && std::is_same_v<Dst, half>) ||
           ((q == QS322BF16_PRE || q == VQS322BF16_PRE) && std::is_same_v<Dst, bfloat16_t>);
}
inline const char* quant_name(AscendC::QuantMode_t q) {
    static const char* n[] = {"NoQuant", "F322F16", "F322BF16", "DEQF16", "VDEQF16", "QF322B8_PRE", "VQF322B8_PRE",
                              "REQ8", "VREQ8", "QS322BF16_PRE", "VQS322BF16_PRE"};
    return q <= AscendC::VQS322BF16_PRE ? n[q] : "?";
}
template <typename T> const char* type_name() {
    if (std::is_same_v<T, float>) return "float";
    if (std::is_same_v<T, half>) return "half";
    if (std::is_same_v<T, bfloat16_t>) return "bfloat16_t";
    if (std::is_same_v<T, int32_t>) return "int32_t";
    return "?";
}
// Fixpipe L0C (NZ) -> GM (ND, CFG_ROW_MAJOR): element (r, c) of the mSize x nSize result is read at
// (c/16)*srcStride*16 + r*16 + c%16 elements of src and written at r*dstStride + c of dst. `scales` (per-channel
// modes) is the cbufWorkspace in L1: one uint64 per output column. Runs on PIPE_FIX.
template <typename Dst, typename Src>
inline void fixpipe(const AscendC::GlobalTensor<Dst>& dst, const LocalTensor<Src>& src,
                    const LocalTensor<uint64_t>* scales, const AscendC::FixpipeParamsV220& p) {
    static_assert(std::is_same_v<Src, float> || std::is_same_v<Src, int32_t>, "Fixpipe: src (L0C) is float or int32_t");
    const char* call = scales ? "Fixpipe(L0C->GM, cbufWorkspace)" : "Fixpipe(L0C->GM)";
    Core& c = core();
    need_mem(call, "src", src, M_L0C);
    range("fixpipe-params", call, "nSize", p.nSize, 1, 4095);
    range("fixpipe-params", call, "mSize", p.mSize, 1, 65535);
    range("fixpipe-params", call, "ndNum", p.ndNum, 1, 1);
    if (p.srcStride < p.mSize)
        c.fail("fixpipe-params", call, "srcStride " + std::to_string(p.srcStride) + " < mSize " +
               std::to_string(p.mSize) + " (the 16-column blocks of the NZ source would overlap)");
    if (p.dstStride < p.nSize)
        c.fail("fixpipe-params", call, "dstStride " + std::to_string(p.dstStride) + " < nSize " + std::to_string(p.nSize));
    if (p.reluEn) c.fail("fixpipe-params", call, "reluEn = true is not modeled by the twin");
    bool per_channel = false;
    if (!quant_ok<Dst, Src>(p.quantPre, per_channel))
        c.fail("fixpipe-quant", call, std::string("quantPre ") + quant_name(p.quantPre) + " does not convert " +
               type_name<Src>() + " to " + type_name<Dst>() + " (the twin models NoQuant, F322F16, F322BF16, DEQF16, "
               "VDEQF16, QS322BF16_PRE, VQS322BF16_PRE)");
    if (per_channel != (scales != nullptr))
        c.fail("fixpipe-quant", call, std::string("quantPre ") + quant_name(p.quantPre) +
               (per_channel ? " needs the cbufWorkspace scale tensor (one uint64 per channel, in L1)"
                            : " takes no cbufWorkspace (per-tensor or no scale)"));
    const uint64_t N1 = (p.nSize + 15) / 16;
    need_bytes(call, "src", src, ((N1 - 1) * p.srcStride * 16 + uint64_t(p.mSize) * 16) * sizeof(Src));
    if (scales) {
        need_mem(call, "cbufWorkspace", *scales, M_L1);
        need_bytes(call, "cbufWorkspace", *scales, uint64_t(p.nSize) * 8);
    }
    dst.check(call, 0, uint64_t(p.mSize - 1) * p.dstStride + p.nSize, true);
    uint64_t bytes = uint64_t(p.mSize) * p.nSize * sizeof(Dst);
    uint32_t id = c.issue_dma(call, P_FIX, bytes);
    for (uint64_t b = 0; b < N1; ++b) {
        uint32_t off = uint32_t(b * p.srcStride * 16 * sizeof(Src));
        c.on_read(id, src.mem_, src.addr_ + off, uint32_t(p.mSize) * 16 * sizeof(Src));
        c.mark_read(id, src.mem_, src.addr_ + off, uint32_t(p.mSize) * 16 * sizeof(Src));
    }
    if (scales) {
        c.on_read(id, scales->mem_, scales->addr_, p.nSize * 8u);
        c.mark_read(id, scales->mem_, scales->addr_, p.nSize * 8u);
    }
    float tensor_scale = bits_f32(uint32_t(p.deqScalar));
    const Src* s = src.data();
    std::vector<Dst> row(p.nSize);
    for (uint64_t r = 0; r < p.mSize; ++r) {
        for (uint64_t col = 0; col < p.nSize; ++col) {
            float sc = scales ? bits_f32(uint32_t(scales->data()[col])) : tensor_scale;
            row[col] = fix_convert<Dst, Src>(s[(col / 16) * p.srcStride * 16 + r * 16 + col % 16], sc);
        }
        Dst* g = dst.ptr_ + r * p.dstStride;
        std::memcpy(g, row.data(), p.nSize * sizeof(Dst));
        c.gm_wrote(id, g, p.nSize * sizeof(Dst));
    }
}
}  // namespace twin::cube

namespace AscendC {
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const FixpipeParamsV220& p) {
    static_assert(config.format == CO2Layout::ROW_MAJOR, "Fixpipe: the twin models CFG_ROW_MAJOR (NZ2ND) only");
    twin::cube::fixpipe<T, U>(dst, src, nullptr, p);
}
template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src, const LocalTensor<uint64_t>& cbufWorkspace,
                    const FixpipeParamsV220& p) {
    static_assert(config.format == CO2Layout::ROW_MAJOR, "Fixpipe: the twin models CFG_ROW_MAJOR (NZ2ND) only");
    twin::cube::fixpipe<T, U>(dst, src, &cbufWorkspace, p);
}
}  // namespace AscendC
