// When a host kernel opens an OpenMP parallel region.  The host kernels' loops run through the
// helpers below (parallel_for, ...), and the few `#pragma omp parallel` left carry
// `if (hal::use_parallel(work))`, with `work` the elements the call touches (rows * cols for a
// row kernel).  Below the grain the kernel runs on the caller's thread and wakes no other: a
// decode-sized call (1, 64) costs well under a microsecond, not the hundreds a team start-up can
// take on a busy machine.  The grain is that of ATen's
// at::parallel_for (at::internal::GRAIN_SIZE, 32768 elements).
//
// No pybind11 here: the per-ISA kernel bodies (isa/kernels.h) include this file too.  The
// functions are defined once, in parallel.cpp (compiled with the baseline flags), so no
// AVX-512 copy of them can be the one the linker keeps.
#pragma once

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

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

// The loops of the host kernels.  Below the grain they are plain loops: an OpenMP region with a
// false if() clause still builds a team of one thread (~0.4 us a call with GCC's libgomp, more than
// a decode-sized kernel), and an orphaned `omp for` with a dynamic or guided schedule still takes
// a work share (0.1-0.3 us).

// body(i) for i in [0, n): `omp parallel for schedule(guided)` when use_parallel(work), else a plain
// loop on the caller's thread.
template <class Body>
inline void parallel_for(int64_t n, int64_t work, const Body& body) {
    if (use_parallel(work)) {
#pragma omp parallel for schedule(guided)
        for (int64_t i = 0; i < n; ++i) body(i);
    } else {
        for (int64_t i = 0; i < n; ++i) body(i);
    }
}

// Two loops in one region: first(i) for i in [0, n1) with schedule(dynamic, 1), then (after the
// loop's barrier) second(j) for j in [0, n2) with schedule(static); plain loops below the grain.
// The column sums of the norm backwards: per-chunk partial sums, then their totals per block.
template <class First, class Second>
inline void parallel_two_loops(int64_t work, int64_t n1, const First& first, int64_t n2, const Second& second) {
    if (use_parallel(work)) {
#pragma omp parallel
        {
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n1; ++i) first(i);
#pragma omp for schedule(static)
            for (int64_t j = 0; j < n2; ++j) second(j);
        }
    } else {
        for (int64_t i = 0; i < n1; ++i) first(i);
        for (int64_t j = 0; j < n2; ++j) second(j);
    }
}

// body(i, scratch) for i in [0, n) with schedule(guided), each thread with its own `per_thread`
// floats of `scratch` (which holds max_threads() of them); a plain loop with the first below the grain.
template <class Body>
inline void parallel_for_scratch(int64_t n, int64_t work, float* scratch, int64_t per_thread, const Body& body) {
    if (use_parallel(work)) {
#pragma omp parallel
        {
#ifdef _OPENMP
            float* mine = scratch + static_cast<int64_t>(omp_get_thread_num()) * per_thread;
#else
            float* mine = scratch;
#endif
#pragma omp for schedule(guided)
            for (int64_t i = 0; i < n; ++i) body(i, mine);
        }
    } else {
        for (int64_t i = 0; i < n; ++i) body(i, scratch);
    }
}

}  // namespace hal
