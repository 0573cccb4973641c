// Detection ops: greedy non-maximum suppression and RoIAlign (forward and backward),
// following torchvision's definitions (boxes x1, y1, x2, y2; rois (K, 5) with the batch
// index first; bilinear sampling with an adaptive grid when sampling_ratio <= 0).
#include "common.h"
#include "fastcall.h"

#include <algorithm>
#include <numeric>

namespace hal {
namespace {

py::array_t<int64_t> nms(py::array_t<double, py::array::c_style | py::array::forcecast> boxes,
                         py::array_t<double, py::array::c_style | py::array::forcecast> scores,
                         double iou_threshold) {
    const char* op = "nms";
    check_ndim(boxes, 2, op, "boxes");
    const int64_t n = boxes.shape(0);
    if (boxes.shape(1) != 4) throw std::invalid_argument("nms: boxes has shape " + shape_str(boxes) +
                                                         ", expected (N, 4) as (x1, y1, x2, y2)");
    check_shape(scores, {n}, op, "scores");
    const double* b = boxes.data();
    const double* s = scores.data();
    std::vector<int64_t> keep;
    {
        py::gil_scoped_release nogil;
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return s[i] > s[j]; });
        std::vector<double> area(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) area[i] = (b[4 * i + 2] - b[4 * i]) * (b[4 * i + 3] - b[4 * i + 1]);
        std::vector<char> gone(static_cast<size_t>(n), 0);
        for (int64_t a = 0; a < n; ++a) {
            const int64_t i = order[a];
            if (gone[i]) continue;
            keep.push_back(i);
            // about 8 values read per candidate box (its 4 coordinates, area, order, gone)
#pragma omp parallel for schedule(static) if (use_parallel((n - a - 1) * 8))
            for (int64_t c = a + 1; c < n; ++c) {
                const int64_t j = order[c];
                if (gone[j]) continue;
                const double w = std::max(0.0, std::min(b[4 * i + 2], b[4 * j + 2]) - std::max(b[4 * i], b[4 * j]));
                const double h = std::max(0.0, std::min(b[4 * i + 3], b[4 * j + 3]) - std::max(b[4 * i + 1], b[4 * j + 1]));
                const double inter = w * h;
                if (inter / (area[i] + area[j] - inter) > iou_threshold) gone[j] = 1;
            }
        }
    }
    py::array_t<int64_t> out(static_cast<py::ssize_t>(keep.size()));
    std::copy(keep.begin(), keep.end(), out.mutable_data());
    return out;
}

struct RoiGeom {
    int64_t batch;
    float start_h, start_w, bin_h, bin_w;
    int64_t grid_h, grid_w;
};

inline RoiGeom roi_geom(const float* r, float scale, int64_t ph, int64_t pw, int64_t sampling, bool aligned) {
    const float off = aligned ? 0.5f : 0.0f;
    RoiGeom g;
    g.batch = static_cast<int64_t>(r[0]);
    g.start_w = r[1] * scale - off;
    g.start_h = r[2] * scale - off;
    float roi_w = r[3] * scale - off - g.start_w;
    float roi_h = r[4] * scale - off - g.start_h;
    if (!aligned) {
        roi_w = std::max(roi_w, 1.0f);
        roi_h = std::max(roi_h, 1.0f);
    }
    g.bin_h = roi_h / static_cast<float>(ph);
    g.bin_w = roi_w / static_cast<float>(pw);
    g.grid_h = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(roi_h / static_cast<float>(ph)));
    g.grid_w = sampling > 0 ? sampling : static_cast<int64_t>(std::ceil(roi_w / static_cast<float>(pw)));
    return g;
}

