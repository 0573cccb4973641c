// hal._C: the private native module.  This file only defines the module; each topic's
// kernels live in their own file (norms, rotary, activations, softmax, adamw, vision) and
// register themselves here.  Host kernels operate on contiguous buffers (numpy arrays, or
// torch tensors through .numpy()), release the GIL, and check shapes so that bad input
// raises a Python error instead of crashing the process; their *_raw twins take addresses
// and dims instead (the contract is in common.h).  Parallel regions open only above the
// grain (parallel.h).  redirect_calls.cpp holds hal.redirect's hot wrappers as C types, op_entry.cpp
// the way into a hal.ops operator in eager code.
#include "common.h"

#ifndef HAL_VERSION_INFO
#define HAL_VERSION_INFO "dev"
#endif

namespace py = pybind11;
using f32arr = py::array_t<float, py::array::c_style | py::array::forcecast>;

namespace {

int openmp_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w
f32arr rms_norm_f32(f32arr x, f32arr w, double eps) {
    if (x.ndim() < 1) throw std::invalid_argument("rms_norm: x must have at least 1 dimension");
    if (w.ndim() != 1) throw std::invalid_argument("rms_norm: weight must be 1-D");
    const int64_t cols = x.shape(x.ndim() - 1);
    if (w.shape(0) != cols)
        throw std::invalid_argument("rms_norm: weight has " + std::to_string(w.shape(0)) +
                                    " elements but the last dimension of x is " + std::to_string(cols));
    const int64_t rows = cols == 0 ? 0 : x.size() / cols;
    f32arr y(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
    const float* xp = x.data();
    const float* wp = w.data();
    float* yp = y.mutable_data();
    {
        py::gil_scoped_release nogil;
        hal::parallel_for(rows, rows * cols, [&](int64_t r) {
            const float* xr = xp + r * cols;
            float* yr = yp + r * cols;
            double acc = 0.0;
#pragma omp simd reduction(+ : acc)
            for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(xr[c]) * xr[c];
            const float inv = static_cast<float>(1.0 / std::sqrt(acc / static_cast<double>(cols) + eps));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv * wp[c];
        });
    }
    return y;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "hal host kernels (C++, OpenMP, GIL released) and the redirection shim's call wrappers";
    m.attr("__version__") = HAL_VERSION_INFO;
    m.def("openmp_threads", &openmp_threads, "OpenMP threads the kernels use");
    hal::register_norms(m);
    hal::register_rotary(m);
    hal::register_activations(m);
    hal::register_softmax(m);
    hal::register_adamw(m);
    hal::register_vision(m);
    hal::register_isa(m);
    hal::register_parallel(m);
    hal::register_redirect_calls(m);
    hal::register_op_entry(m);
    py::dict codes;  // the dtype argument of the *_raw entries
    codes["float32"] = 0;
    codes["float16"] = 1;
    codes["bfloat16"] = 2;
    m.attr("DTYPE_CODES") = codes;
    m.def("rms_norm_f32", &rms_norm_f32, py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6,
          "RMSNorm over the last dimension of a float32 array");
}
