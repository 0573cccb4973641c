// RMSNorm and LayerNorm (with the residual add fused in), forward and backward, over the
// last dimension of a 2-D (rows, cols) buffer.  Row statistics are recomputed in the
// backward pass instead of being stored: a row is still in cache, and the forward then
// writes nothing but its outputs.
#include "common.h"
#include "fastcall.h"

namespace hal {
namespace {

// Column sums of a row kernel (the weight and bias gradients) over fixed row chunks: chunk k
// covers rows [k * per_chunk, (k + 1) * per_chunk) and has its own double partial row, and a
// column's total adds the partials in chunk order.  per_chunk depends on the shape alone (at
// least 32 rows and 32768 elements), so the totals are bitwise the same serial or parallel and
// for any thread count.  Allocated before the parallel region (running out of memory is then
// a MemoryError); each chunk zeroes its own partial row.
class ChunkedColumnSums {
  public:
    ChunkedColumnSums(int64_t rows, int64_t cols, int sums)
        : rows_(rows), cols_(cols), per_chunk_(std::max<int64_t>(32, (32768 + cols - 1) / std::max<int64_t>(cols, 1))),
          chunks_((rows + per_chunk_ - 1) / per_chunk_),
          buf_(static_cast<size_t>(sums) * static_cast<size_t>(chunks_) * static_cast<size_t>(cols)) {}
    int64_t chunks() const { return chunks_; }
    int64_t begin(int64_t k) const { return k * per_chunk_; }
    int64_t end(int64_t k) const { return std::min(rows_, (k + 1) * per_chunk_); }
    // partial row of sum s for chunk k, zeroed
    double* zeroed(int s, int64_t k) {
        double* p = part(s, k);
        std::fill(p, p + cols_, 0.0);
        return p;
    }
    // out[c] = sum over chunks of the partials of sum s, for the columns of block b (of kBlock)
    static constexpr int64_t kBlock = 256;
    int64_t blocks() const { return (cols_ + kBlock - 1) / kBlock; }
    void total(int s, int64_t b, float* out) {
        const int64_t c0 = b * kBlock, n = std::min(cols_, c0 + kBlock) - c0;
        double t[kBlock] = {};
        for (int64_t k = 0; k < chunks_; ++k) {
            const double* p = part(s, k) + c0;
            for (int64_t c = 0; c < n; ++c) t[c] += p[c];
        }
        for (int64_t c = 0; c < n; ++c) out[c0 + c] = static_cast<float>(t[c]);
    }

  private:
    double* part(int s, int64_t k) {
        return buf_.data() + (static_cast<size_t>(s) * static_cast<size_t>(chunks_) + static_cast<size_t>(k)) *
                                 static_cast<size_t>(cols_);
    }
    int64_t rows_, cols_, per_chunk_, chunks_;
    std::vector<double> buf_;
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

// ---- kernel bodies: pointers and dims only, called with the GIL released by both bindings.
// Column sums with no rows come out 0.

void rms_norm_fwd_run(DType dt, const void* x, const void* w, void* y, int64_t rows, int64_t cols, double eps) {
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        const T* wp = static_cast<const T*>(w);
        T* yp = static_cast<T*>(y);
        parallel_for(rows, rows * cols, [&](int64_t r) {
            const T* xr = xp + r * cols;
            T* yr = yp + r * cols;
            const float rstd = static_cast<float>(1.0 / std::sqrt(row_mean_square(xr, cols) + eps));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(yr, c, load(xr, c) * rstd * load(wp, c));
        });
    });
}

// h = x + residual (written to h, rounded to T like torch's add); y = rms_norm(h) * w
void add_rms_norm_fwd_run(DType dt, const void* x, const void* residual, const void* w, void* y, void* h,
                          int64_t rows, int64_t cols, double eps) {
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        const T* rp = static_cast<const T*>(residual);
        const T* wp = static_cast<const T*>(w);
        T* yp = static_cast<T*>(y);
        T* hp = static_cast<T*>(h);
        parallel_for(rows, rows * cols, [&](int64_t r) {
            const T* xr = xp + r * cols;
            const T* rr = rp + r * cols;
            T* hr = hp + r * cols;
            T* yr = yp + r * cols;
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(hr, c, load(xr, c) + load(rr, c));
            const float rstd = static_cast<float>(1.0 / std::sqrt(row_mean_square(hr, cols) + eps));
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) store(yr, c, load(hr, c) * rstd * load(wp, c));
        });
    });
}

