// Run-time choice of the instruction set for the exp-bound host kernels (kernel_table.h):
// the widest one that was built and that this CPU supports, or the one HAL_HOST_ISA
// (baseline | avx2 | avx512) names.  Exposed as _C.isa(), _C.isas() and _C.set_isa().
#include "common.h"
#include "kernel_table.h"

#include <atomic>
#include <cstdlib>

namespace hal {
namespace {

struct Choice {
    const char* name;
    const HostKernels* table;
};

// Widest first.  An ISA is usable when its object was built (setup.py defines HAL_HAVE_*)
// and the CPU has every feature its flags allowed the compiler to use.
std::vector<Choice> usable() {
    std::vector<Choice> out;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
#ifdef HAL_HAVE_AVX512
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        out.push_back({"avx512", &isa_avx512::kernels});
#endif
#ifdef HAL_HAVE_AVX2
    if (avx2) out.push_back({"avx2", &isa_avx2::kernels});
#endif
    (void)avx2;
#endif
    out.push_back({"baseline", &isa_baseline::kernels});
    return out;
}

std::string names(const std::vector<Choice>& cs) {
    std::string s;
    for (const auto& c : cs) s += (s.empty() ? "" : ", ") + std::string(c.name);
    return s;
}

const HostKernels& pick(const std::string& want, const char* origin) {
    const auto cs = usable();
    if (want.empty()) return *cs.front().table;
    for (const auto& c : cs)
        if (want == c.name) return *c.table;
    const bool known = want == "baseline" || want == "avx2" || want == "avx512";
    throw std::runtime_error(std::string(origin) + " asks for host ISA '" + want + "', which " +
                             (known ? "this CPU or this build of hal._C cannot run"
                                    : "is not one of baseline, avx2, avx512") +
                             "; usable here: " + names(cs) + ". Fix: choose one of those, or unset it.");
}

std::atomic<const HostKernels*> current{nullptr};

}  // namespace

const HostKernels& host_kernels() {
    const HostKernels* k = current.load(std::memory_order_acquire);
    if (k) return *k;
    const char* env = std::getenv("HAL_HOST_ISA");
    // not cached on error: every call raises until the variable is fixed
    k = &pick(env ? env : "", "HAL_HOST_ISA");
    current.store(k, std::memory_order_release);
    return *k;
}

void register_isa(py::module_& m) {
    m.def("isa", [] { return std::string(host_kernels().isa); },
          "instruction set the swiglu/gelu/softmax host kernels run with (baseline, avx2, avx512)");
    m.def("isas", [] {
        std::vector<std::string> out;
        for (const auto& c : usable()) out.push_back(c.name);
        return out;
    }, "instruction sets this build and this CPU can run, widest first");
    m.def("set_isa", [](const std::string& name) {
        current.store(&pick(name, "set_isa"), std::memory_order_release);
    }, py::arg("name"), "use this instruction set from now on ('' = the widest usable); for tests and benchmarks");
}

}  // namespace hal
