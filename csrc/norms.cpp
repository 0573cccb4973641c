// RMSNorm and LayerNorm (with the residual add fused in), forward and backward, over the
// last dimension of a 2-D (rows, cols) buffer.  Row statistics are recomputed in the
// backward pass instead of being stored: a row is still in cache, and the forward then
// writes nothing but its outputs.
#include "common.h"

namespace hal {
namespace {

// Per-thread double accumulators for a column reduction (weight/bias gradients).
struct ColumnAccumulator {
    int64_t cols;
    int threads;
    std::vector<double> buf;
    ColumnAccumulator(int64_t c, int t) : cols(c), threads(t), buf(static_cast<size_t>(c) * t, 0.0) {}
    double* row(int tid) { return buf.data() + static_cast<size_t>(tid) * cols; }
    void reduce_into(float* out) const {
        for (int64_t c = 0; c < cols; ++c) {
            double s = 0.0;
            for (int t = 0; t < threads; ++t) s += buf[static_cast<size_t>(t) * cols + c];
            out[c] = static_cast<float>(s);
        }
    }
};

void check_rows(const py::array& x, const char* op) {
    check_contiguous(x, op, "x");
    check_ndim(x, 2, op, "x");
}

template <class T>
inline double row_mean_square(const T* xr, int64_t cols) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < cols; ++c) {
        const float v = load(xr, c);
        acc += static_cast<double>(v) * v;
    }
    return cols ? acc / static_cast<double>(cols) : 0.0;
}

void rms_norm_fwd(py::array x, py::array w, py::array y, double eps) {
    const char* op = "rms_norm";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        const T* wp = cptr<T>(w);
        T* yp = mptr<T>(y);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const T* xr = xp + r * cols;
            T* yr = yp + r * cols;
            const float rstd = static_cast<float>(1.0 / std::sqrt(row_mean_square(xr, cols) + eps));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(yr, c, load(xr, c) * rstd * load(wp, c));
        }
    });
}

// h = x + residual (written to residual_out, rounded to T like torch's add); y = rms_norm(h) * w
void add_rms_norm_fwd(py::array x, py::array residual, py::array w, py::array y, py::array h_out, double eps) {
    const char* op = "add_rms_norm";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(residual, Use::In, dt, {rows, cols}, op, "residual");
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    checked(h_out, Use::Out, dt, {rows, cols}, op, "residual_out");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        const T* rp = cptr<T>(residual);
        const T* wp = cptr<T>(w);
        T* yp = mptr<T>(y);
        T* hp = mptr<T>(h_out);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const T* xr = xp + r * cols;
            const T* rr = rp + r * cols;
            T* hr = hp + r * cols;
            T* yr = yp + r * cols;
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(hr, c, load(xr, c) + load(rr, c));
            const float rstd = static_cast<float>(1.0 / std::sqrt(row_mean_square(hr, cols) + eps));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(yr, c, load(hr, c) * rstd * load(wp, c));
        }
    });
}

void rms_norm_bwd(py::array dy, py::array x, py::array w, py::array dx, py::array dw, double eps) {
    const char* op = "rms_norm_backward";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(dy, Use::In, dt, {rows, cols}, op, "grad");
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(dx, Use::Out, dt, {rows, cols}, op, "grad_x");
    checked(dw, Use::F32Out, dt, {cols}, op, "grad_weight");
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* dyp = cptr<T>(dy);
        const T* xp = cptr<T>(x);
        const T* wp = cptr<T>(w);
        T* dxp = mptr<T>(dx);
        float* dwp = mptr<float>(dw);
        py::gil_scoped_release nogil;
        ColumnAccumulator acc(cols, max_threads());
#pragma omp parallel
        {
            double* dwr = acc.row(thread_id());
#pragma omp for schedule(guided)
            for (int64_t r = 0; r < rows; ++r) {
                const T* xr = xp + r * cols;
                const T* gr = dyp + r * cols;
                T* dxr = dxp + r * cols;
                const double rstd_d = 1.0 / std::sqrt(row_mean_square(xr, cols) + eps);
                const float rstd = static_cast<float>(rstd_d);
                double dot = 0.0;  // sum(dy * w * x)
#pragma omp simd reduction(+ : dot)
                for (int64_t c = 0; c < cols; ++c) {
                    const float xv = load(xr, c), gv = load(gr, c);
                    dot += static_cast<double>(gv * load(wp, c)) * xv;
                    dwr[c] += static_cast<double>(gv * xv * rstd);
                }
                const float k = static_cast<float>(rstd_d * rstd_d * rstd_d * dot / static_cast<double>(cols));
#pragma omp simd
                for (int64_t c = 0; c < cols; ++c)
                    store(dxr, c, load(gr, c) * load(wp, c) * rstd - load(xr, c) * k);
            }
        }
        acc.reduce_into(dwp);
    });
}

