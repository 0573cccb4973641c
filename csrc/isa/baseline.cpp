// The exp-bound host kernels for the compiler's default instruction set (SSE2 on
// x86-64): the path every CPU can run, and the only one off x86.
#define HAL_ISA_NS isa_baseline
#define HAL_ISA_NAME baseline
#include "isa/kernels.h"