// Bilinear weights of (y, x) in an H x W plane; false when the point lies outside.
inline bool bilinear(float y, float x, int64_t H, int64_t W, int64_t idx[4], float wt[4]) {
    if (y < -1.0f || y > static_cast<float>(H) || x < -1.0f || x > static_cast<float>(W)) return false;
    y = std::max(y, 0.0f);
    x = std::max(x, 0.0f);
    int64_t yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x), yh, xh;
    if (yl >= H - 1) { yh = yl = H - 1; y = static_cast<float>(yl); } else { yh = yl + 1; }
    if (xl >= W - 1) { xh = xl = W - 1; x = static_cast<float>(xl); } else { xh = xl + 1; }
    const float ly = y - static_cast<float>(yl), lx = x - static_cast<float>(xl);
    const float hy = 1.0f - ly, hx = 1.0f - lx;
    idx[0] = yl * W + xl; idx[1] = yl * W + xh; idx[2] = yh * W + xl; idx[3] = yh * W + xh;
    wt[0] = hy * hx; wt[1] = hy * lx; wt[2] = ly * hx; wt[3] = ly * lx;
    return true;
}

// Every box's batch index is an integer in [0, batch): checked by both bindings, since a bad one
// would read outside the input.
void check_roi_batches(const float* r, int64_t K, int64_t batch, const char* op) {
    for (int64_t k = 0; k < K; ++k) {
        const float bi = r[5 * k];
        if (!(bi >= 0.0f) || bi >= static_cast<float>(batch) || bi != std::floor(bi))
            throw std::invalid_argument(std::string(op) + ": boxes[" + std::to_string(k) + "] has batch index " +
                                        std::to_string(bi) + ", but the input holds " + std::to_string(batch) +
                                        " images");
    }
}

void check_rois(const py::array& rois, int64_t batch, const char* op) {
    check_f32(rois, op, "boxes", false);
    check_ndim(rois, 2, op, "boxes");
    if (rois.shape(1) != 5)
        throw std::invalid_argument(std::string(op) + ": boxes has shape " + shape_str(rois) +
                                    ", expected (K, 5) as (batch_index, x1, y1, x2, y2)");
    check_roi_batches(cptr<float>(rois), rois.shape(0), batch, op);
}


// Shapes of a RoIAlign call: input (N, C, H, W), boxes (K, 5), pooled (K, C, PH, PW).
struct RoiShape {
    int64_t N, C, H, W, K, PH, PW;
};

struct RoiParams {
    float scale;
    int64_t sampling;
    bool aligned;
};

// The bodies both bindings call, with the GIL released; the boxes' batch indices are checked.
void roi_align_fwd_run(DType dt, const void* input, const float* rp, void* out, const RoiShape& s,
                       const RoiParams& a) {
    const int64_t C = s.C, H = s.H, W = s.W, K = s.K, PH = s.PH, PW = s.PW;
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* ip = static_cast<const T*>(input);
        T* op_ = static_cast<T*>(out);
        // at least the 4 bilinear taps of one sample per pooled element
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (use_parallel(K * C * PH * PW * 4))
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t c = 0; c < C; ++c) {
                const RoiGeom g = roi_geom(rp + 5 * k, a.scale, PH, PW, a.sampling, a.aligned);
                const T* plane = ip + (g.batch * C + c) * H * W;
                T* o = op_ + (k * C + c) * PH * PW;
                const float count = static_cast<float>(std::max<int64_t>(g.grid_h * g.grid_w, 1));
                int64_t idx[4];
                float wt[4];
                for (int64_t ph = 0; ph < PH; ++ph) {
                    for (int64_t pw = 0; pw < PW; ++pw) {
                        float acc = 0.0f;
                        for (int64_t iy = 0; iy < g.grid_h; ++iy) {
                            const float y = g.start_h + ph * g.bin_h + (iy + 0.5f) * g.bin_h / g.grid_h;
                            for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                                const float x = g.start_w + pw * g.bin_w + (ix + 0.5f) * g.bin_w / g.grid_w;
                                if (!bilinear(y, x, H, W, idx, wt)) continue;
                                for (int q = 0; q < 4; ++q) acc += wt[q] * load(plane, idx[q]);
                            }
                        }
                        store(o, ph * PW + pw, acc / count);
                    }
                }
            }
        }
    });
}

