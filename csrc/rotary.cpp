// Rotary position embedding on a 2-D (rows, head_dim) buffer.  Row r sits at sequence
// position (r / pos_div) % pos_mod, so any layout whose head dims follow the sequence dim
// (BSHD, SBHD, BHSD) maps onto it.  cos/sin are (positions, rotary_dim / 2), float32 or any
// kernel dtype (read as float32: a model's bfloat16 tables need no float32 copy per call);
// columns past rotary_dim pass through.  sign = -1 rotates backwards (the gradient).
#include "common.h"
#include "fastcall.h"

namespace hal {
namespace {

// The body, on pointers: x and y (rows, dim) of dtype dt; cos/sin (pos_mod, half) of dtype tdt.
void rotary_fwd_run(DType dt, const void* x, DType tdt, const void* cos, const void* sin, void* y, int64_t rows,
                    int64_t dim, int64_t half, int64_t pos_div, int64_t pos_mod, bool interleaved, int sign) {
    dispatch(dt, [&](auto tag) {
      dispatch(tdt, [&](auto table_tag) {
        using T = decltype(tag);
        using TT = decltype(table_tag);
        const T* xp = static_cast<const T*>(x);
        const TT* cp = static_cast<const TT*>(cos);
        const TT* sp = static_cast<const TT*>(sin);
        T* yp = static_cast<T*>(y);
        const float sg = static_cast<float>(sign);
        parallel_for(rows, rows * dim, [&](int64_t r) {
            const int64_t p = (r / pos_div) % pos_mod;
            const T* xr = xp + r * dim;
            T* yr = yp + r * dim;
            const TT* cr = cp + p * half;
            const TT* sr = sp + p * half;
            if (interleaved) {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = load(xr, 2 * i), x2 = load(xr, 2 * i + 1);
                    const float c = load(cr, i), s = sg * load(sr, i);
                    store(yr, 2 * i, x1 * c - x2 * s);
                    store(yr, 2 * i + 1, x2 * c + x1 * s);
                }
            } else {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = load(xr, i), x2 = load(xr, i + half);
                    const float c = load(cr, i), s = sg * load(sr, i);
                    store(yr, i, x1 * c - x2 * s);
                    store(yr, i + half, x2 * c + x1 * s);
                }
            }
            for (int64_t i = 2 * half; i < dim; ++i) yr[i] = xr[i];
        });
      });
    });
}

// The scalar arguments both bindings check the same way.
void check_rotary_args(int64_t dim, int64_t half, int64_t pos_div, int64_t pos_mod, int sign) {
    if (2 * half > dim)
        throw std::invalid_argument("rotary_embedding: cos/sin cover " + std::to_string(2 * half) +
                                    " rotary dims but the head dim is " + std::to_string(dim));
    if (pos_div < 1 || pos_mod < 1)
        throw std::invalid_argument("rotary_embedding: pos_div and pos_mod must be >= 1");
    if (sign != 1 && sign != -1) throw std::invalid_argument("rotary_embedding: sign must be 1 or -1");
}

void rotary_fwd(py::array x, py::array cos, py::array sin, py::array y, int64_t pos_div, int64_t pos_mod,
                bool interleaved, int sign) {
    const char* op = "rotary_embedding";
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), dim = x.shape(1);
    check_f32(cos, op, "cos", false);
    check_f32(sin, op, "sin", false);
    check_ndim(cos, 2, op, "cos");
    const int64_t half = cos.shape(1);
    check_shape(cos, {pos_mod, half}, op, "cos");
    check_shape(sin, {pos_mod, half}, op, "sin");
    check_rotary_args(dim, half, pos_div, pos_mod, sign);
    checked(y, Use::Out, dt, {rows, dim}, op, "out");
    py::gil_scoped_release nogil;
    rotary_fwd_run(dt, x.data(), DType::F32, cos.data(), sin.data(), y.mutable_data(), rows, dim, half, pos_div,
                   pos_mod, interleaved, sign);
}

void rotary_fwd_raw(std::uintptr_t x, std::uintptr_t cos, std::uintptr_t sin, std::uintptr_t y, int64_t rows,
                    int64_t dim, int64_t half, int64_t pos_div, int64_t pos_mod, bool interleaved, int sign,
                    int dtype, int table_dtype) {
    const char* op = "rotary_embedding";
    const DType dt = dtype_from_code(dtype, op);
    const DType tdt = dtype_from_code(table_dtype, op);
    check_dims({rows, dim, half}, op);
    check_rotary_args(dim, half, pos_div, pos_mod, sign);
    const void* xp = raw_ptr(x, op, "x");
    const void* cp = raw_ptr(cos, op, "cos");
    const void* sp = raw_ptr(sin, op, "sin");
    void* yp = raw_ptr(y, op, "out");
    ReleaseGil nogil(rows * dim);
    rotary_fwd_run(dt, xp, tdt, cp, sp, yp, rows, dim, half, pos_div, pos_mod, interleaved, sign);
}

}  // namespace

void register_rotary(py::module_& m) {
    m.def("rotary_fwd", &rotary_fwd, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("out"),
          py::arg("pos_div"), py::arg("pos_mod"), py::arg("interleaved"), py::arg("sign") = 1,
          "Rotary embedding of a (rows, head_dim) buffer; sign=-1 gives the backward rotation");
    def_raw<&rotary_fwd_raw>(m, "rotary_fwd_raw",
            "rotary_fwd_raw(x, cos, sin, out, rows, dim, half, pos_div, pos_mod, interleaved, sign, dtype, table_dtype, /)"
            "\n--\n\n"
            "rotary_fwd on raw addresses; cos/sin (pos_mod, half) of dtype code table_dtype");
}

}  // namespace hal
