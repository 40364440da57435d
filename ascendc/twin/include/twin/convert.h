// Bit-exact number conversions for Cast, per RoundMode ("Cast" page of the AscendC API reference,
// atlasascendc_api_07_0073: the RoundMode meanings and the Atlas A2 table of allowed src/dst pairs).
// Method: the source value is exact in double; it is scaled by the target's quantum at its binade (a power of
// two, exact), rounded to an integer by the mode, and scaled back (exact). Overflow follows IEEE 754 for each
// rounding direction; integer targets saturate and NaN converts to 0 (the twin's stated choice, see README).
#pragma once
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include "types.h"

namespace twin {
using AscendC::RoundMode;

inline double round_int(double t, RoundMode m) {
    switch (m) {
        case RoundMode::CAST_NONE:
        case RoundMode::CAST_RINT: return std::nearbyint(t);  // ties to even (default FE_TONEAREST)
        case RoundMode::CAST_ROUND: return std::round(t);     // ties away from zero
        case RoundMode::CAST_FLOOR: return std::floor(t);
        case RoundMode::CAST_CEIL: return std::ceil(t);
        case RoundMode::CAST_TRUNC: return std::trunc(t);
        case RoundMode::CAST_ODD: {                           // von Neumann: inexact -> the odd neighbour
            double f = std::floor(t);
            if (f == t) return t;
            return std::fmod(f, 2.0) != 0.0 ? f : f + 1.0;
        }
    }
    return t;
}

struct Fmt { int mant; int emin; double maxfin; };
constexpr Fmt F16{10, -14, 65504.0};
constexpr Fmt BF16{7, -126, 3.3895313892515355e38};   // (2 - 2^-7) * 2^127
constexpr Fmt F32{23, -126, 3.4028234663852886e38};

// x rounded to format f by mode m (result exactly representable in f, or +-inf).
inline double round_to(double x, const Fmt& f, RoundMode m) {
    if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
    int e; std::frexp(std::fabs(x), &e);
    int E = std::max(e - 1, f.emin);
    double q = std::ldexp(1.0, E - f.mant);
    double r = round_int(x / q, m) * q;
    if (r == 0.0) r = std::copysign(0.0, x);
    if (std::fabs(r) > f.maxfin) {
        bool neg = x < 0;
        switch (m) {
            case RoundMode::CAST_TRUNC: case RoundMode::CAST_ODD: return neg ? -f.maxfin : f.maxfin;
            case RoundMode::CAST_FLOOR: return neg ? -INFINITY : f.maxfin;
            case RoundMode::CAST_CEIL: return neg ? -f.maxfin : INFINITY;
            default: return neg ? -INFINITY : INFINITY;
        }
    }
    return r;
}

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// exact double (representable in fp16) -> fp16 bits
inline uint16_t enc_f16(double v, uint32_t nan_src_bits) {
    uint16_t sign = std::signbit(v) ? 0x8000 : 0;
    if (std::isnan(v)) return uint16_t((nan_src_bits >> 16 & 0x8000) | 0x7E00 | (nan_src_bits >> 13 & 0x3FF));
    double a = std::fabs(v);
    if (a == 0) return sign;
    if (std::isinf(a)) return sign | 0x7C00;
    int e; std::frexp(a, &e);
    int E = e - 1;
    if (E < -14) return uint16_t(sign | uint16_t(a / std::ldexp(1.0, -24)));
    return uint16_t(sign | uint16_t((E + 15) << 10) | uint16_t((a / std::ldexp(1.0, E) - 1.0) * 1024.0));
}
inline uint16_t enc_bf16(double v, uint32_t nan_src_bits) {
    if (std::isnan(v)) return uint16_t((nan_src_bits >> 16) | 0x0040);
    return uint16_t(f32_bits(float(v)) >> 16);   // v exact in bf16, hence in float
}
inline double dec_f16(uint16_t h) {
    int s = h >> 15, e = h >> 10 & 0x1F, m = h & 0x3FF;
    double v;
    if (e == 0) v = std::ldexp(double(m), -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

inline uint16_t f32_to_f16(float f, RoundMode m) { return enc_f16(round_to(f, F16, m), f32_bits(f)); }
inline uint16_t f32_to_bf16(float f, RoundMode m) { return enc_bf16(round_to(f, BF16, m), f32_bits(f)); }
inline uint16_t f32_to_f16_rne(float f) { return f32_to_f16(f, RoundMode::CAST_RINT); }
inline uint16_t f32_to_bf16_rne(float f) { return f32_to_bf16(f, RoundMode::CAST_RINT); }
inline float f16_to_f32(uint16_t h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF))  // NaN: keep sign and payload
        return bits_f32(uint32_t(h & 0x8000) << 16 | 0x7FC00000u | uint32_t(h & 0x3FF) << 13);
    return float(dec_f16(h));
}

template <typename I> inline I sat_int(double x, RoundMode m) {
    if (std::isnan(x)) return I(0);
    double r = round_int(x, m);
    if (r >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
    if (r <= double(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
    return I(r);
}

// Element kinds for the Cast table.
enum Kind : uint8_t { K_F32, K_F16, K_BF16, K_S32, K_S16, K_S8, K_U8, K_OTHER };
template <typename T> constexpr Kind kind_of() {
    if constexpr (std::is_same_v<T, float>) return K_F32;
    else if constexpr (std::is_same_v<T, half>) return K_F16;
    else if constexpr (std::is_same_v<T, bfloat16_t>) return K_BF16;
    else if constexpr (std::is_same_v<T, int32_t>) return K_S32;
    else if constexpr (std::is_same_v<T, int16_t>) return K_S16;
    else if constexpr (std::is_same_v<T, int8_t>) return K_S8;
    else if constexpr (std::is_same_v<T, uint8_t>) return K_U8;
    else return K_OTHER;
}
inline const char* kind_name(Kind k) {
    static const char* n[] = {"float", "half", "bfloat16_t", "int32_t", "int16_t", "int8_t", "uint8_t", "?"};
    return n[k];
}
inline const char* mode_name(RoundMode m) {
    static const char* n[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return n[int(m)];
}

// The Atlas A2 src->dst pairs and round modes the twin accepts (README "Cast" table). Bit i = RoundMode i.
constexpr uint8_t NONE_ = 1 << 0, INTS_ = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5), ODD_ = 1 << 6;
inline uint8_t cast_modes(Kind s, Kind d) {
    switch (s) {
        case K_F32:
            if (d == K_F16) return NONE_ | INTS_ | ODD_;
            if (d == K_F32 || d == K_BF16 || d == K_S32 || d == K_S16) return INTS_;
            return 0;
        case K_F16:
            if (d == K_F32) return NONE_;
            if (d == K_S32 || d == K_S16) return INTS_;
            if (d == K_S8 || d == K_U8) return NONE_ | INTS_;
            return 0;
        case K_BF16:
            if (d == K_F32) return NONE_;
            if (d == K_S32) return INTS_;
            return 0;
        case K_S32:
            if (d == K_F32 || d == K_F16) return NONE_ | INTS_;
            if (d == K_S16) return NONE_;
            return 0;
        case K_S16:
            if (d == K_F16) return NONE_ | INTS_;
            if (d == K_F32) return NONE_;
            return 0;
        case K_S8: case K_U8:
            return d == K_F16 ? NONE_ : 0;
        default: return 0;
    }
}

template <typename T> inline double to_double(const T& v) {
    if constexpr (std::is_same_v<T, half>) return dec_f16(v.bits);
    else if constexpr (std::is_same_v<T, bfloat16_t>) return double(bf16_to_f32(v.bits));
    else return double(v);
}
template <typename T> inline uint32_t nan_bits(const T& v) {
    if constexpr (std::is_same_v<T, float>) return f32_bits(v);
    else if constexpr (std::is_same_v<T, half>) return f32_bits(f16_to_f32(v.bits));
    else if constexpr (std::is_same_v<T, bfloat16_t>) return uint32_t(v.bits) << 16;
    else return 0x7FC00000u;
}

// One element of Cast<D, S>(mode): the exact value, rounded by the mode (CAST_NONE = RINT when inexact).
template <typename D, typename S> inline D convert(const S& s, RoundMode m) {
    double x = to_double(s);
    if constexpr (std::is_same_v<D, float>) {
        if constexpr (std::is_same_v<S, float>) return float(std::isnan(x) || std::isinf(x) || std::fabs(x) >= 8388608.0 ? x : round_int(x, m));
        else if constexpr (std::is_same_v<S, half> || std::is_same_v<S, bfloat16_t>) { if (std::isnan(x)) return bits_f32(nan_bits(s)); return float(x); }
        else return float(round_to(x, F32, m));
    } else if constexpr (std::is_same_v<D, half>) {
        return half::from_bits(enc_f16(round_to(x, F16, m), nan_bits(s)));
    } else if constexpr (std::is_same_v<D, bfloat16_t>) {
        return bfloat16_t::from_bits(enc_bf16(round_to(x, BF16, m), nan_bits(s)));
    } else {
        return sat_int<D>(x, m);
    }
}
}  // namespace twin
