// The raw entries' binding: a C function with METH_FASTCALL over `void f(A...)`, positional
// arguments only.  pybind11's general dispatcher (overloads, keyword matching, a vector of handles
// per call) costs ~0.3-0.5 us for the 5-14 scalar arguments of a raw entry; this converts each
// argument with one C-API call.  Arguments: std::uintptr_t and int64_t / int from Python ints
// (anything with __index__), double from a float or an int, bool from a bool.  C++ exceptions map
// as pybind11 maps them: std::invalid_argument and std::domain_error to ValueError, std::bad_alloc
// to MemoryError, a pybind11 error_already_set to itself, anything else to RuntimeError.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace hal {
namespace fastcall {

inline bool arg(PyObject* o, std::uintptr_t* out) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
    *out = static_cast<std::uintptr_t>(v);
    return true;
}

inline bool arg(PyObject* o, int64_t* out) {
    const long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return false;
    *out = static_cast<int64_t>(v);
    return true;
}

inline bool arg(PyObject* o, int* out) {
    const long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return false;
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
        PyErr_SetString(PyExc_OverflowError, "argument does not fit a C int");
        return false;
    }
    *out = static_cast<int>(v);
    return true;
}

inline bool arg(PyObject* o, double* out) {
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) return false;
    *out = v;
    return true;
}

inline bool arg(PyObject* o, bool* out) {
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a bool, got %s", Py_TYPE(o)->tp_name);
        return false;
    }
    *out = o == Py_True;
    return true;
}

inline void raise_current() {
    try {
        throw;
    } catch (pybind11::error_already_set& e) {
        e.restore();
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::domain_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
    }
}

template <auto F>
struct Entry;

template <class... A, void (*F)(A...)>
struct Entry<F> {
    template <size_t... I>
    static bool convert(PyObject* const* args, std::tuple<A...>& vals, std::index_sequence<I...>) {
        return (arg(args[I], &std::get<I>(vals)) && ...);
    }

    static PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
        if (nargs != static_cast<Py_ssize_t>(sizeof...(A))) {
            PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments (%zd given)",
                         PyUnicode_AsUTF8(self), static_cast<int>(sizeof...(A)), nargs);
            return nullptr;
        }
        std::tuple<A...> vals;
        if (!convert(args, vals, std::index_sequence_for<A...>{})) return nullptr;
        try {
            std::apply(F, vals);
        } catch (...) {
            raise_current();
            return nullptr;
        }
        Py_RETURN_NONE;
    }
};

}  // namespace fastcall

// Adds `name` to m: F through fastcall::Entry.  `doc` starts with the signature line
// ("name(a, b, /)\n--\n\n...") that inspect.signature reads.
template <auto F>
void def_raw(pybind11::module_& m, const char* name, const char* doc) {
    static PyMethodDef def = {
        name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(&fastcall::Entry<F>::call)), METH_FASTCALL,
        doc};
    PyObject* self = PyUnicode_FromString(name);  // the function's self: its name, for the arity error
    if (self == nullptr) throw pybind11::error_already_set();
    PyObject* fn = PyCFunction_NewEx(&def, self, m.attr("__name__").ptr());
    Py_DECREF(self);
    if (fn == nullptr) throw pybind11::error_already_set();
    m.add_object(name, pybind11::reinterpret_steal<pybind11::object>(fn));
}

}  // namespace hal
