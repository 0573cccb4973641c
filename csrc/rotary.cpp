// Rotary position embedding on a 2-D (rows, head_dim) buffer.  Row r sits at sequence
// position (r / pos_div) % pos_mod, so any layout whose head dims follow the sequence dim
// (BSHD, SBHD, BHSD) maps onto it.  cos/sin are float32 (positions, rotary_dim / 2);
// columns past rotary_dim pass through.  sign = -1 rotates backwards (the gradient).
#include "common.h"

namespace hal {
namespace {

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
    if (2 * half > dim)
        throw std::invalid_argument("rotary_embedding: cos/sin cover " + std::to_string(2 * half) +
                                    " rotary dims but the head dim is " + std::to_string(dim));
    if (pos_div < 1 || pos_mod < 1)
        throw std::invalid_argument("rotary_embedding: pos_div and pos_mod must be >= 1");
    if (sign != 1 && sign != -1) throw std::invalid_argument("rotary_embedding: sign must be 1 or -1");
    checked(y, Use::Out, dt, {rows, dim}, op, "out");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        T* yp = mptr<T>(y);
        const float* cp = cptr<float>(cos);
        const float* sp = cptr<float>(sin);
        const float sg = static_cast<float>(sign);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t p = (r / pos_div) % pos_mod;
            const T* xr = xp + r * dim;
            T* yr = yp + r * dim;
            const float* cr = cp + p * half;
            const float* sr = sp + p * half;
            if (interleaved) {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = load(xr, 2 * i), x2 = load(xr, 2 * i + 1);
                    const float c = cr[i], s = sg * sr[i];
                    store(yr, 2 * i, x1 * c - x2 * s);
                    store(yr, 2 * i + 1, x2 * c + x1 * s);
                }
            } else {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const float x1 = load(xr, i), x2 = load(xr, i + half);
                    const float c = cr[i], s = sg * sr[i];
                    store(yr, i, x1 * c - x2 * s);
                    store(yr, i + half, x2 * c + x1 * s);
                }
            }
            for (int64_t i = 2 * half; i < dim; ++i) yr[i] = xr[i];
        }
    });
}

}  // namespace

void register_rotary(py::module_& m) {
    m.def("rotary_fwd", &rotary_fwd, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("out"),
          py::arg("pos_div"), py::arg("pos_mod"), py::arg("interleaved"), py::arg("sign") = 1,
          "Rotary embedding of a (rows, head_dim) buffer; sign=-1 gives the backward rotation");
}

}  // namespace hal
