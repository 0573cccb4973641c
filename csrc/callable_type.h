// The C callables of hal._C (the shim's wrappers in redirect_calls.cpp, hal.ops' OpEntry in
// op_entry.cpp): objects called through vectorcall that carry a __dict__ (functools.update_wrapper,
// attributes set from Python) and weak references, and take part in garbage collection.
#pragma once

#include <Python.h>

#include <cstddef>

namespace hal {

// The head every such object starts with.
struct Callable {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject* dict;
    PyObject* weakrefs;
};

inline PyGetSetDef* callable_dict_getset() {
    static PyGetSetDef getset[] = {
        {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr},
    };
    return getset;
}

// A type of objects that start with a Callable.  `descr_get` (nullable): how it binds as an attribute
// of a class (with Py_TPFLAGS_METHOD_DESCRIPTOR when given, as Python functions); `methods` nullable.
inline PyTypeObject make_callable_type(const char* name, const char* doc, Py_ssize_t size, newfunc tp_new,
                                       destructor dealloc, traverseproc traverse, inquiry clear,
                                       descrgetfunc descr_get, PyMethodDef* methods) {
    PyTypeObject t = {PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = name;
    t.tp_doc = doc;
    t.tp_basicsize = size;
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
    if (descr_get != nullptr) t.tp_flags |= Py_TPFLAGS_METHOD_DESCRIPTOR;
    t.tp_new = tp_new;
    t.tp_dealloc = dealloc;
    t.tp_traverse = traverse;
    t.tp_clear = clear;
    t.tp_call = PyVectorcall_Call;
    t.tp_vectorcall_offset = offsetof(Callable, vectorcall);
    t.tp_dictoffset = offsetof(Callable, dict);
    t.tp_weaklistoffset = offsetof(Callable, weakrefs);
    t.tp_descr_get = descr_get;
    t.tp_getattro = PyObject_GenericGetAttr;
    t.tp_setattro = PyObject_GenericSetAttr;
    t.tp_methods = methods;
    t.tp_getset = callable_dict_getset();
    return t;
}

}  // namespace hal
