// Element types and the per-element math of the host kernels: dtype tags, float
// conversion, and branch-free exp/sigmoid/erfc.  No pybind11 here: the per-ISA kernel
// bodies (csrc/isa/) include this file and nothing heavier.
//
// The functions live in an anonymous namespace on purpose.  The same source is compiled
// once per instruction set (baseline, AVX2, AVX-512); with ordinary `inline` linkage the
// linker would keep one copy of each function for the whole module, possibly the AVX-512
// one, and the baseline path would then crash on an older CPU.  Internal linkage gives
// every translation unit its own copy.  For the same reason nothing here calls a standard
// library template (std::min, std::fabs, numeric_limits): those have external linkage.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hal {

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };

enum class DType { F32, F16, BF16 };

namespace {

// ---- per-element conversion --------------------------------------------------------
inline float load(const float* p, int64_t i) { return p[i]; }
inline void store(float* p, int64_t i, float v) { p[i] = v; }

inline float load(const bf16* p, int64_t i) {
    uint32_t u = static_cast<uint32_t>(p[i].bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void store(bf16* p, int64_t i, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even, as torch does
    const uint32_t quiet_nan = (u >> 16) | 0x40u;                      // NaN stays a quiet NaN
    p[i].bits = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// float16: GCC compiles a _Float16 cast to a libgcc call per element, even with F16C (no
// vectors: 5-20x slower than bfloat16).  These are branch-free bit conversions with float
// arithmetic, which the compiler vectorises at every ISA level; both are exact (IEEE half,
// round to nearest even, subnormals, inf and NaN), as torch's c10::Half conversions are
// (checked against the hardware's conversion on all 65536 halves and 165M floats).
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float load(const f16* p, int64_t i) {
    const uint32_t h = p[i].bits;
    // exponent and mantissa moved into a float's places, then scaled by 2^112 (the exponent
    // bias difference): normals and subnormals come out exact from the one multiply
    const float scaled = bits_float((h & 0x7fffu) << 13) * bits_float((254u - 15u) << 23);
    uint32_t u = float_bits(scaled);
    u |= scaled >= 65536.0f ? (255u << 23) : 0u;  // exponent 31 was inf/NaN: all ones again
    return bits_float(u | ((h & 0x8000u) << 16));
}
inline void store(f16* p, int64_t i, float v) {
    const uint32_t u = float_bits(v);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    // normal halves: rebias the exponent and round the 13 dropped bits to nearest even
    const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    // subnormal halves and zero: adding 0.5 (2^-1) puts the half's 10 mantissa bits at the
    // bottom of the float's and the float addition rounds them to nearest even
    const float magic = bits_float(((127u - 15u) + (23u - 10u) + 1u) << 23);
    const uint32_t sub = float_bits(bits_float(a) + magic) - float_bits(magic);
    uint32_t out = a < 0x38800000u ? sub : normal;
    out = a >= 0x477ff000u ? 0x7c00u : out;  // overflows to inf
    out = a > 0x7f800000u ? 0x7e00u : out;   // NaN stays a (quiet) NaN
    p[i].bits = static_cast<uint16_t>(sign | out);
}

// ---- branch-free math (libm's expf/erff/tanhf are scalar calls that stop vectorisation)
// exp: Cephes' polynomial on x - n*ln2, scaled by 2^n built in the exponent bits;
// relative error < 2e-7 over the float range; exactly 0 below -87.3 (so exp(-inf) = 0).
// The clamps are written as std::max(x, lo) / std::min(x, hi) would be: NaN passes through.
inline float exp_f(float x) {
    const float xl = x < -87.3365f ? -87.3365f : x;
    const float xc = 88.7228f < xl ? 88.7228f : xl;
    // n = t rounded to nearest (ties to even) by adding 1.5 * 2^23: the integer lands in the
    // low mantissa bits.  Branch-free on purpose: the "t + (t >= 0 ? 0.5 : -0.5)" this
    // replaced becomes roundf() under SSE4.1/AVX, which GCC leaves as branches (no vectors).
    const float t = xc * 1.44269504088896341f;
    const float k = t + 12582912.0f;
    int32_t kbits;
    std::memcpy(&kbits, &k, 4);
    const int32_t n = kbits - 0x4B400000;
    const float nf = k - 12582912.0f;
    const float r = (xc - nf * 0.693359375f) + nf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    const int32_t bits = (n + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    const float out = x > 88.7228f ? HUGE_VALF : e * scale;
    return x < -87.3365f ? 0.0f : (x != x ? x : out);
}

inline float sigmoid_f(float v) { return 1.0f / (1.0f + exp_f(-v)); }

// 1 + erf(z), from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): erfc(|z|) = poly(t) exp(-z^2)
// is computed directly for z < 0, so the left tail never cancels to 0 as 1 + erf(z) would.
inline float one_plus_erf(float z) {
    uint32_t u;
    std::memcpy(&u, &z, 4);
    u &= 0x7fffffffu;
    float a;  // |z|
    std::memcpy(&a, &u, 4);
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                        0.254829592f) * t;
    const float q = poly * exp_f(-a * a);  // erfc(|z|)
    return z < 0.0f ? q : 2.0f - q;
}

}  // namespace
}  // namespace hal
