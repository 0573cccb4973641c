// The way into a hal.ops operator in eager code, as a C type with vectorcall: hal/ops/_boundary.py's
// `Op.__call__` (the Python entry, which remains where this module is not built or Python is older
// than 3.11) costs 0.8-1.8 us a call in frames, argument packing and attribute lookups -- as much as
// a decode-sized kernel.  This costs a few guard calls and a type test per argument (0.4-0.7 us).
//
// OpEntry(custom, impl, grad_call, guards, plain, tensor_type, name)
//     A call with any guard answering true (a zero-argument callable: tracing, a dispatch mode, ...)
//     or any tensor argument (directly or inside a list / tuple argument) whose type is not exactly
//     one of `plain` goes to `custom` (the torch.library custom op).  Otherwise a call where some
//     tensor requires grad goes to `grad_call` (Python: the autograd route), and the rest to `impl`
//     (the implementation, directly).  Arguments are passed on unchanged.
//
// Like the Python Op it does not bind as a method; it carries a __dict__ and weak references and
// takes part in garbage collection.
#include "callable_type.h"
#include "common.h"

#include <structmember.h>

#include <utility>

namespace py = pybind11;

#if PY_VERSION_HEX >= 0x030B0000
#define HAL_OP_ENTRY 1
#endif

#ifdef HAL_OP_ENTRY
namespace {

PyObject* s_requires_grad = nullptr;  // "requires_grad"

struct OpEntry {
    hal::Callable base;
    PyObject* custom;
    PyObject* impl;
    PyObject* grad_call;
    PyObject* guards;  // tuple of zero-argument callables
    PyObject* plain;   // tuple of types
    PyObject* tensor_type;
    PyObject* name;
};

enum Route { IMPL = 0, GRAD = 1, CUSTOM = 2, FAILED = -1 };

// IMPL, GRAD (a plain tensor that requires grad), CUSTOM (another tensor type) or FAILED
int classify(OpEntry* self, PyObject* a, bool* grad) {
    PyTypeObject* t = Py_TYPE(a);
    if (!PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(self->tensor_type))) return IMPL;
    bool plain = false;
    const Py_ssize_t n = PyTuple_GET_SIZE(self->plain);
    for (Py_ssize_t i = 0; i < n && !plain; ++i)
        plain = reinterpret_cast<PyObject*>(t) == PyTuple_GET_ITEM(self->plain, i);
    if (!plain) return CUSTOM;
    if (!*grad) {
        PyObject* rg = PyObject_GetAttr(a, s_requires_grad);
        if (rg == nullptr) return FAILED;
        *grad = rg == Py_True;
        Py_DECREF(rg);
    }
    return IMPL;
}

int route(OpEntry* self, PyObject* const* args, Py_ssize_t total) {
    const Py_ssize_t ng = PyTuple_GET_SIZE(self->guards);
    for (Py_ssize_t i = 0; i < ng; ++i) {
        PyObject* r = PyObject_CallNoArgs(PyTuple_GET_ITEM(self->guards, i));
        if (r == nullptr) return FAILED;
        const int on = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (on < 0) return FAILED;
        if (on) return CUSTOM;
    }
    bool grad = false;
    for (Py_ssize_t i = 0; i < total; ++i) {
        PyObject* a = args[i];
        int r;
        if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
            const bool list = PyList_CheckExact(a);
            const Py_ssize_t n = list ? PyList_GET_SIZE(a) : PyTuple_GET_SIZE(a);
            for (Py_ssize_t j = 0; j < n; ++j) {
                r = classify(self, list ? PyList_GET_ITEM(a, j) : PyTuple_GET_ITEM(a, j), &grad);
                if (r != IMPL) return r;
            }
            continue;
        }
        r = classify(self, a, &grad);
        if (r != IMPL) return r;
    }
    return grad ? GRAD : IMPL;
}

PyObject* op_entry_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<OpEntry*>(op);
    const Py_ssize_t total = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    switch (route(self, args, total)) {
        case IMPL: return PyObject_Vectorcall(self->impl, args, nargsf, kwnames);
        case GRAD: return PyObject_Vectorcall(self->grad_call, args, nargsf, kwnames);
        case CUSTOM: return PyObject_Vectorcall(self->custom, args, nargsf, kwnames);
        default: return nullptr;
    }
}

