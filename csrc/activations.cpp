// SwiGLU (silu(first half) * second half of the last dim) and GELU (exact and tanh),
// forward and backward.
#include "common.h"

namespace hal {
namespace {

constexpr float kSqrt1_2 = 0.70710678118654752440f;
constexpr float kSqrt2_Pi = 0.79788456080286535588f;   // sqrt(2/pi)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1/sqrt(2*pi)
constexpr float kGeluC = 0.044715f;

void swiglu_fwd(py::array x, py::array y) {
    const char* op = "swiglu";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    if (cols % 2) throw std::invalid_argument("swiglu: the last dim of x is " + std::to_string(cols) +
                                              "; it must be even ([gate | up] halves)");
    const int64_t n = cols / 2;
    check_output(y, dt, op, "out");
    check_shape(y, {rows, n}, op, "out");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        T* yp = mptr<T>(y);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const T* a = xp + r * cols;
            const T* b = a + n;
            T* yr = yp + r * n;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
                const float av = load(a, i);
                store(yr, i, av * sigmoid_f(av) * load(b, i));
            }
        }
    });
}

void swiglu_bwd(py::array dy, py::array x, py::array dx) {
    const char* op = "swiglu_backward";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    if (cols % 2) throw std::invalid_argument("swiglu_backward: the last dim of x must be even");
    const int64_t n = cols / 2;
    check_input(dy, dt, op, "grad");
    check_shape(dy, {rows, n}, op, "grad");
    check_output(dx, dt, op, "grad_x");
    check_shape(dx, {rows, cols}, op, "grad_x");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        const T* gp = cptr<T>(dy);
        T* dxp = mptr<T>(dx);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const T* a = xp + r * cols;
            const T* b = a + n;
            const T* g = gp + r * n;
            T* da = dxp + r * cols;
            T* db = da + n;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) {
                const float av = load(a, i), bv = load(b, i), gv = load(g, i);
                const float s = sigmoid_f(av);
                store(da, i, gv * bv * s * (1.0f + av * (1.0f - s)));
                store(db, i, gv * av * s);
            }
        }
    });
}

void check_flat_pair(const py::array& a, const py::array& out, DType dt, const char* op, const char* aname,
                     const char* oname) {
    check_input(a, dt, op, aname);
    check_output(out, dt, op, oname);
    if (a.size() != out.size())
        throw std::invalid_argument(std::string(op) + ": " + oname + " has " + std::to_string(out.size()) +
                                    " elements, " + aname + " has " + std::to_string(a.size()));
}

void gelu_fwd(py::array x, py::array y, bool tanh_approx) {
    const char* op = "gelu";
    check_contiguous(x, op, "x");
    const DType dt = dtype_of(x, op, "x");
    check_flat_pair(x, y, dt, op, "x", "out");
    const int64_t n = x.size();
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        T* yp = mptr<T>(y);
        py::gil_scoped_release nogil;
        if (tanh_approx) {
#pragma omp parallel for simd schedule(guided)
            for (int64_t i = 0; i < n; ++i) {
                const float v = load(xp, i);
                store(yp, i, v * sigmoid_f(2.0f * kSqrt2_Pi * (v + kGeluC * v * v * v)));  // 0.5v(1+tanh u) = v*sigmoid(2u)
            }
        } else {
#pragma omp parallel for simd schedule(guided)
            for (int64_t i = 0; i < n; ++i) {
                const float v = load(xp, i);
                store(yp, i, 0.5f * v * one_plus_erf(v * kSqrt1_2));
            }
        }
    });
}

void gelu_bwd(py::array dy, py::array x, py::array dx, bool tanh_approx) {
    const char* op = "gelu_backward";
    check_contiguous(x, op, "x");
    const DType dt = dtype_of(x, op, "x");
    check_flat_pair(x, dx, dt, op, "x", "grad_x");
    check_input(dy, dt, op, "grad");
    if (dy.size() != x.size()) throw std::invalid_argument("gelu_backward: grad and x differ in size");
    const int64_t n = x.size();
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        const T* gp = cptr<T>(dy);
        T* dp = mptr<T>(dx);
        py::gil_scoped_release nogil;
        if (tanh_approx) {
#pragma omp parallel for simd schedule(guided)
            for (int64_t i = 0; i < n; ++i) {
                const float v = load(xp, i);
                // with s = sigmoid(2u): 0.5(1 + tanh u) = s and 0.5(1 - tanh^2 u) = 2s(1 - s)
                const float s = sigmoid_f(2.0f * kSqrt2_Pi * (v + kGeluC * v * v * v));
                const float d = s + 2.0f * v * s * (1.0f - s) * kSqrt2_Pi * (1.0f + 3.0f * kGeluC * v * v);
                store(dp, i, load(gp, i) * d);
            }
        } else {
#pragma omp parallel for simd schedule(guided)
            for (int64_t i = 0; i < n; ++i) {
                const float v = load(xp, i);
                const float d = 0.5f * one_plus_erf(v * kSqrt1_2) + v * kInvSqrt2Pi * exp_f(-0.5f * v * v);
                store(dp, i, load(gp, i) * d);
            }
        }
    });
}

}  // namespace

void register_activations(py::module_& m) {
    m.def("swiglu_fwd", &swiglu_fwd, py::arg("x"), py::arg("out"), "silu(x[:, :n]) * x[:, n:] into out (rows, n)");
    m.def("swiglu_bwd", &swiglu_bwd, py::arg("grad"), py::arg("x"), py::arg("grad_x"), "SwiGLU backward");
    m.def("gelu_fwd", &gelu_fwd, py::arg("x"), py::arg("out"), py::arg("tanh"), "GELU (exact, or tanh approximation)");
    m.def("gelu_bwd", &gelu_bwd, py::arg("grad"), py::arg("x"), py::arg("grad_x"), py::arg("tanh"), "GELU backward");
}

}  // namespace hal