// grad_input (float32, N, C, H, W) = scatter of grad (K, C, PH, PW) through the same weights
void roi_align_bwd_run(DType dt, const void* grad, const float* rp, float* gi, const RoiShape& s,
                       const RoiParams& a) {
    const int64_t N = s.N, C = s.C, H = s.H, W = s.W, K = s.K, PH = s.PH, PW = s.PW;
    dispatch(dt, [&](auto tag) {
        using T = decltype(tag);
        const T* gp = static_cast<const T*>(grad);
        std::fill(gi, gi + N * C * H * W, 0.0f);
        // each channel plane is written by one thread only, boxes in order: parallel over channels,
        // and the sums are the same for any thread count
#pragma omp parallel for schedule(static) if (use_parallel(K * C * PH * PW * 4))
        for (int64_t c = 0; c < C; ++c) {
            int64_t idx[4];
            float wt[4];
            for (int64_t k = 0; k < K; ++k) {
                const RoiGeom g = roi_geom(rp + 5 * k, a.scale, PH, PW, a.sampling, a.aligned);
                float* plane = gi + (g.batch * C + c) * H * W;
                const T* go = gp + (k * C + c) * PH * PW;
                const float count = static_cast<float>(std::max<int64_t>(g.grid_h * g.grid_w, 1));
                for (int64_t ph = 0; ph < PH; ++ph) {
                    for (int64_t pw = 0; pw < PW; ++pw) {
                        const float gv = load(go, ph * PW + pw) / count;
                        for (int64_t iy = 0; iy < g.grid_h; ++iy) {
                            const float y = g.start_h + ph * g.bin_h + (iy + 0.5f) * g.bin_h / g.grid_h;
                            for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                                const float x = g.start_w + pw * g.bin_w + (ix + 0.5f) * g.bin_w / g.grid_w;
                                if (!bilinear(y, x, H, W, idx, wt)) continue;
                                for (int q = 0; q < 4; ++q) plane[idx[q]] += gv * wt[q];
                            }
                        }
                    }
                }
            }
        }
    });
}

void roi_align_fwd(py::array input, py::array rois, py::array out, double spatial_scale, int64_t sampling_ratio,
                   bool aligned) {
    const char* op = "roi_align";
    check_contiguous(input, op, "input");
    check_ndim(input, 4, op, "input");
    const DType dt = dtype_of(input, op, "input");
    const int64_t N = input.shape(0), C = input.shape(1), H = input.shape(2), W = input.shape(3);
    check_rois(rois, N, op);
    const int64_t K = rois.shape(0);
    check_output(out, dt, op, "out");
    check_ndim(out, 4, op, "out");
    const int64_t PH = out.shape(2), PW = out.shape(3);
    check_shape(out, {K, C, PH, PW}, op, "out");
    py::gil_scoped_release nogil;
    roi_align_fwd_run(dt, input.data(), cptr<float>(rois), out.mutable_data(), {N, C, H, W, K, PH, PW},
                      {static_cast<float>(spatial_scale), sampling_ratio, aligned});
}

void roi_align_bwd(py::array grad, py::array rois, py::array grad_input, double spatial_scale,
                   int64_t sampling_ratio, bool aligned) {
    const char* op = "roi_align_backward";
    check_contiguous(grad, op, "grad");
    check_ndim(grad, 4, op, "grad");
    const DType dt = dtype_of(grad, op, "grad");
    const int64_t K = grad.shape(0), C = grad.shape(1), PH = grad.shape(2), PW = grad.shape(3);
    check_f32(grad_input, op, "grad_input", true);
    check_ndim(grad_input, 4, op, "grad_input");
    const int64_t N = grad_input.shape(0), H = grad_input.shape(2), W = grad_input.shape(3);
    if (grad_input.shape(1) != C)
        throw std::invalid_argument("roi_align_backward: grad_input has " + std::to_string(grad_input.shape(1)) +
                                    " channels, grad has " + std::to_string(C));
    check_rois(rois, N, op);
    check_shape(rois, {K, 5}, op, "boxes");
    py::gil_scoped_release nogil;
    roi_align_bwd_run(dt, grad.data(), cptr<float>(rois), mptr<float>(grad_input), {N, C, H, W, K, PH, PW},
                      {static_cast<float>(spatial_scale), sampling_ratio, aligned});
}

