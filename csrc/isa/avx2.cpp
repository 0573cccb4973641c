// The exp-bound host kernels for AVX2 + FMA + F16C (Haswell / Zen and later); setup.py
// compiles this file with -mavx2 -mfma -mf16c, and isa.cpp calls it only on such a CPU.
#if !defined(__AVX2__) || !defined(__FMA__)
#error "csrc/isa/avx2.cpp needs -mavx2 -mfma -mf16c (setup.py passes them)"
#endif
#define HAL_ISA_NS isa_avx2
#define HAL_ISA_NAME avx2
#include "isa/kernels.h"
