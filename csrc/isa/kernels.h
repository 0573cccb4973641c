// Bodies of the exp-bound host kernels, compiled once per instruction set: the including
// file defines HAL_ISA_NS (isa_baseline, isa_avx2, isa_avx512) and the build gives it the
// matching -m flags.  No include guard: each translation unit includes this once.
//
// Everything is in HAL_ISA_NS or an anonymous namespace, and nothing here instantiates a
// standard-library template (no std::vector, std::min ...): any function with external,
// mergeable linkage would let the linker keep the AVX-512 copy for every caller.  The
// softmax scratch rows therefore come from the caller.  Every parallel region opens only when
// hal::use_parallel (parallel.h, defined once in a baseline object) says the call is big enough.
#ifndef HAL_ISA_NS
#error "define HAL_ISA_NS before including isa/kernels.h"
#endif

#include "kernel_table.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define HAL_STR2(x) #x
#define HAL_STR(x) HAL_STR2(x)

namespace hal {
namespace HAL_ISA_NS {
namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kSqrt2_Pi = 0.79788456080286535588f;   // sqrt(2/pi)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2*pi)
constexpr float kGeluC = 0.044715f;

// Call fn(T{}) with T the element type of dtype d.
template <class Fn>
inline void by_dtype(DType d, Fn&& fn) {
    switch (d) {
        case DType::F32: fn(float{}); break;
        case DType::F16: fn(f16{}); break;
        case DType::BF16: fn(bf16{}); break;
    }
}

void swiglu_fwd(DType dt, const void* x, void* y, int64_t rows, int64_t n) {
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        T* yp = static_cast<T*>(y);
        parallel_for(rows, rows * 2 * n, [&](int64_t r) {
            const T* a = xp + r * 2 * n;
            const T* b = a + n;
            T* yr = yp + r * n;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
                const float av = load(a, i);
                store(yr, i, av * sigmoid_f(av) * load(b, i));
            }
        });
    });
}

void swiglu_bwd(DType dt, const void* grad, const void* x, void* grad_x, int64_t rows, int64_t n) {
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        const T* gp = static_cast<const T*>(grad);
        T* dxp = static_cast<T*>(grad_x);
        parallel_for(rows, rows * 2 * n, [&](int64_t r) {
            const T* a = xp + r * 2 * n;
            const T* b = a + n;
            const T* g = gp + r * n;
            T* da = dxp + r * 2 * n;
            T* db = da + n;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
                const float av = load(a, i), bv = load(b, i), gv = load(g, i);
                const float s = sigmoid_f(av);
                store(da, i, gv * bv * s * (1.0f + av * (1.0f - s)));
                store(db, i, gv * av * s);
            }
        });
    });
}

// Element-wise loops run over fixed blocks of kElemBlock elements, whatever the team: which
// elements a vector body or a scalar tail computes then depends on n alone, so the results are
// bitwise the same serial or parallel and for any thread count (vector and scalar code may
// round differently).  body(i0, i1) loops over [i0, i1) with `omp simd`.
constexpr int64_t kElemBlock = 4096;

template <class Body>
inline void by_blocks(int64_t n, Body&& body) {
    const int64_t blocks = (n + kElemBlock - 1) / kElemBlock;
    parallel_for(blocks, n, [&](int64_t b) { body(b * kElemBlock, b + 1 == blocks ? n : (b + 1) * kElemBlock); });
}

void gelu_fwd(DType dt, const void* x, void* y, int64_t n, bool tanh_approx) {
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        T* yp = static_cast<T*>(y);
        if (tanh_approx) {
            by_blocks(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
                for (int64_t i = i0; i < i1; ++i) {
                    const float v = load(xp, i);
                    store(yp, i, v * sigmoid_f(2.0f * kSqrt2_Pi * (v + kGeluC * v * v * v)));  // 0.5v(1+tanh u) = v*sigmoid(2u)
                }
            });
        } else {
            by_blocks(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
                for (int64_t i = i0; i < i1; ++i) {
                    const float v = load(xp, i);
                    store(yp, i, 0.5f * v * one_plus_erf(v * kSqrt1_2));
                }
            });
        }
    });
}