// ---- raw entries: addresses from Tensor.data_ptr(); the caller keeps the contract of common.h.
// boxes: float32 (K, 5); input/out (fwd) and grad (bwd) of the dtype code; grad_input float32.
using addr = std::uintptr_t;

void roi_align_fwd_raw(addr input, addr rois, addr out, int64_t N, int64_t C, int64_t H, int64_t W, int64_t K,
                       int64_t PH, int64_t PW, int dtype, double spatial_scale, int64_t sampling_ratio,
                       bool aligned) {
    const char* op = "roi_align";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({N, C, H, W, K, PH, PW}, op);
    const void* ip = raw_ptr(input, op, "input");
    const float* rp = static_cast<const float*>(raw_ptr(rois, op, "boxes"));
    void* outp = raw_ptr(out, op, "out");
    check_roi_batches(rp, K, N, op);
    py::gil_scoped_release nogil;
    roi_align_fwd_run(dt, ip, rp, outp, {N, C, H, W, K, PH, PW}, {static_cast<float>(spatial_scale), sampling_ratio,
                                                                  aligned});
}

void roi_align_bwd_raw(addr grad, addr rois, addr grad_input, int64_t N, int64_t C, int64_t H, int64_t W,
                       int64_t K, int64_t PH, int64_t PW, int dtype, double spatial_scale, int64_t sampling_ratio,
                       bool aligned) {
    const char* op = "roi_align_backward";
    const DType dt = dtype_from_code(dtype, op);
    check_dims({N, C, H, W, K, PH, PW}, op);
    const void* gp = raw_ptr(grad, op, "grad");
    const float* rp = static_cast<const float*>(raw_ptr(rois, op, "boxes"));
    float* gi = static_cast<float*>(raw_ptr(grad_input, op, "grad_input"));
    check_roi_batches(rp, K, N, op);
    py::gil_scoped_release nogil;
    roi_align_bwd_run(dt, gp, rp, gi, {N, C, H, W, K, PH, PW}, {static_cast<float>(spatial_scale), sampling_ratio,
                                                               aligned});
}

}  // namespace

void register_vision(py::module_& m) {
    m.def("nms", &nms, py::arg("boxes"), py::arg("scores"), py::arg("iou_threshold"),
          "Greedy NMS; returns kept indices (int64) by decreasing score");
    m.def("roi_align_fwd", &roi_align_fwd, py::arg("input"), py::arg("boxes"), py::arg("out"),
          py::arg("spatial_scale"), py::arg("sampling_ratio"), py::arg("aligned"),
          "RoIAlign of (N, C, H, W) input over float32 boxes (K, 5) into out (K, C, PH, PW)");
    m.def("roi_align_bwd", &roi_align_bwd, py::arg("grad"), py::arg("boxes"), py::arg("grad_input"),
          py::arg("spatial_scale"), py::arg("sampling_ratio"), py::arg("aligned"),
          "RoIAlign backward into a float32 grad_input (N, C, H, W)");
    def_raw<&roi_align_fwd_raw>(m, "roi_align_fwd_raw",
            "roi_align_fwd_raw(input, boxes, out, N, C, H, W, K, PH, PW, dtype, spatial_scale, "
            "sampling_ratio, aligned, /)\n--\n\n"
            "roi_align_fwd on raw addresses");
    def_raw<&roi_align_bwd_raw>(m, "roi_align_bwd_raw",
            "roi_align_bwd_raw(grad, boxes, grad_input, N, C, H, W, K, PH, PW, dtype, spatial_scale, "
            "sampling_ratio, aligned, /)\n--\n\n"
            "roi_align_bwd on raw addresses (grad_input float32)");
}

}  // namespace hal
