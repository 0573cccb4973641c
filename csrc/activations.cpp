// SwiGLU (silu(first half) * second half of the last dim) and GELU (exact and tanh),
// forward and backward: argument checks here, the loops in isa/kernels.h (one copy per
// instruction set, chosen at run time by isa.cpp).
#include "common.h"
#include "fastcall.h"
#include "kernel_table.h"

namespace hal {
namespace {

void swiglu_fwd(py::array x, py::array y) {
    const char* op = "swiglu";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    if (cols % 2) throw std::invalid_argument("swiglu: the last dim of x is " + std::to_string(cols) +
                                              "; it must be even ([gate | up] halves)");
    const int64_t n = cols / 2;
    checked(y, Use::Out, dt, {rows, n}, op, "out");
    const HostKernels& k = host_kernels();
    py::gil_scoped_release nogil;
    k.swiglu_fwd(dt, x.data(), y.mutable_data(), rows, n);
}

void swiglu_bwd(py::array dy, py::array x, py::array dx) {
    const char* op = "swiglu_backward";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    if (cols % 2) throw std::invalid_argument("swiglu_backward: the last dim of x must be even");
    const int64_t n = cols / 2;
    checked(dy, Use::In, dt, {rows, n}, op, "grad");
    checked(dx, Use::Out, dt, {rows, cols}, op, "grad_x");
    const HostKernels& k = host_kernels();
    py::gil_scoped_release nogil;
    k.swiglu_bwd(dt, dy.data(), x.data(), dx.mutable_data(), rows, n);
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
    const HostKernels& k = host_kernels();
    py::gil_scoped_release nogil;
    k.gelu_fwd(dt, x.data(), y.mutable_data(), n, tanh_approx);
}

void gelu_bwd(py::array dy, py::array x, py::array dx, bool tanh_approx) {
    const char* op = "gelu_backward";
    check_contiguous(x, op, "x");
    const DType dt = dtype_of(x, op, "x");
    check_flat_pair(x, dx, dt, op, "x", "grad_x");
    check_input(dy, dt, op, "grad");
    if (dy.size() != x.size()) throw std::invalid_argument("gelu_backward: grad and x differ in size");
    const int64_t n = x.size();
    const HostKernels& k = host_kernels();
    py::gil_scoped_release nogil;
    k.gelu_bwd(dt, dy.data(), x.data(), dx.mutable_data(), n, tanh_approx);
}

// ---- raw entries: addresses from Tensor.data_ptr(); the caller keeps the contract of common.h
using addr = std::uintptr_t;

void swiglu_fwd_raw(addr x, addr y, int64_t rows, int64_t n, int dtype) {
    const char* op = "swiglu";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, n}, op);
    const void* xp = raw_ptr(x, op, "x");
    void* yp = raw_ptr(y, op, "out");
    const HostKernels& k = host_kernels();
    ReleaseGil nogil(rows * 2 * n);
    k.swiglu_fwd(dt, xp, yp, rows, n);
}

void swiglu_bwd_raw(addr dy, addr x, addr dx, int64_t rows, int64_t n, int dtype) {
    const char* op = "swiglu_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, n}, op);
    const void *gp = raw_ptr(dy, op, "grad"), *xp = raw_ptr(x, op, "x");
    void* dxp = raw_ptr(dx, op, "grad_x");
    const HostKernels& k = host_kernels();
    ReleaseGil nogil(rows * 2 * n);
    k.swiglu_bwd(dt, gp, xp, dxp, rows, n);
}

void gelu_fwd_raw(addr x, addr y, int64_t n, int dtype, bool tanh_approx) {
    const char* op = "gelu";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({n}, op);
    const void* xp = raw_ptr(x, op, "x");
    void* yp = raw_ptr(y, op, "out");
    const HostKernels& k = host_kernels();
    ReleaseGil nogil(n);
    k.gelu_fwd(dt, xp, yp, n, tanh_approx);
}

void gelu_bwd_raw(addr dy, addr x, addr dx, int64_t n, int dtype, bool tanh_approx) {
    const char* op = "gelu_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({n}, op);
    const void *gp = raw_ptr(dy, op, "grad"), *xp = raw_ptr(x, op, "x");
    void* dxp = raw_ptr(dx, op, "grad_x");
    const HostKernels& k = host_kernels();
    ReleaseGil nogil(n);
    k.gelu_bwd(dt, gp, xp, dxp, n, tanh_approx);
}

}  // namespace

void register_activations(py::module_& m) {
    m.def("swiglu_fwd", &swiglu_fwd, py::arg("x"), py::arg("out"), "silu(x[:, :n]) * x[:, n:] into out (rows, n)");
    m.def("swiglu_bwd", &swiglu_bwd, py::arg("grad"), py::arg("x"), py::arg("grad_x"), "SwiGLU backward");
    m.def("gelu_fwd", &gelu_fwd, py::arg("x"), py::arg("out"), py::arg("tanh"), "GELU (exact, or tanh approximation)");
    m.def("gelu_bwd", &gelu_bwd, py::arg("grad"), py::arg("x"), py::arg("grad_x"), py::arg("tanh"), "GELU backward");
    // raw entries (addresses, dims, dtype code; the caller keeps the contract of common.h)
    def_raw<&swiglu_fwd_raw>(m, "swiglu_fwd_raw", "swiglu_fwd_raw(x, out, rows, n, dtype, /)\n--\n\n"
            "swiglu_fwd on raw addresses: x (rows, 2n), out (rows, n)");
    def_raw<&swiglu_bwd_raw>(m, "swiglu_bwd_raw", "swiglu_bwd_raw(grad, x, grad_x, rows, n, dtype, /)\n--\n\n"
            "swiglu_bwd on raw addresses: grad (rows, n), x and grad_x (rows, 2n)");
    def_raw<&gelu_fwd_raw>(m, "gelu_fwd_raw", "gelu_fwd_raw(x, out, n, dtype, tanh, /)\n--\n\n"
            "gelu_fwd on raw addresses of n elements");
    def_raw<&gelu_bwd_raw>(m, "gelu_bwd_raw", "gelu_bwd_raw(grad, x, grad_x, n, dtype, tanh, /)\n--\n\n"
            "gelu_bwd on raw addresses of n elements");
}

}  // namespace hal