void rms_norm_bwd_run(DType dt, const void* dy, const void* x, const void* w, void* dx, float* dwp, int64_t rows,
                      int64_t cols, double eps) {
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* dyp = static_cast<const T*>(dy);
        const T* xp = static_cast<const T*>(x);
        const T* wp = static_cast<const T*>(w);
        T* dxp = static_cast<T*>(dx);
        ChunkedColumnSums acc(rows, cols, 1);
        const int64_t chunks = acc.chunks(), blocks = acc.blocks();
        parallel_two_loops(
            rows * cols, chunks, [&](int64_t k) {
                double* dwr = acc.zeroed(0, k);
                for (int64_t r = acc.begin(k); r < acc.end(k); ++r) {
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
                    const float kk = static_cast<float>(rstd_d * rstd_d * rstd_d * dot / static_cast<double>(cols));
#pragma omp simd
                    for (int64_t c = 0; c < cols; ++c)
                        store(dxr, c, load(gr, c) * load(wp, c) * rstd - load(xr, c) * kk);
                }
            },
            blocks, [&](int64_t b) { acc.total(0, b, dwp); });
    });
}

// h = x + residual (when given, written to h_out); y = (h - mean) * rstd * w + b
void layer_norm_fwd_run(DType dt, const void* x, const void* residual, const void* w, const void* b, void* y,
                        void* h_out, int64_t rows, int64_t cols, double eps) {
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* xp = static_cast<const T*>(x);
        const T* rp = static_cast<const T*>(residual);
        T* hp = static_cast<T*>(h_out);
        const T* wp = static_cast<const T*>(w);
        const T* bp = static_cast<const T*>(b);
        T* yp = static_cast<T*>(y);
        const bool has_res = rp != nullptr;
        parallel_for(rows, rows * cols, [&](int64_t r) {
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
        });
    });
}

// dh = LayerNorm backward of dy at h (+ dh_extra when the summed residual was used too);
// dw (and db when not null) are float32 column sums
void layer_norm_bwd_run(DType dt, const void* dy, const void* dh_extra, const void* h, const void* w, void* dh,
                        float* dwp, float* dbp, int64_t rows, int64_t cols, double eps) {
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* gp = static_cast<const T*>(dy);
        const T* ep = static_cast<const T*>(dh_extra);
        const T* hp = static_cast<const T*>(h);
        const T* wp = static_cast<const T*>(w);
        T* dhp = static_cast<T*>(dh);
        const bool has_db = dbp != nullptr;
        ChunkedColumnSums acc(rows, cols, has_db ? 2 : 1);
        const int64_t chunks = acc.chunks(), blocks = acc.blocks();
        parallel_two_loops(
            rows * cols, chunks, [&](int64_t k) {
                double* dwr = acc.zeroed(0, k);
                double* dbr = has_db ? acc.zeroed(1, k) : nullptr;
                for (int64_t r = acc.begin(k); r < acc.end(k); ++r) {
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
            },
            blocks, [&](int64_t b) {
                acc.total(0, b, dwp);
                if (has_db) acc.total(1, b, dbp);
            });
    });
}

// ---- numpy bindings: check every buffer, then run the body

void rms_norm_fwd(py::array x, py::array w, py::array y, double eps) {
    const char* op = "rms_norm";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    py::gil_scoped_release nogil;
    rms_norm_fwd_run(dt, x.data(), w.data(), y.mutable_data(), rows, cols, eps);
}

void add_rms_norm_fwd(py::array x, py::array residual, py::array w, py::array y, py::array h_out, double eps) {
    const char* op = "add_rms_norm";
    check_rows(x, op);
    const DType dt = dtype_of(x, op, "x");
    const int64_t rows = x.shape(0), cols = x.shape(1);
    checked(residual, Use::In, dt, {rows, cols}, op, "residual");
    checked(w, Use::In, dt, {cols}, op, "weight");
    checked(y, Use::Out, dt, {rows, cols}, op, "out");
    checked(h_out, Use::Out, dt, {rows, cols}, op, "residual_out");
    py::gil_scoped_release nogil;
    add_rms_norm_fwd_run(dt, x.data(), residual.data(), w.data(), y.mutable_data(), h_out.mutable_data(), rows,
                         cols, eps);
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
    py::gil_scoped_release nogil;
    rms_norm_bwd_run(dt, dy.data(), x.data(), w.data(), dx.mutable_data(), mptr<float>(dw), rows, cols, eps);
}

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
    const void* rp = has_res ? res.data() : nullptr;
    void* hp = has_res ? hb.mutable_data() : nullptr;
    const void* bp = has_b ? bb.data() : nullptr;
    py::gil_scoped_release nogil;
    layer_norm_fwd_run(dt, x.data(), rp, w.data(), bp, y.mutable_data(), hp, rows, cols, eps);
}

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
    const void* ep = has_extra ? ex.data() : nullptr;
    float* dbp = has_db ? mptr<float>(dbb) : nullptr;
    py::gil_scoped_release nogil;
    layer_norm_bwd_run(dt, dy.data(), ep, h.data(), w.data(), dh.mutable_data(), mptr<float>(dw), dbp, rows, cols,
                       eps);
}

// ---- raw bindings: addresses from Tensor.data_ptr(); the caller keeps the contract of common.h
using addr = std::uintptr_t;