PyObject* op_entry_repr(PyObject* op) {
    return PyUnicode_FromFormat("hal.ops OpEntry(%U)", reinterpret_cast<OpEntry*>(op)->name);
}

int op_entry_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<OpEntry*>(op);
    Py_VISIT(self->base.dict);
    Py_VISIT(self->custom);
    Py_VISIT(self->impl);
    Py_VISIT(self->grad_call);
    Py_VISIT(self->guards);
    Py_VISIT(self->plain);
    Py_VISIT(self->tensor_type);
    return 0;
}

int op_entry_clear(PyObject* op) {
    auto* self = reinterpret_cast<OpEntry*>(op);
    Py_CLEAR(self->base.dict);
    Py_CLEAR(self->custom);
    Py_CLEAR(self->impl);
    Py_CLEAR(self->grad_call);
    Py_CLEAR(self->guards);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->tensor_type);
    return 0;
}

void op_entry_dealloc(PyObject* op) {
    PyObject_GC_UnTrack(op);
    auto* self = reinterpret_cast<OpEntry*>(op);
    if (self->base.weakrefs != nullptr) PyObject_ClearWeakRefs(op);
    op_entry_clear(op);
    Py_CLEAR(self->name);
    Py_TYPE(op)->tp_free(op);
}

PyObject* op_entry_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"custom", "impl", "grad_call", "guards", "plain", "tensor_type", "name", nullptr};
    PyObject *custom, *impl, *grad_call, *guards, *plain, *tensor_type, *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!O!O!U:OpEntry", const_cast<char**>(kw), &custom, &impl,
                                     &grad_call, &PyTuple_Type, &guards, &PyTuple_Type, &plain, &PyType_Type,
                                     &tensor_type, &name))
        return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(plain); ++i) {
        if (!PyType_Check(PyTuple_GET_ITEM(plain, i))) {
            PyErr_SetString(PyExc_TypeError, "OpEntry: plain must be a tuple of types");
            return nullptr;
        }
    }
    auto* self = reinterpret_cast<OpEntry*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->base.vectorcall = op_entry_call;
    for (auto [slot, value] : {std::pair<PyObject**, PyObject*>{&self->custom, custom}, {&self->impl, impl},
                               {&self->grad_call, grad_call}, {&self->guards, guards}, {&self->plain, plain},
                               {&self->tensor_type, tensor_type}, {&self->name, name}}) {
        Py_INCREF(value);
        *slot = value;
    }
    return reinterpret_cast<PyObject*>(self);
}

PyMemberDef op_entry_members[] = {
    {"name", T_OBJECT_EX, offsetof(OpEntry, name), READONLY, "the operator's name (hal::<name>)"},
    {"custom", T_OBJECT_EX, offsetof(OpEntry, custom), READONLY, "the custom op: the traced route"},
    {"impl", T_OBJECT_EX, offsetof(OpEntry, impl), READONLY, "the implementation: the eager route"},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject make_op_entry_type() {
    PyTypeObject t = hal::make_callable_type(
        "hal._C.OpEntry",
        "OpEntry(custom, impl, grad_call, guards, plain, tensor_type, name): a hal.ops operator's entry "
        "(custom op when traced, direct call when eager), in C.",
        sizeof(OpEntry), op_entry_new, op_entry_dealloc, op_entry_traverse, op_entry_clear, nullptr, nullptr);
    t.tp_repr = op_entry_repr;
    t.tp_members = op_entry_members;
    return t;
}

PyTypeObject op_entry_type = make_op_entry_type();

}  // namespace
#endif

namespace hal {

void register_op_entry(py::module_& m) {
#ifdef HAL_OP_ENTRY
    s_requires_grad = PyUnicode_InternFromString("requires_grad");
    if (PyType_Ready(&op_entry_type) < 0) throw py::error_already_set();
    Py_INCREF(&op_entry_type);
    m.attr("OpEntry") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&op_entry_type));
#else
    (void)m;
#endif
}

}  // namespace hal
