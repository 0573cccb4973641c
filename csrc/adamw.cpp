// Multi-tensor AdamW step, arithmetic in the order of torch.optim.AdamW's single-tensor
// path (decoupled weight decay, lerp for the first moment), so that results match it
// step for step.  All tensors of one list entry share one dtype; work is split into
// chunks across tensors so that many small parameters still use every thread.
#include "common.h"

#include <algorithm>

namespace hal {
namespace {

struct Chunk { size_t t; int64_t begin, end; };

template <class T>
void adamw_chunk(T* p, const T* g, T* m, T* v, int64_t b, int64_t e, float decay, float w1, float b2,
                 float one_minus_b2, float bc2_sqrt, float eps, float neg_step, bool maximize) {
    const bool small_w = std::fabs(w1) < 0.5f;
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
        float gv = load(g, i);
        if (maximize) gv = -gv;
        float pv = load(p, i) * decay;
        float mv = load(m, i);
        mv = small_w ? mv + w1 * (gv - mv) : gv - (gv - mv) * (1.0f - w1);
        float vv = load(v, i) * b2;
        vv = vv + one_minus_b2 * gv * gv;
        const float denom = std::sqrt(vv) / bc2_sqrt + eps;
        pv = pv + neg_step * mv / denom;
        store(p, i, pv);
        store(m, i, mv);
        store(v, i, vv);
    }
}

// One tensor of the step: four buffers of `size` elements of dtype dt.
struct AdamwBuffers {
    DType dt;
    void* p;
    const void* g;
    void* m;
    void* v;
    int64_t size;
};

struct AdamwScalars {
    double lr, beta1, beta2, eps, weight_decay, step;
    bool maximize;
};

void check_adamw_lengths(size_t n, size_t grads, size_t exp_avgs, size_t exp_avg_sqs) {
    if (grads != n || exp_avgs != n || exp_avg_sqs != n)
        throw std::invalid_argument("fused_adamw: params, grads, exp_avgs and exp_avg_sqs must have the same "
                                    "length (got " + std::to_string(n) + ", " + std::to_string(grads) +
                                    ", " + std::to_string(exp_avgs) + ", " + std::to_string(exp_avg_sqs) + ")");
}

void check_adamw_step(double step) {
    if (step < 1) throw std::invalid_argument("fused_adamw: step must be >= 1 (it counts this update)");
}

// The body both bindings call, with the GIL released.
void adamw_run(const std::vector<AdamwBuffers>& ts, const AdamwScalars& a) {
    std::vector<Chunk> chunks;
    constexpr int64_t kChunk = 1 << 15;
    int64_t total = 0;
    for (size_t t = 0; t < ts.size(); ++t) {
        for (int64_t b = 0; b < ts[t].size; b += kChunk) chunks.push_back({t, b, std::min(ts[t].size, b + kChunk)});
        total += ts[t].size;
    }
    // scalars exactly as torch turns them into float32 operands
    const float decay = static_cast<float>(1.0 - a.lr * a.weight_decay);
    const float w1 = static_cast<float>(1.0 - a.beta1);
    const float b2 = static_cast<float>(a.beta2);
    const float one_minus_b2 = static_cast<float>(1.0 - a.beta2);
    const double bc1 = 1.0 - std::pow(a.beta1, a.step);
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(a.beta2, a.step)));
    const float neg_step = static_cast<float>(-(a.lr / bc1));
    const float feps = static_cast<float>(a.eps);
    const bool maximize = a.maximize;
    const int64_t nchunks = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(dynamic, 4) if (use_parallel(total))
    for (int64_t k = 0; k < nchunks; ++k) {
        const Chunk& c = chunks[static_cast<size_t>(k)];
        const AdamwBuffers& b = ts[c.t];
        dispatch(b.dt, [&](auto tag) {
            using T = decltype(tag);
            adamw_chunk(static_cast<T*>(b.p), static_cast<const T*>(b.g), static_cast<T*>(b.m),
                        static_cast<T*>(b.v), c.begin, c.end, decay, w1, b2, one_minus_b2, bc2_sqrt, feps,
                        neg_step, maximize);
        });
    }
}

