// The grain decision of the host kernels (parallel.h) and its Python face: _C.grain_size(),
// _C.set_grain_size() and _C.parallel_regions().
#include "common.h"

#include <atomic>

namespace hal {
namespace {

std::atomic<int64_t> grain{kDefaultGrain};
std::atomic<int64_t> regions{0};

}  // namespace

bool use_parallel(int64_t work) {
#ifdef _OPENMP
    if (work <= grain.load(std::memory_order_relaxed) || omp_in_parallel() || omp_get_max_threads() < 2)
        return false;
    regions.fetch_add(1, std::memory_order_relaxed);
    return true;
#else
    (void)work;
    return false;
#endif
}

int64_t grain_size() { return grain.load(std::memory_order_relaxed); }

int64_t set_grain_size(int64_t g) {
    if (g < 0) throw std::invalid_argument("set_grain_size: the grain is a number of elements, >= 0; got " +
                                           std::to_string(g));
    return grain.exchange(g, std::memory_order_relaxed);
}

int64_t parallel_regions() { return regions.load(std::memory_order_relaxed); }

void register_parallel(py::module_& m) {
    m.def("grain_size", &grain_size,
          "elements below which (<=) a host kernel runs on the caller's thread without a parallel region");
    m.def("set_grain_size", &set_grain_size, py::arg("grain"),
          "set the grain (elements, >= 0) and return the previous one; for tests and benchmarks "
          "(0 or 1: parallel whenever two threads are available; a huge value: always serial)");
    m.def("parallel_regions", &parallel_regions, "OpenMP parallel regions the host kernels have opened so far");
}

}  // namespace hal
