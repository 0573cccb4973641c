// The exp-bound host kernels for AVX-512 F/BW/VL with 512-bit vectors (Skylake-SP, Zen 4
// and later); setup.py compiles this file with -mavx512f -mavx512bw -mavx512vl
// -mprefer-vector-width=512, and isa.cpp calls it only on such a CPU.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "csrc/isa/avx512.cpp needs -mavx512f -mavx512bw -mavx512vl (setup.py passes them)"
#endif
#define HAL_ISA_NS isa_avx512
#define HAL_ISA_NAME avx512
#include "isa/kernels.h"
