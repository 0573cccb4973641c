// Shared helpers of the hal host kernels (the dtype tags and per-element math are in
// fmath.h): argument checks that raise Python errors, and the dtype dispatch.
//
// Buffers cross from Python in one of two ways, and both reach the same kernel body:
//
// * numpy arrays (torch tensors through .numpy()): float32, float16, and bfloat16 viewed as
//   int16/uint16 (numpy has no bfloat16).  These bindings (rms_norm_fwd, ...) check every
//   buffer's dtype, layout, writability and shape and raise TypeError / ValueError.
// * raw addresses (the *_raw bindings): Python ints from Tensor.data_ptr(), the dims, a dtype
//   code (DTYPE_CODES: 0 float32, 1 float16, 2 bfloat16) and the scalars.  They skip numpy and
//   the per-buffer checks; the CALLER guarantees that every address is that of a live,
//   C-contiguous CPU buffer of the kernel's dtype (float32 where the signature says so) and of
//   the shape the dims describe, that outputs are writable and do not overlap the inputs
//   (unless the numpy binding allows it), and that it keeps the buffers alive for the call.
//   Only the dtype code, the dims' signs and null required addresses are checked here.
//   hal.ops.host is that caller.
//
// Kernels compute in float (accumulate in double where rows are reduced) and convert per
// element in the inner loop, so a bf16/fp16 buffer is read once and never widened into a
// temporary.  Every parallel region is guarded by use_parallel() (parallel.h), and every
// reduction sums in an order fixed by the shape alone: results are bitwise the same serial or
// parallel, for any thread count.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "fmath.h"
#include "parallel.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace hal {

inline const char* dtype_name(DType d) {
    switch (d) {
        case DType::F32: return "float32";
        case DType::F16: return "float16";
        default: return "bfloat16";
    }
}

// ---- argument checks (std::invalid_argument -> ValueError, py::type_error -> TypeError)
inline DType dtype_of(const py::array& a, const char* op, const char* name) {
    const auto dt = a.dtype();
    const char kind = dt.kind();
    const auto size = dt.itemsize();
    if (kind == 'f' && size == 4) return DType::F32;
    if (kind == 'f' && size == 2) return DType::F16;
    if ((kind == 'i' || kind == 'u') && size == 2) return DType::BF16;
    throw py::type_error(std::string(op) + ": " + name + " has dtype " +
                         py::str(py::object(dt)).cast<std::string>() +
                         "; host kernels take float32, float16 or bfloat16 (as a 16-bit integer view); "
                         "cast the tensor first");
}

inline void check_contiguous(const py::array& a, const char* op, const char* name) {
    if (!(a.flags() & py::array::c_style))
        throw std::invalid_argument(std::string(op) + ": " + name +
                                    " is not C-contiguous; call .contiguous() first");
}

inline void check_writable(const py::array& a, const char* op, const char* name) {
    if (!a.writeable())
        throw std::invalid_argument(std::string(op) + ": output " + name + " is read-only");
}

inline void check_ndim(const py::array& a, py::ssize_t nd, const char* op, const char* name) {
    if (a.ndim() != nd)
        throw std::invalid_argument(std::string(op) + ": " + name + " must be " + std::to_string(nd) +
                                    "-D here, got " + std::to_string(a.ndim()) + "-D");
}