// h = x + residual (when given, written to h_out); y = (h - mean) * rstd * w + b
void layer_norm_fwd(py::array x, py::object residual, py::array w, py::object b, py::array y,
                    py::object h_out, double eps) {
    const char* op = "layer_norm";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    const bool has_res = !residual.is_none(), has_b = !b.is_none();
    if (has_res != !h_out.is_none())
        throw std::invalid_argument("layer_norm: residual and residual_out must be given together");
    py::array res, hb, bb;
    if (has_res) {
        res = residual.cast<py::array>();
        hb = h_out.cast<py::array>();
        checked(res, Use::In, dt, {rows, cols}, op, "residual");
        checked(hb, Use::Out, dt, {rows, cols}, op, "residual_out");
    }
    if (has_b) {
        bb = b.cast<py::array>();
        checked(bb, Use::In, dt, {cols}, op, "bias");
    }
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = cptr<T>(x);
        const T* rp = has_res ? cptr<T>(res) : nullptr;
        T* hp = has_res ? mptr<T>(hb) : nullptr;
        const T* wp = cptr<T>(w);
        const T* bp = has_b ? cptr<T>(bb) : nullptr;
        T* yp = mptr<T>(y);
        py::gil_scoped_release nogil;
#pragma omp parallel for schedule(guided)
        for (int64_t r = 0; r < rows; ++r) {
            const T* src = xp + r * cols;
            if (has_res) {  // the sum is rounded to T first, exactly like x + residual in torch
                const T* xr = xp + r * cols;
                const T* rr = rp + r * cols;
                T* hr = hp + r * cols;
#pragma omp simd
                for (int64_t c = 0; c < cols; ++c) store(hr, c, load(xr, c) + load(rr, c));
                src = hr;
            }
            double sum = 0.0;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < cols; ++c) sum += load(src, c);
            const double mean_d = sum / static_cast<double>(cols);
            const float mean = static_cast<float>(mean_d);
            double var = 0.0;
#pragma omp simd reduction(+ : var)
            for (int64_t c = 0; c < cols; ++c) {
                const double d = static_cast<double>(load(src, c)) - mean_d;
                var += d * d;
            }
            const float rstd = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(cols) + eps));
            T* yr = yp + r * cols;
            if (bp) {
#pragma omp simd
                for (int64_t c = 0; c < cols; ++c)
                    store(yr, c, (load(src, c) - mean) * rstd * load(wp, c) + load(bp, c));
            } else {
#pragma omp simd
                for (int64_t c = 0; c < cols; ++c) store(yr, c, (load(src, c) - mean) * rstd * load(wp, c));
            }
        }
    });
}