void gelu_bwd(DType dt, const void* grad, const void* x, void* grad_x, int64_t n, bool tanh_approx) {
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        const T* gp = static_cast<const T*>(grad);
        T* dp = static_cast<T*>(grad_x);
        if (tanh_approx) {
            by_blocks(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
                for (int64_t i = i0; i < i1; ++i) {
                    const float v = load(xp, i);
                    // with s = sigmoid(2u): 0.5(1 + tanh u) = s and 0.5(1 - tanh^2 u) = 2s(1 - s)
                    const float s = sigmoid_f(2.0f * kSqrt2_Pi * (v + kGeluC * v * v * v));
                    const float d = s + 2.0f * v * s * (1.0f - s) * kSqrt2_Pi * (1.0f + 3.0f * kGeluC * v * v);
                    store(dp, i, load(gp, i) * d);
                }
            });
        } else {
            by_blocks(n, [&](int64_t i0, int64_t i1) {
#pragma omp simd
                for (int64_t i = i0; i < i1; ++i) {
                    const float v = load(xp, i);
                    const float d = 0.5f * one_plus_erf(v * kSqrt1_2) + v * kInvSqrt2Pi * exp_f(-0.5f * v * v);
                    store(dp, i, load(gp, i) * d);
                }
            });
        }
    });
}

// Row r uses mask row r % mask_rows; causal row r is query r % q_len and sees c <= it.
// A row with nothing left to attend to comes out all zeros, never NaN.
void softmax_fwd(DType dt, const void* x, const uint8_t* mb, const float* ma, int64_t mrows, void* y, int64_t rows,
                 int64_t cols, float sc, bool causal, int64_t q_len, float* scratch) {
    const float ninf = -HUGE_VALF;
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        T* yp = static_cast<T*>(y);
        parallel_for_scratch(rows, rows * cols, scratch, cols, [&](int64_t r, float* v) {
                const T* xr = xp + r * cols;
                T* yr = yp + r * cols;
                const int64_t mr = (r % mrows) * cols;
                // columns past the causal limit never take part: skip them, write zeros
                const int64_t limit = causal ? (cols < r % q_len + 1 ? cols : r % q_len + 1) : cols;
#pragma omp simd
                for (int64_t c = 0; c < limit; ++c) v[c] = load(xr, c) * sc;
                if (mb) {
                    for (int64_t c = 0; c < limit; ++c)
                        if (!mb[mr + c]) v[c] = ninf;
                } else if (ma) {
#pragma omp simd
                    for (int64_t c = 0; c < limit; ++c) v[c] += ma[mr + c];
                }
                float mx = ninf;
#pragma omp simd reduction(max : mx)
                for (int64_t c = 0; c < limit; ++c) mx = mx < v[c] ? v[c] : mx;
                if (mx == ninf) {  // nothing to attend to
                    for (int64_t c = 0; c < cols; ++c) store(yr, c, 0.0f);
                    return;
                }
                double sum = 0.0;
#pragma omp simd reduction(+ : sum)
                for (int64_t c = 0; c < limit; ++c) {
                    v[c] = exp_f(v[c] - mx);
                    sum += v[c];
                }
                const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
                for (int64_t c = 0; c < limit; ++c) store(yr, c, v[c] * inv);
                for (int64_t c = limit; c < cols; ++c) store(yr, c, 0.0f);
        });
    });
}

// dx = scale * y * (dy - sum(dy * y))
void softmax_bwd(DType dt, const void* grad, const void* y, void* grad_x, int64_t rows, int64_t cols, float sc) {
    by_dtype(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* gp = static_cast<const T*>(grad);
        const T* yp = static_cast<const T*>(y);
        T* dp = static_cast<T*>(grad_x);
        parallel_for(rows, rows * cols, [&](int64_t r) {
            const T* gr = gp + r * cols;
            const T* yr = yp + r * cols;
            T* dr = dp + r * cols;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int64_t c = 0; c < cols; ++c) dot += static_cast<double>(load(gr, c)) * load(yr, c);
            const float d = static_cast<float>(dot);
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(dr, c, sc * load(yr, c) * (load(gr, c) - d));
        });
    });
}

}  // namespace

extern const HostKernels kernels = {HAL_STR(HAL_ISA_NAME), swiglu_fwd, swiglu_bwd, gelu_fwd, gelu_bwd,
                                    softmax_fwd, softmax_bwd};

}  // namespace HAL_ISA_NS
}  // namespace hal