inline std::string shape_str(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

inline void check_shape(const py::array& a, std::vector<int64_t> want, const char* op, const char* name) {
    bool ok = a.ndim() == static_cast<py::ssize_t>(want.size());
    for (size_t i = 0; ok && i < want.size(); ++i) ok = a.shape(i) == want[i];
    if (!ok) {
        std::string w = "(";
        for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
        w += want.size() == 1 ? ",)" : ")";
        throw std::invalid_argument(std::string(op) + ": " + name + " has shape " + shape_str(a) +
                                    ", expected " + w);
    }
}

// An input buffer: contiguous, of one of the kernel dtypes, same dtype as the reference.
inline void check_input(const py::array& a, DType want, const char* op, const char* name) {
    check_contiguous(a, op, name);
    const DType got = dtype_of(a, op, name);
    if (got != want)
        throw py::type_error(std::string(op) + ": " + name + " is " + dtype_name(got) + " but x is " +
                             dtype_name(want) + "; cast it to the same dtype");
}

inline void check_output(const py::array& a, DType want, const char* op, const char* name) {
    check_input(a, want, op, name);
    check_writable(a, op, name);
}

// A float32 buffer (statistics, weight gradients, angle tables).
inline void check_f32(const py::array& a, const char* op, const char* name, bool writable) {
    check_contiguous(a, op, name);
    if (dtype_of(a, op, name) != DType::F32)
        throw py::type_error(std::string(op) + ": " + name + " must be float32");
    if (writable) check_writable(a, op, name);
}

// How a kernel uses one of its buffers.
enum class Use {
    In,      // read, in the kernel's dtype (that of x)
    Out,     // written, in the kernel's dtype
    F32Out,  // written, float32 whatever the kernel's dtype (weight and bias gradients)
};

// One buffer of a kernel, checked and returned: C-contiguous, of the dtype `use` asks for (dt,
// the kernel's, or float32), writable when written, and of shape `shape`.  The errors are those
// of check_input / check_output / check_f32 and then check_shape, in that order.
inline const py::array& checked(const py::array& a, Use use, DType dt, std::initializer_list<int64_t> shape,
                                const char* op, const char* name) {
    switch (use) {
        case Use::In: check_input(a, dt, op, name); break;
        case Use::Out: check_output(a, dt, op, name); break;
        case Use::F32Out: check_f32(a, op, name, true); break;
    }
    check_shape(a, shape, op, name);
    return a;
}

// ---- raw entries (see the contract at the top of this file)
inline DType dtype_from_code(int code, const char* op) {
    switch (code) {
        case 0: return DType::F32;
        case 1: return DType::F16;
        case 2: return DType::BF16;
        default:
            throw std::invalid_argument(std::string(op) + ": dtype code " + std::to_string(code) +
                                        " is none of 0 (float32), 1 (float16), 2 (bfloat16)");
    }
}

// Releases the GIL for the scope when the call touches more elements than the grain (parallel.h);
// a smaller call keeps it: dropping and taking it back costs 0.1-0.2 us, more than a decode-sized
// kernel, and no other thread gets far in the time such a kernel takes.
class ReleaseGil {
   public:
    explicit ReleaseGil(int64_t work) : state_(work > grain_size() ? PyEval_SaveThread() : nullptr) {}
    ~ReleaseGil() {
        if (state_ != nullptr) PyEval_RestoreThread(state_);
    }
    ReleaseGil(const ReleaseGil&) = delete;
    ReleaseGil& operator=(const ReleaseGil&) = delete;

   private:
    PyThreadState* state_;
};

// A required buffer address: refuses 0 (a null pointer) and returns it as a pointer.
inline void* raw_ptr(std::uintptr_t addr, const char* op, const char* name) {
    if (!addr) throw std::invalid_argument(std::string(op) + ": " + name + " is a null address");
    return reinterpret_cast<void*>(addr);
}
// An optional buffer address: 0 means absent (nullptr).
inline void* raw_opt(std::uintptr_t addr) { return reinterpret_cast<void*>(addr); }

inline void check_dims(std::initializer_list<int64_t> dims, const char* op) {
    for (int64_t d : dims)
        if (d < 0) throw std::invalid_argument(std::string(op) + ": a dimension is negative (" + std::to_string(d) + ")");
}

template <class T>
inline const T* cptr(const py::array& a) { return static_cast<const T*>(a.data()); }
template <class T>
inline T* mptr(py::array& a) { return static_cast<T*>(a.mutable_data()); }

// Call fn(T{}) with T the element type of dtype d.
template <class Fn>
inline void dispatch(DType d, Fn&& fn) {
    switch (d) {
        case DType::F32: fn(float{}); break;
        case DType::F16: fn(f16{}); break;
        case DType::BF16: fn(bf16{}); break;
    }
}

inline int max_threads() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// Topic registration, one per source file.
void register_norms(py::module_& m);
void register_rotary(py::module_& m);
void register_activations(py::module_& m);
void register_softmax(py::module_& m);
void register_adamw(py::module_& m);
void register_vision(py::module_& m);
void register_isa(py::module_& m);
void register_parallel(py::module_& m);
void register_redirect_calls(py::module_& m);
void register_op_entry(py::module_& m);

}  // namespace hal