// dh = LayerNorm backward of dy at h (+ grad_h_extra when the summed residual was used too)
void layer_norm_bwd(py::array dy, py::object dh_extra, py::array h, py::array w, py::array dh,
                    py::array dw, py::object db, double eps) {
    const char* op = "layer_norm_backward";
    check_rows(h, op);
    const DType dt = dtype_of(h, op, "x");
    const int64_t rows = h.shape(0), cols = h.shape(1);
    checked(dy, Use::In, dt, {rows, cols}, op, "grad");
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(dh, Use::Out, dt, {rows, cols}, op, "grad_x");
    checked(dw, Use::F32Out, dt, {cols}, op, "grad_weight");
    const bool has_extra = !dh_extra.is_none(), has_db = !db.is_none();
    py::array ex, dbb;
    if (has_extra) {
        ex = dh_extra.cast<py::array>();
        checked(ex, Use::In, dt, {rows, cols}, op, "grad_residual_out");
    }
    if (has_db) {
        dbb = db.cast<py::array>();
        checked(dbb, Use::F32Out, dt, {cols}, op, "grad_bias");
    }
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* gp = cptr<T>(dy);
        const T* ep = has_extra ? cptr<T>(ex) : nullptr;
        const T* hp = cptr<T>(h);
        const T* wp = cptr<T>(w);
        T* dhp = mptr<T>(dh);
        float* dwp = mptr<float>(dw);
        float* dbp = has_db ? mptr<float>(dbb) : nullptr;
        py::gil_scoped_release nogil;
        const int nt = max_threads();
        ColumnAccumulator accw(cols, nt), accb(cols, has_db ? nt : 0);
#pragma omp parallel
        {
            double* dwr = accw.row(thread_id());
            double* dbr = has_db ? accb.row(thread_id()) : nullptr;
#pragma omp for schedule(guided)
            for (int64_t r = 0; r < rows; ++r) {
                const T* hr = hp + r * cols;
                const T* gr = gp + r * cols;
                T* dhr = dhp + r * cols;
                double sum = 0.0;
#pragma omp simd reduction(+ : sum)
                for (int64_t c = 0; c < cols; ++c) sum += load(hr, c);
                const double mean_d = sum / static_cast<double>(cols);
                double var = 0.0;
#pragma omp simd reduction(+ : var)
                for (int64_t c = 0; c < cols; ++c) {
                    const double d = static_cast<double>(load(hr, c)) - mean_d;
                    var += d * d;
                }
                const float mean = static_cast<float>(mean_d);
                const float rstd = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(cols) + eps));
                double sg = 0.0, sgx = 0.0;  // sum(dy*w), sum(dy*w*xhat)
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t c = 0; c < cols; ++c) {
                    const float gv = load(gr, c);
                    const float xhat = (load(hr, c) - mean) * rstd;
                    const float g = gv * load(wp, c);
                    sg += g;
                    sgx += static_cast<double>(g) * xhat;
                    dwr[c] += static_cast<double>(gv * xhat);
                }
                if (dbr) {
#pragma omp simd
                    for (int64_t c = 0; c < cols; ++c) dbr[c] += load(gr, c);
                }
                const float mg = static_cast<float>(sg / static_cast<double>(cols));
                const float mgx = static_cast<float>(sgx / static_cast<double>(cols));
                if (ep) {
                    const T* er = ep + r * cols;
#pragma omp simd
                    for (int64_t c = 0; c < cols; ++c) {
                        const float xhat = (load(hr, c) - mean) * rstd;
                        store(dhr, c, rstd * (load(gr, c) * load(wp, c) - mg - xhat * mgx) + load(er, c));
                    }
                } else {
#pragma omp simd
                    for (int64_t c = 0; c < cols; ++c) {
                        const float xhat = (load(hr, c) - mean) * rstd;
                        store(dhr, c, rstd * (load(gr, c) * load(wp, c) - mg - xhat * mgx));
                    }
                }
            }
        }
        accw.reduce_into(dwp);
        if (dbp) accb.reduce_into(dbp);
    });
}

}  // namespace

void register_norms(py::module_& m) {
    m.def("rms_norm_fwd", &rms_norm_fwd, py::arg("x"), py::arg("weight"), py::arg("out"), py::arg("eps"),
          "RMSNorm over the last dim of a 2-D buffer into out");
    m.def("add_rms_norm_fwd", &add_rms_norm_fwd, py::arg("x"), py::arg("residual"), py::arg("weight"),
          py::arg("out"), py::arg("residual_out"), py::arg("eps"),
          "RMSNorm of x + residual into out; the sum goes to residual_out");
    m.def("rms_norm_bwd", &rms_norm_bwd, py::arg("grad"), py::arg("x"), py::arg("weight"), py::arg("grad_x"),
          py::arg("grad_weight"), py::arg("eps"), "RMSNorm backward; grad_weight is float32");
    m.def("layer_norm_fwd", &layer_norm_fwd, py::arg("x"), py::arg("residual"), py::arg("weight"),
          py::arg("bias"), py::arg("out"), py::arg("residual_out"), py::arg("eps"),
          "LayerNorm of x (+ residual, whose sum goes to residual_out) into out");
    m.def("layer_norm_bwd", &layer_norm_bwd, py::arg("grad"), py::arg("grad_residual_out"), py::arg("x"),
          py::arg("weight"), py::arg("grad_x"), py::arg("grad_weight"), py::arg("grad_bias"), py::arg("eps"),
          "LayerNorm backward at x (the normalised input); weight/bias grads are float32");
}

}  // namespace hal
