// Shared helpers of the hal host kernels: dtype tags, per-element float conversion,
// argument checks that raise Python errors, and the dtype dispatch.
//
// Buffers cross from Python as numpy arrays (torch tensors through .numpy()): float32,
// float16, and bfloat16 viewed as int16/uint16 (numpy has no bfloat16).  Kernels compute
// in float (accumulate in double where rows are reduced) and convert per element in the
// inner loop, so a bf16/fp16 buffer is read once and never widened into a temporary.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace hal {

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };

enum class DType { F32, F16, BF16 };

inline const char* dtype_name(DType d) {
    switch (d) {
        case DType::F32: return "float32";
        case DType::F16: return "float16";
        default: return "bfloat16";
    }
}

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

#if defined(__FLT16_MAX__)
inline float load(const f16* p, int64_t i) {
    _Float16 h;
    std::memcpy(&h, &p[i], 2);
    return static_cast<float>(h);
}
inline void store(f16* p, int64_t i, float v) {
    _Float16 h = static_cast<_Float16>(v);
    std::memcpy(&p[i], &h, 2);
}
#else
inline float load(const f16* p, int64_t i) {  // IEEE half -> float, all cases
    const uint32_t h = p[i].bits;
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal
            float f = std::ldexp(static_cast<float>(man), -24);
            std::memcpy(&u, &f, 4);
            u |= sign;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void store(f16* p, int64_t i, float v) {  // float -> IEEE half, round to nearest even
    uint32_t u;
    std::memcpy(&u, &v, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7fffffffu;
    uint16_t out;
    if (a > 0x7f800000u) {
        out = static_cast<uint16_t>(sign | 0x7e00u);
    } else if (a >= 0x477ff000u) {  // overflows to inf
        out = static_cast<uint16_t>(sign | 0x7c00u);
    } else if (a < 0x38800000u) {  // subnormal or zero
        float f;
        std::memcpy(&f, &a, 4);
        out = static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(f * 16777216.0f)));
    } else {
        uint32_t r = a + 0xc8000fffu + ((a >> 13) & 1u);
        out = static_cast<uint16_t>(sign | (r >> 13));
    }
    p[i].bits = out;
}
#endif

// ---- branch-free math (libm's expf/erff/tanhf are scalar calls that stop vectorisation)
// exp: Cephes' polynomial on x - n*ln2, scaled by 2^n built in the exponent bits;
// relative error < 2e-7 over the float range; exactly 0 below -87.3 (so exp(-inf) = 0).
inline float exp_f(float x) {
    const float xc = std::min(std::max(x, -87.3365f), 88.7228f);
    const float t = xc * 1.44269504088896341f;
    const int32_t n = static_cast<int32_t>(t + (t >= 0.0f ? 0.5f : -0.5f));  // round half away
    const float nf = static_cast<float>(n);
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
    const float out = x > 88.7228f ? std::numeric_limits<float>::infinity() : e * scale;
    return x < -87.3365f ? 0.0f : (x != x ? x : out);
}

inline float sigmoid_f(float v) { return 1.0f / (1.0f + exp_f(-v)); }

// 1 + erf(z), from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): erfc(|z|) = poly(t) exp(-z^2)
// is computed directly for z < 0, so the left tail never cancels to 0 as 1 + erf(z) would.
inline float one_plus_erf(float z) {
    const float a = std::fabs(z);
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                        0.254829592f) * t;
    const float q = poly * exp_f(-a * a);  // erfc(|z|)
    return z < 0.0f ? q : 2.0f - q;
}

// ---- argument checks (std::invalid_argument -> ValueError, py::type_error -> TypeError)
inline DType dtype_of(const py::array& a, const char* op, const char* name) {
    const auto dt = a.dtype();
    const char kind = dt.kind();
    const auto size = dt.itemsize();
    if (kind == 'f' && size == 4) return DType::F32;
    if (kind == 'f' && size == 2) return DType::F16;
    if ((kind == 'i' || kind == 'u') && size == 2) return DType::BF16;
    throw py::type_error(std::string(op) + ": " + name + " has dtype " +
                         py::str(py::object(dt)).cast<std::string>() +
                         "; host kernels take float32, float16 or bfloat16 (as a 16-bit integer view); "
                         "cast the tensor first");
}

inline void check_contiguous(const py::array& a, const char* op, const char* name) {
    if (!(a.flags() & py::array::c_style))
        throw std::invalid_argument(std::string(op) + ": " + name +
                                    " is not C-contiguous; call .contiguous() first");
}

inline void check_writable(const py::array& a, const char* op, const char* name) {
    if (!a.writeable())
        throw std::invalid_argument(std::string(op) + ": output " + name + " is read-only");
}

inline void check_ndim(const py::array& a, py::ssize_t nd, const char* op, const char* name) {
    if (a.ndim() != nd)
        throw std::invalid_argument(std::string(op) + ": " + name + " must be " + std::to_string(nd) +
                                    "-D here, got " + std::to_string(a.ndim()) + "-D");
}

inline std::string shape_str(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

inline void check_shape(const py::array& a, std::vector<int64_t> want, const char* op, const char* name) {
    bool ok = a.ndim() == static_cast<py::ssize_t>(want.size());
    for (size_t i = 0; ok && i < want.size(); ++i) ok = a.shape(i) == want[i];
    if (!ok) {
        std::string w = "(";
        for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
        w += want.size() == 1 ? ",)" : ")";
        throw std::invalid_argument(std::string(op) + ": " + name + " has shape " + shape_str(a) +
                                    ", expected " + w);
    }
}

// An input buffer: contiguous, of one of the kernel dtypes, same dtype as the reference.
inline void check_input(const py::array& a, DType want, const char* op, const char* name) {
    check_contiguous(a, op, name);
    const DType got = dtype_of(a, op, name);
    if (got != want)
        throw py::type_error(std::string(op) + ": " + name + " is " + dtype_name(got) + " but x is " +
                             dtype_name(want) + "; cast it to the same dtype");
}

inline void check_output(const py::array& a, DType want, const char* op, const char* name) {
    check_input(a, want, op, name);
    check_writable(a, op, name);
}

// A float32 buffer (statistics, weight gradients, angle tables).
inline void check_f32(const py::array& a, const char* op, const char* name, bool writable) {
    check_contiguous(a, op, name);
    if (dtype_of(a, op, name) != DType::F32)
        throw py::type_error(std::string(op) + ": " + name + " must be float32");
    if (writable) check_writable(a, op, name);
}

template <class T>
inline const T* cptr(const py::array& a) { return static_cast<const T*>(a.data()); }
template <class T>
inline T* mptr(py::array& a) { return static_cast<T*>(a.mutable_data()); }

// Call fn(T{}) with T the element type of dtype d.
template <class Fn>
inline void dispatch(DType d, Fn&& fn) {
    switch (d) {
        case DType::F32: fn(float{}); break;
        case DType::F16: fn(f16{}); break;
        case DType::BF16: fn(bf16{}); break;
    }
}

inline int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

inline int thread_id() {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// Topic registration, one per source file.
void register_norms(py::module_& m);
void register_rotary(py::module_& m);
void register_activations(py::module_& m);
void register_softmax(py::module_& m);
void register_adamw(py::module_& m);
void register_vision(py::module_& m);

}  // namespace hal