void rms_norm_fwd_raw(addr x, addr w, addr y, int64_t rows, int64_t cols, int dtype, double eps) {
    const char* op = "rms_norm";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    const void *xp = raw_ptr(x, op, "x"), *wp = raw_ptr(w, op, "weight");
    void* yp = raw_ptr(y, op, "out");
    ReleaseGil nogil(rows * cols);
    rms_norm_fwd_run(dt, xp, wp, yp, rows, cols, eps);
}

void add_rms_norm_fwd_raw(addr x, addr residual, addr w, addr y, addr h_out, int64_t rows, int64_t cols,
                          int dtype, double eps) {
    const char* op = "add_rms_norm";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    const void *xp = raw_ptr(x, op, "x"), *rp = raw_ptr(residual, op, "residual"), *wp = raw_ptr(w, op, "weight");
    void *yp = raw_ptr(y, op, "out"), *hp = raw_ptr(h_out, op, "residual_out");
    ReleaseGil nogil(rows * cols);
    add_rms_norm_fwd_run(dt, xp, rp, wp, yp, hp, rows, cols, eps);
}

void rms_norm_bwd_raw(addr dy, addr x, addr w, addr dx, addr dw, int64_t rows, int64_t cols, int dtype,
                      double eps) {
    const char* op = "rms_norm_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    const void *gp = raw_ptr(dy, op, "grad"), *xp = raw_ptr(x, op, "x"), *wp = raw_ptr(w, op, "weight");
    void* dxp = raw_ptr(dx, op, "grad_x");
    float* dwp = static_cast<float*>(raw_ptr(dw, op, "grad_weight"));
    ReleaseGil nogil(rows * cols);
    rms_norm_bwd_run(dt, gp, xp, wp, dxp, dwp, rows, cols, eps);
}

void layer_norm_fwd_raw(addr x, addr residual, addr w, addr b, addr y, addr h_out, int64_t rows, int64_t cols,
                        int dtype, double eps) {
    const char* op = "layer_norm";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    if (!residual != !h_out)
        throw std::invalid_argument("layer_norm: residual and residual_out must be given together");
    const void *xp = raw_ptr(x, op, "x"), *wp = raw_ptr(w, op, "weight");
    void* yp = raw_ptr(y, op, "out");
    ReleaseGil nogil(rows * cols);
    layer_norm_fwd_run(dt, xp, raw_opt(residual), wp, raw_opt(b), yp, raw_opt(h_out), rows, cols, eps);
}

void layer_norm_bwd_raw(addr dy, addr dh_extra, addr h, addr w, addr dh, addr dw, addr db, int64_t rows,
                        int64_t cols, int dtype, double eps) {
    const char* op = "layer_norm_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({rows, cols}, op);
    const void *gp = raw_ptr(dy, op, "grad"), *hp = raw_ptr(h, op, "x"), *wp = raw_ptr(w, op, "weight");
    void* dhp = raw_ptr(dh, op, "grad_x");
    float* dwp = static_cast<float*>(raw_ptr(dw, op, "grad_weight"));
    ReleaseGil nogil(rows * cols);
    layer_norm_bwd_run(dt, gp, raw_opt(dh_extra), hp, wp, dhp, dwp, static_cast<float*>(raw_opt(db)), rows, cols,
                       eps);
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
    // raw entries (addresses, dims, dtype code; the caller keeps the contract of common.h); 0 = absent
    def_raw<&rms_norm_fwd_raw>(m, "rms_norm_fwd_raw",
            "rms_norm_fwd_raw(x, weight, out, rows, cols, dtype, eps, /)\n--\n\n"
            "rms_norm_fwd on raw addresses");
    def_raw<&add_rms_norm_fwd_raw>(m, "add_rms_norm_fwd_raw",
            "add_rms_norm_fwd_raw(x, residual, weight, out, residual_out, rows, cols, dtype, eps, /)\n--\n\n"
            "add_rms_norm_fwd on raw addresses");
    def_raw<&rms_norm_bwd_raw>(m, "rms_norm_bwd_raw",
            "rms_norm_bwd_raw(grad, x, weight, grad_x, grad_weight, rows, cols, dtype, eps, /)\n--\n\n"
            "rms_norm_bwd on raw addresses (grad_weight float32)");
    def_raw<&layer_norm_fwd_raw>(m, "layer_norm_fwd_raw",
            "layer_norm_fwd_raw(x, residual, weight, bias, out, residual_out, rows, cols, dtype, eps, /)\n--\n\n"
            "layer_norm_fwd on raw addresses (residual, bias, residual_out: 0 = none)");
    def_raw<&layer_norm_bwd_raw>(m, "layer_norm_bwd_raw",
            "layer_norm_bwd_raw(grad, grad_residual_out, x, weight, grad_x, grad_weight, grad_bias, rows, "
            "cols, dtype, eps, /)\n--\n\n"
            "layer_norm_bwd on raw addresses (grad_residual_out, grad_bias: 0 = none; weight/bias grads float32)");
}

}  // namespace hal
