// The exp-bound host kernels (swiglu, gelu, softmax) as a table of plain functions, one
// table per instruction set.  csrc/isa/kernels.h holds their bodies; it is compiled once
// with the baseline flags and, on x86-64, again with AVX2 and with AVX-512 (setup.py adds
// those objects when the compiler takes the flags).  isa.cpp picks one table at run time
// from what the CPU supports, so one binary runs on any x86-64 CPU.
//
// The pybind11 wrappers (activations.cpp, softmax.cpp) check arguments and release the GIL;
// the table functions only loop.  Pointers are untyped: the DType says what they hold.
#pragma once

#include <cstdint>

#include "fmath.h"
#include "parallel.h"

namespace hal {

struct HostKernels {
    const char* isa;
    void (*swiglu_fwd)(DType dt, const void* x, void* y, int64_t rows, int64_t n);
    void (*swiglu_bwd)(DType dt, const void* grad, const void* x, void* grad_x, int64_t rows, int64_t n);
    void (*gelu_fwd)(DType dt, const void* x, void* y, int64_t n, bool tanh_approx);
    void (*gelu_bwd)(DType dt, const void* grad, const void* x, void* grad_x, int64_t n, bool tanh_approx);
    // scratch: max_threads() * cols floats; mask_bool / mask_add: null or (mask_rows, cols)
    void (*softmax_fwd)(DType dt, const void* x, const uint8_t* mask_bool, const float* mask_add, int64_t mask_rows,
                        void* y, int64_t rows, int64_t cols, float scale, bool causal, int64_t q_len, float* scratch);
    void (*softmax_bwd)(DType dt, const void* grad, const void* y, void* grad_x, int64_t rows, int64_t cols,
                        float scale);
};

// The table in use: chosen on first use from HAL_HOST_ISA or the CPU; throws
// std::runtime_error naming the fix when HAL_HOST_ISA asks for something unusable here.
const HostKernels& host_kernels();

namespace isa_baseline { extern const HostKernels kernels; }
#ifdef HAL_HAVE_AVX2
namespace isa_avx2 { extern const HostKernels kernels; }
#endif
#ifdef HAL_HAVE_AVX512
namespace isa_avx512 { extern const HostKernels kernels; }
#endif

}  // namespace hal