void adamw_step(std::vector<py::array> params, std::vector<py::array> grads, std::vector<py::array> exp_avgs,
                std::vector<py::array> exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                double weight_decay, double step, bool maximize) {
    const char* op = "fused_adamw";
    const size_t n = params.size();
    check_adamw_lengths(n, grads.size(), exp_avgs.size(), exp_avg_sqs.size());
    check_adamw_step(step);
    std::vector<AdamwBuffers> ts(n);
    for (size_t t = 0; t < n; ++t) {
        const std::string idx = "[" + std::to_string(t) + "]";
        check_contiguous(params[t], op, ("params" + idx).c_str());
        const DType dt = dtype_of(params[t], op, ("params" + idx).c_str());
        check_output(params[t], dt, op, ("params" + idx).c_str());
        check_input(grads[t], dt, op, ("grads" + idx).c_str());
        check_output(exp_avgs[t], dt, op, ("exp_avgs" + idx).c_str());
        check_output(exp_avg_sqs[t], dt, op, ("exp_avg_sqs" + idx).c_str());
        const int64_t size = params[t].size();
        if (grads[t].size() != size || exp_avgs[t].size() != size || exp_avg_sqs[t].size() != size)
            throw std::invalid_argument("fused_adamw: tensors " + idx + " differ in size");
        ts[t] = {dt, params[t].mutable_data(), grads[t].data(), exp_avgs[t].mutable_data(),
                 exp_avg_sqs[t].mutable_data(), size};
    }
    py::gil_scoped_release nogil;
    adamw_run(ts, {lr, beta1, beta2, eps, weight_decay, step, maximize});
}

// adamw_step on raw addresses: entry t of each list is a buffer of sizes[t] elements of dtype code
// dtypes[t] (the caller keeps the contract of common.h)
void adamw_step_raw(std::vector<std::uintptr_t> params, std::vector<std::uintptr_t> grads,
                    std::vector<std::uintptr_t> exp_avgs, std::vector<std::uintptr_t> exp_avg_sqs,
                    std::vector<int64_t> sizes, std::vector<int> dtypes, double lr, double beta1, double beta2,
                    double eps, double weight_decay, double step, bool maximize) {
    const char* op = "fused_adamw";
    const size_t n = params.size();
    check_adamw_lengths(n, grads.size(), exp_avgs.size(), exp_avg_sqs.size());
    if (sizes.size() != n || dtypes.size() != n)
        throw std::invalid_argument("fused_adamw: sizes and dtypes must have one entry per parameter");
    check_adamw_step(step);
    std::vector<AdamwBuffers> ts(n);
    for (size_t t = 0; t < n; ++t) {
        check_dims({sizes[t]}, op);
        ts[t] = {dtype_from_code(dtypes[t], op), raw_ptr(params[t], op, "params"), raw_ptr(grads[t], op, "grads"),
                 raw_ptr(exp_avgs[t], op, "exp_avgs"), raw_ptr(exp_avg_sqs[t], op, "exp_avg_sqs"), sizes[t]};
    }
    py::gil_scoped_release nogil;
    adamw_run(ts, {lr, beta1, beta2, eps, weight_decay, step, maximize});
}

}  // namespace

void register_adamw(py::module_& m) {
    m.def("adamw_step", &adamw_step, py::arg("params"), py::arg("grads"), py::arg("exp_avgs"),
          py::arg("exp_avg_sqs"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
          py::arg("weight_decay"), py::arg("step"), py::arg("maximize") = false,
          "One AdamW step over lists of tensors, in place (step counts this update, from 1)");
    m.def("adamw_step_raw", &adamw_step_raw, py::arg("params"), py::arg("grads"), py::arg("exp_avgs"),
          py::arg("exp_avg_sqs"), py::arg("sizes"), py::arg("dtypes"), py::arg("lr"), py::arg("beta1"),
          py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"), py::arg("maximize") = false,
          "adamw_step on lists of raw addresses, with each entry's size and dtype code");
}

}  // namespace hal
