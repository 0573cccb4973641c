// When a host kernel opens an OpenMP parallel region.  Every `#pragma omp parallel` of the
// host kernels carries `if (hal::use_parallel(work))`, with `work` the elements the call
// touches (rows * cols for a row kernel).  Below the grain the kernel runs on the caller's
// thread and wakes no other: a decode-sized call (1, 64) costs a microsecond, not the
// hundreds a team start-up can take on a busy machine.  The grain is that of ATen's
// at::parallel_for (at::internal::GRAIN_SIZE, 32768 elements).
//
// No pybind11 here: the per-ISA kernel bodies (isa/kernels.h) include this file too.  The
// functions are defined once, in parallel.cpp (compiled with the baseline flags), so no
// AVX-512 copy of them can be the one the linker keeps.
#pragma once

#include <cstdint>

namespace hal {

constexpr int64_t kDefaultGrain = 32768;  // at::internal::GRAIN_SIZE

// True when `work` elements are worth a parallel region: work > grain_size(), more than one
// OpenMP thread available and not already inside a parallel region.  A true answer counts one
// region in parallel_regions(), so call it only as the region's if() clause.
bool use_parallel(int64_t work);

int64_t grain_size();
// Sets the grain (>= 0) and returns the previous one; for tests and benchmarks.
int64_t set_grain_size(int64_t grain);
// Parallel regions the host kernels have opened in this process.
int64_t parallel_regions();

}  // namespace hal
