// Fused scale + mask (+ causal) softmax over the last dim of a 2-D (rows, cols) buffer.
// mask: None, bool/uint8 (nonzero = take part, as torch SDPA) or float32 (added), of shape
// (mask_rows, cols) with row r using mask row r % mask_rows.  Causal is top-left aligned
// (torch SDPA): row r is query i = r % q_len and sees columns c <= i.  A row with nothing
// left to attend to comes out all zeros, never NaN.  Argument checks here; the loops are
// in isa/kernels.h (one copy per instruction set, chosen at run time by isa.cpp).
#include "common.h"
#include "fastcall.h"
#include "kernel_table.h"

namespace hal {
namespace {

// The body both bindings call (with the GIL held: it allocates the scratch rows, then releases it).
void softmax_fwd_run(DType dt, const void* x, const void* mask, int mask_kind, int64_t mrows, void* y, int64_t rows,
                     int64_t cols, double scale, bool causal, int64_t q_len) {
    const float sc = static_cast<float>(scale);
    const HostKernels& k = host_kernels();
    const uint8_t* mb = mask_kind == 1 ? static_cast<const uint8_t*>(mask) : nullptr;
    const float* ma = mask_kind == 2 ? static_cast<const float*>(mask) : nullptr;
    // one score row per thread, allocated here so that running out of memory is a MemoryError
    std::vector<float> scratch(static_cast<size_t>(max_threads()) * static_cast<size_t>(cols));
    ReleaseGil nogil(rows * cols);
    k.softmax_fwd(dt, x, mb, ma, mrows, y, rows, cols, sc, causal, q_len, scratch.data());
}

void softmax_fwd(py::array x, py::object mask, py::array y, double scale, bool causal, int64_t q_len) {
    const char* op = "softmax";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    if (causal && q_len < 1) throw std::invalid_argument("softmax: causal needs q_len >= 1");
    int mask_kind = 0;  // 0 none, 1 bool, 2 additive float32
    py::array mk;
    int64_t mrows = 1;
    if (!mask.is_none()) {
        mk = mask.cast<py::array>();
        check_contiguous(mk, op, "mask");
        check_ndim(mk, 2, op, "mask");
        const char kind = mk.dtype().kind();
        if ((kind == 'b' || kind == 'u') && mk.dtype().itemsize() == 1) {
            mask_kind = 1;
        } else if (kind == 'f' && mk.dtype().itemsize() == 4) {
            mask_kind = 2;
        } else {
            throw py::type_error("softmax: mask must be bool (True = attend) or float32 (added to the scores)");
        }
        mrows = mk.shape(0);
        if (mk.shape(1) != cols || mrows < 1 || rows % mrows != 0)
            throw std::invalid_argument("softmax: mask has shape " + shape_str(mk) + ", which does not tile x " +
                                        shape_str(x));
    }
    softmax_fwd_run(dt, x.data(), mask_kind == 0 ? nullptr : mk.data(), mask_kind, mrows, y.mutable_data(), rows,
                    cols, scale, causal, q_len);
}

// softmax_fwd on raw addresses; mask: 0 when mask_kind is 0, else (mask_rows, cols) tiling x's rows
void softmax_fwd_raw(std::uintptr_t x, std::uintptr_t mask, int mask_kind, int64_t mask_rows, std::uintptr_t y,
                     int64_t rows, int64_t cols, int dtype, double scale, bool causal, int64_t q_len) {
    const char* op = "softmax";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    if (causal && q_len < 1) throw std::invalid_argument("softmax: causal needs q_len >= 1");
    if (mask_kind < 0 || mask_kind > 2)
        throw std::invalid_argument("softmax: mask_kind must be 0 (none), 1 (bool) or 2 (float32 added)");
    const void* mp = mask_kind ? raw_ptr(mask, op, "mask") : nullptr;
    if (mask_kind && (mask_rows < 1 || rows % mask_rows != 0))
        throw std::invalid_argument("softmax: " + std::to_string(mask_rows) + " mask rows do not tile " +
                                    std::to_string(rows) + " rows");
    softmax_fwd_run(dt, raw_ptr(x, op, "x"), mp, mask_kind, mask_kind ? mask_rows : 1, raw_ptr(y, op, "out"), rows,
                    cols, scale, causal, q_len);
}

// dx = scale * y * (dy - sum(dy * y))
void softmax_bwd(py::array dy, py::array y, py::array dx, double scale) {
    const char* op = "softmax_backward";
    check_contiguous(y, op, "out");
    check_ndim(y, 2, op, "out");
    const DType dt = dtype_of(y, op, "out");
    const int64_t rows = y.shape(0), cols = y.shape(1);
    checked(dy, Use::In, dt, {rows, cols}, op, "grad");
    checked(dx, Use::Out, dt, {rows, cols}, op, "grad_x");
    const float sc = static_cast<float>(scale);
    const HostKernels& k = host_kernels();
    py::gil_scoped_release nogil;
    k.softmax_bwd(dt, dy.data(), y.data(), dx.mutable_data(), rows, cols, sc);
}

void softmax_bwd_raw(std::uintptr_t dy, std::uintptr_t y, std::uintptr_t dx, int64_t rows, int64_t cols, int dtype,
                     double scale) {
    const char* op = "softmax_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    const void *gp = raw_ptr(dy, op, "grad"), *yp = raw_ptr(y, op, "out");
    void* dxp = raw_ptr(dx, op, "grad_x");
    const HostKernels& k = host_kernels();
    ReleaseGil nogil(rows * cols);
    k.softmax_bwd(dt, gp, yp, dxp, rows, cols, static_cast<float>(scale));
}

}  // namespace

void register_softmax(py::module_& m) {
    m.def("softmax_fwd", &softmax_fwd, py::arg("x"), py::arg("mask"), py::arg("out"), py::arg("scale"),
          py::arg("causal"), py::arg("q_len"), "softmax(scale * x + mask) over the last dim, optionally causal");
    m.def("softmax_bwd", &softmax_bwd, py::arg("grad"), py::arg("out"), py::arg("grad_x"), py::arg("scale"),
          "softmax backward from the forward output");
    // raw entries (addresses, dims, dtype code; the caller keeps the contract of common.h)
    def_raw<&softmax_fwd_raw>(m, "softmax_fwd_raw",
            "softmax_fwd_raw(x, mask, mask_kind, mask_rows, out, rows, cols, dtype, scale, causal, q_len, /)\n--\n\n"
            "softmax_fwd on raw addresses; mask_kind 0 none (mask 0), 1 bool/uint8, 2 float32 added");
    def_raw<&softmax_bwd_raw>(m, "softmax_bwd_raw",
            "softmax_bwd_raw(grad, out, grad_x, rows, cols, dtype, scale, /)\n--\n\n"
            "softmax_bwd on raw addresses");
}

}  // namespace hal
