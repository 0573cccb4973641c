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

void adamw_step(std::vector<py::array> params, std::vector<py::array> grads, std::vector<py::array> exp_avgs,
                std::vector<py::array> exp_avg_sqs, double lr, double beta1, double beta2, double eps,
                double weight_decay, double step, bool maximize) {
    const char* op = "fused_adamw";
    const size_t n = params.size();
    if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n)
        throw std::invalid_argument("fused_adamw: params, grads, exp_avgs and exp_avg_sqs must have the same "
                                    "length (got " + std::to_string(n) + ", " + std::to_string(grads.size()) +
                                    ", " + std::to_string(exp_avgs.size()) + ", " +
                                    std::to_string(exp_avg_sqs.size()) + ")");
    if (step < 1) throw std::invalid_argument("fused_adamw: step must be >= 1 (it counts this update)");
    std::vector<DType> dts(n);
    std::vector<Chunk> chunks;
    constexpr int64_t kChunk = 1 << 15;
    for (size_t t = 0; t < n; ++t) {
        const std::string idx = "[" + std::to_string(t) + "]";
        check_contiguous(params[t], op, ("params" + idx).c_str());
        dts[t] = dtype_of(params[t], op, ("params" + idx).c_str());
        check_output(params[t], dts[t], op, ("params" + idx).c_str());
        check_input(grads[t], dts[t], op, ("grads" + idx).c_str());
        check_output(exp_avgs[t], dts[t], op, ("exp_avgs" + idx).c_str());
        check_output(exp_avg_sqs[t], dts[t], op, ("exp_avg_sqs" + idx).c_str());
        const int64_t size = params[t].size();
        if (grads[t].size() != size || exp_avgs[t].size() != size || exp_avg_sqs[t].size() != size)
            throw std::invalid_argument("fused_adamw: tensors " + idx + " differ in size");
        for (int64_t b = 0; b < size; b += kChunk) chunks.push_back({t, b, std::min(size, b + kChunk)});
    }
    // scalars exactly as torch turns them into float32 operands
    const float decay = static_cast<float>(1.0 - lr * weight_decay);
    const float w1 = static_cast<float>(1.0 - beta1);
    const float b2 = static_cast<float>(beta2);
    const float one_minus_b2 = static_cast<float>(1.0 - beta2);
    const double bc1 = 1.0 - std::pow(beta1, step);
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
    const float neg_step = static_cast<float>(-(lr / bc1));
    const float feps = static_cast<float>(eps);
    std::vector<void*> pp(n), mp(n), vp(n);
    std::vector<const void*> gp(n);
    for (size_t t = 0; t < n; ++t) {
        pp[t] = params[t].mutable_data();
        mp[t] = exp_avgs[t].mutable_data();
        vp[t] = exp_avg_sqs[t].mutable_data();
        gp[t] = grads[t].data();
    }
    py::gil_scoped_release nogil;
    const int64_t nchunks = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t k = 0; k < nchunks; ++k) {
        const Chunk& c = chunks[static_cast<size_t>(k)];
        dispatch(dts[c.t], [&](auto tag) {
            using T = decltype(tag);
            adamw_chunk(static_cast<T*>(pp[c.t]), static_cast<const T*>(gp[c.t]), static_cast<T*>(mp[c.t]),
                        static_cast<T*>(vp[c.t]), c.begin, c.end, decay, w1, b2, one_minus_b2, bc2_sqrt, feps,
                        neg_step, maximize);
        });
    }
}

}  // namespace

void register_adamw(py::module_& m) {
    m.def("adamw_step", &adamw_step, py::arg("params"), py::arg("grads"), py::arg("exp_avgs"),
          py::arg("exp_avg_sqs"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
          py::arg("weight_decay"), py::arg("step"), py::arg("maximize") = false,
          "One AdamW step over lists of tensors, in place (step counts this update, from 1)");
}

}  // namespace hal
