// The redirection shim's hot wrappers (hal/redirect), as C types with vectorcall: a Python
// wrapper costs its own frame, *args/**kwargs packing and a tuple key per call (~0.5-1 us); these
// cost a C call.  Behaviour is that of the Python wrappers they stand in for
// (hal/redirect/_devices.py `_wrap_device_arg`, hal/redirect/_split.py `split`), which remain the
// implementation where this module is not built or Python is older than 3.11.
//
// DeviceCall(fn, pos, targets, on_miss, unpin, device_type)
//     Calls fn with its device argument (positional at `pos`, or the keyword `device`) mapped
//     through `targets` (a dict whose __missing__ decides; False: leave the argument as it is)
//     and, when `unpin` is not None, a true `pin_memory=` replaced by False after calling unpin().
//     Each mapped call is counted at its call site: the calling frame's (code, instruction
//     offset) is looked up in a per-wrapper table; on a hit the site's row dict gets
//     row["count"] += 1, on a miss on_miss(frame, device, target) records it and returns the row
//     to remember (None: not the user's code, ask again next time).
// CudaCall(to, targets, default, on_miss, slow)
//     Tensor.cuda(self, device=None, non_blocking=False, memory_format=...): to(self, target, ...)
//     where target is targets[device] (default(device) when that is missing or False; default() for
//     no device), counted per call site as DeviceCall does.  A call it does not recognise (more
//     arguments, other keywords) goes to slow, the Python wrapper, with the same arguments.
// SiteCall(fn, on_miss)
//     Calls fn, counting the call at its call site as DeviceCall does (on_miss(frame, None, None) on
//     a site's first sight): a torch.cuda answer the log records (torch.cuda.is_available, ...).
// StandInCall(stand_in, base_call, torch_call, user_new, on_miss, internal)
//     The metaclass __call__ of one torch.cuda class stand-in (hal/redirect/_cuda_classes.py):
//     called as stand_in(...) from the user's code it counts the call at its call site as SiteCall
//     does and returns user_new(...) (the backend's object); from torch's or hal's own code (as
//     SplitCall decides) torch_call(...); a class deriving from the stand-in is built by
//     base_call(cls, ...), the base metaclass's __call__.
// SplitCall(orig, for_user, internal, takes_caller)
//     Calls orig when the calling frame's module is torch's or hal's own (internal[__name__]
//     true; a dict whose __missing__ decides), else for_user (with the frame first when
//     takes_caller).
//
// All bind as methods (descriptor + Py_TPFLAGS_METHOD_DESCRIPTOR) like Python functions, carry a
// __dict__ (functools.update_wrapper) and take part in garbage collection.
#include "callable_type.h"
#include "common.h"

#include <unordered_map>

namespace py = pybind11;

#if PY_VERSION_HEX >= 0x030B0000
#define HAL_REDIRECT_CALLS 1
#endif

#ifdef HAL_REDIRECT_CALLS
namespace {

PyObject* s_device = nullptr;      // "device"
PyObject* s_pin_memory = nullptr;  // "pin_memory"
PyObject* s_count = nullptr;       // "count"
PyObject* s_name = nullptr;        // "__name__"
PyObject* s_non_blocking = nullptr;
PyObject* s_memory_format = nullptr;
PyObject* s_call = nullptr;  // "__call__"
PyObject* kw_sets[4] = {nullptr, nullptr, nullptr, nullptr};  // (), (nb,), (mf,), (nb, mf)

using hal::Callable;  // the head of every wrapper: vectorcall slot, __dict__ and weak references

struct Site {
    PyObject* code;  // strong references: the code's address and the device's stay theirs
    PyObject* dev;
    PyObject* row;
};

struct SiteKey {
    const void* code;
    int lasti;
    bool operator==(const SiteKey& o) const { return code == o.code && lasti == o.lasti; }
};

struct SiteKeyHash {
    size_t operator()(const SiteKey& k) const {
        return std::hash<const void*>()(k.code) ^ (static_cast<size_t>(k.lasti) * 0x9E3779B97F4A7C15ULL);
    }
};

using SiteTable = std::unordered_map<SiteKey, Site, SiteKeyHash>;

// A wrapper that counts its calls per call site: the table and what fills it.
struct Counter {
    Callable base;
    PyObject* on_miss;
    SiteTable* sites;
};

struct DeviceCall {
    Counter counter;
    PyObject* fn;
    PyObject* targets;
    PyObject* unpin;  // Py_None: pin_memory is passed through
    PyObject* device_type;
    PyObject* last_dev;     // the last device argument found in targets (a stable answer), and that answer:
    PyObject* last_target;  // a torch.device argument hashes in ~0.1 us, an identity test in ~1 ns
    Py_ssize_t pos;   // -1: keyword only
};

struct SiteCall {
    Counter counter;
    PyObject* fn;
};

struct CudaCall {
    Counter counter;
    PyObject* to;
    PyObject* targets;
    PyObject* deflt;
    PyObject* slow;
};

struct StandInCall {
    Counter counter;
    PyObject* stand_in;
    PyObject* base_call;
    PyObject* torch_call;
    PyObject* user_new;
    PyObject* internal;
};

extern PyTypeObject stand_in_call_type;

struct SplitCall {
    Callable base;
    PyObject* orig;
    PyObject* for_user;
    PyObject* internal;
    int takes_caller;
};

// -- shared ------------------------------------------------------------------------------
PyObject* bind(PyObject* self, PyObject* obj, PyObject*) {
    if (obj == nullptr || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

// pickle by reference, as a builtin function: the module and name it was given
// (functools.update_wrapper: torch.empty's wrapper pickles as torch.empty, which is itself)
PyObject* reduce(PyObject* self, PyObject*) { return PyObject_GetAttr(self, s_name); }

PyMethodDef callable_methods[] = {
    {"__reduce__", reduce, METH_NOARGS, "Pickled by reference, under the name of the call it wraps."},
    {nullptr, nullptr, 0, nullptr},
};


// a dict that may decide on a miss (__missing__): one lookup on a hit; new reference
PyObject* lookup(PyObject* table, PyObject* key) {
    PyObject* v = PyDict_GetItemWithError(table, key);
    if (v != nullptr) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred()) return nullptr;
    return PyObject_GetItem(table, key);
}

bool is_key(PyObject* name, PyObject* interned) {
    if (name == interned) return true;
    if (PyUnicode_CHECK_INTERNED(name)) return false;
    return PyUnicode_Compare(name, interned) == 0;
}

// -- DeviceCall --------------------------------------------------------------------------
bool is_device_arg(DeviceCall* self, PyObject* d) {
    PyTypeObject* t = Py_TYPE(d);
    return t == &PyUnicode_Type || t == &PyLong_Type || reinterpret_cast<PyObject*>(t) == self->device_type;
}

int count_site(Counter* self, PyObject* dev, PyObject* target) {
    PyFrameObject* frame = PyEval_GetFrame();  // the caller's: this call pushed no frame
    if (frame == nullptr) return 0;
    PyCodeObject* code = PyFrame_GetCode(frame);
    const SiteKey key{code, PyFrame_GetLasti(frame)};
    auto it = self->sites->find(key);
    if (it != self->sites->end()) {
        PyObject* known = it->second.dev;
        int same = known == dev;
        if (!same && Py_TYPE(known) == Py_TYPE(dev)) {
            same = PyObject_RichCompareBool(known, dev, Py_EQ);
            if (same < 0) PyErr_Clear(), same = 0;
        }
        if (same) {
            Py_DECREF(code);
            PyObject* row = it->second.row;
            PyObject* n = PyDict_GetItemWithError(row, s_count);
            if (n == nullptr) return PyErr_Occurred() ? -1 : 0;
            const long long count = PyLong_AsLongLong(n);
            if (count == -1 && PyErr_Occurred()) return -1;
            PyObject* n1 = PyLong_FromLongLong(count + 1);
            if (n1 == nullptr) return -1;
            int rc = PyDict_SetItem(row, s_count, n1);
            Py_DECREF(n1);
            return rc;
        }
    }
    PyObject* row = PyObject_CallFunctionObjArgs(self->on_miss, reinterpret_cast<PyObject*>(frame), dev, target,
                                                 nullptr);
    if (row == nullptr) {
        Py_DECREF(code);
        return -1;
    }
    if (row == Py_None) {
        Py_DECREF(row);
        Py_DECREF(code);
        return 0;
    }
    Py_INCREF(dev);
    if (it != self->sites->end()) {  // the same site with another device: remember the latest
        Site old = it->second;
        it->second = Site{reinterpret_cast<PyObject*>(code), dev, row};
        Py_DECREF(old.code);
        Py_DECREF(old.dev);
        Py_DECREF(old.row);
    } else {
        self->sites->emplace(key, Site{reinterpret_cast<PyObject*>(code), dev, row});
    }
    return 0;
}

// new reference to the argument to pass instead of d, or nullptr with an error; *changed false
// when d is passed as it is
PyObject* map_device(DeviceCall* self, PyObject* d, bool* changed) {
    *changed = false;
    if (!is_device_arg(self, d)) return d;
    PyObject* target;
    if (d == self->last_dev) {
        target = self->last_target;
        Py_INCREF(target);
    } else {
        target = PyDict_GetItemWithError(self->targets, d);
        if (target != nullptr) {  // in the table: an answer that cannot change
            Py_INCREF(d);
            Py_INCREF(target);
            Py_XSETREF(self->last_dev, d);
            Py_XSETREF(self->last_target, target);
            Py_INCREF(target);
        } else if (PyErr_Occurred()) {
            return nullptr;
        } else {
            target = PyObject_GetItem(self->targets, d);  // __missing__ decides
        }
    }
    if (target == nullptr) return nullptr;
    if (target == Py_False) {
        Py_DECREF(target);
        return d;
    }
    if (count_site(&self->counter, d, target) < 0) {
        Py_DECREF(target);
        return nullptr;
    }
    *changed = true;
    return target;
}

PyObject* device_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<DeviceCall*>(op);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    const Py_ssize_t total = nargs + nkw;
    PyObject* swap[3] = {nullptr, nullptr, nullptr};  // new references replacing args[at[i]]
    Py_ssize_t at[3] = {-1, -1, -1};
    int n = 0;
    bool changed;
    if (self->pos >= 0 && nargs > self->pos) {
        PyObject* v = map_device(self, args[self->pos], &changed);
        if (v == nullptr) return nullptr;
        if (changed) swap[n] = v, at[n++] = self->pos;
    }
    for (Py_ssize_t i = 0; i < nkw; ++i) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, i);
        PyObject* v = args[nargs + i];
        if (is_key(name, s_device)) {
            if (v == Py_None) continue;
            PyObject* m = map_device(self, v, &changed);
            if (m == nullptr) goto fail;
            if (changed && n < 3) swap[n] = m, at[n++] = nargs + i;
        } else if (self->unpin != Py_None && is_key(name, s_pin_memory)) {
            int truth = PyObject_IsTrue(v);
            if (truth < 0) goto fail;
            if (truth && n < 3) {
                PyObject* r = PyObject_CallNoArgs(self->unpin);
                if (r == nullptr) goto fail;
                Py_DECREF(r);
                Py_INCREF(Py_False);
                swap[n] = Py_False, at[n++] = nargs + i;
            }
        }
    }
    if (n == 0) return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    {
        PyObject* small[16];
        PyObject** buf = total <= 16 ? small : static_cast<PyObject**>(PyMem_Malloc(sizeof(PyObject*) * total));
        if (buf == nullptr) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < total; ++i) buf[i] = args[i];
        for (int i = 0; i < n; ++i) buf[at[i]] = swap[i];
        PyObject* out = PyObject_Vectorcall(self->fn, buf, nargs, kwnames);
        if (buf != small) PyMem_Free(buf);
        for (int i = 0; i < n; ++i) Py_DECREF(swap[i]);
        return out;
    }
fail:
    for (int i = 0; i < n; ++i) Py_DECREF(swap[i]);
    return nullptr;
}

void clear_sites(SiteTable* sites) {
    if (sites == nullptr) return;
    SiteTable old;
    old.swap(*sites);
    for (auto& kv : old) {
        Py_DECREF(kv.second.code);
        Py_DECREF(kv.second.dev);
        Py_DECREF(kv.second.row);
    }
}

int counter_traverse(Counter* self, visitproc visit, void* arg) {
    Py_VISIT(self->base.dict);
    Py_VISIT(self->on_miss);
    if (self->sites != nullptr)
        for (auto& kv : *self->sites) {
            Py_VISIT(kv.second.code);
            Py_VISIT(kv.second.dev);
            Py_VISIT(kv.second.row);
        }
    return 0;
}

void counter_clear(Counter* self) {
    Py_CLEAR(self->base.dict);
    Py_CLEAR(self->on_miss);
    clear_sites(self->sites);
}

void counter_init(Counter* self, PyObject* on_miss) {
    self->sites = new SiteTable();
    Py_INCREF(on_miss), self->on_miss = on_miss;
}

void counter_dealloc(PyObject* op, inquiry clear) {
    auto* self = reinterpret_cast<Counter*>(op);
    PyObject_GC_UnTrack(op);
    if (self->base.weakrefs != nullptr) PyObject_ClearWeakRefs(op);
    clear(op);
    delete self->sites;
    Py_TYPE(op)->tp_free(op);
}

int device_call_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<DeviceCall*>(op);
    Py_VISIT(self->fn);
    Py_VISIT(self->targets);
    Py_VISIT(self->unpin);
    Py_VISIT(self->device_type);
    Py_VISIT(self->last_dev);
    Py_VISIT(self->last_target);
    return counter_traverse(&self->counter, visit, arg);
}

int device_call_clear(PyObject* op) {
    auto* self = reinterpret_cast<DeviceCall*>(op);
    Py_CLEAR(self->fn);
    Py_CLEAR(self->targets);
    Py_CLEAR(self->unpin);
    Py_CLEAR(self->device_type);
    Py_CLEAR(self->last_dev);
    Py_CLEAR(self->last_target);
    counter_clear(&self->counter);
    return 0;
}

void device_call_dealloc(PyObject* op) { counter_dealloc(op, device_call_clear); }

PyObject* device_call_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"fn", "pos", "targets", "on_miss", "unpin", "device_type", nullptr};
    PyObject *fn, *targets, *on_miss, *unpin, *device_type;
    Py_ssize_t pos;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnO!OOO:DeviceCall", const_cast<char**>(kw), &fn, &pos,
                                     &PyDict_Type, &targets, &on_miss, &unpin, &device_type))
        return nullptr;
    auto* self = reinterpret_cast<DeviceCall*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->counter.base.vectorcall = device_call;
    counter_init(&self->counter, on_miss);
    self->pos = pos < 0 ? -1 : pos;
    Py_INCREF(fn), self->fn = fn;
    Py_INCREF(targets), self->targets = targets;
    Py_INCREF(unpin), self->unpin = unpin;
    Py_INCREF(device_type), self->device_type = device_type;
    return reinterpret_cast<PyObject*>(self);
}

// -- CudaCall ----------------------------------------------------------------------------
PyObject* cuda_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<CudaCall*>(op);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    // self, device, non_blocking, memory_format: positional or by name
    PyObject* slot[4] = {nullptr, nullptr, nullptr, nullptr};
    bool plain = nargs >= 1 && nargs <= 4;
    for (Py_ssize_t i = 0; plain && i < nargs; ++i) slot[i] = args[i];
    for (Py_ssize_t i = 0; plain && i < nkw; ++i) {
        PyObject* name = PyTuple_GET_ITEM(kwnames, i);
        int k = is_key(name, s_device) ? 1 : is_key(name, s_non_blocking) ? 2 : is_key(name, s_memory_format) ? 3 : 0;
        if (k == 0 || slot[k] != nullptr) plain = false;
        else slot[k] = args[nargs + i];
    }
    if (!plain) return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    PyObject* dev = slot[1] != nullptr ? slot[1] : Py_None;
    PyObject* target = PyDict_GetItemWithError(self->targets, dev);
    if (target != nullptr && target != Py_False) {
        Py_INCREF(target);
    } else {
        if (PyErr_Occurred()) return nullptr;
        target = dev == Py_None ? PyObject_CallNoArgs(self->deflt) : PyObject_CallOneArg(self->deflt, dev);
        if (target == nullptr) return nullptr;
    }
    if (count_site(&self->counter, dev, target) < 0) {
        Py_DECREF(target);
        return nullptr;
    }
    PyObject* call[4] = {slot[0], target, nullptr, nullptr};
    Py_ssize_t n = 2;
    int which = 0;
    if (slot[2] != nullptr) call[n++] = slot[2], which |= 1;
    if (slot[3] != nullptr) call[n++] = slot[3], which |= 2;
    PyObject* out = PyObject_Vectorcall(self->to, call, 2, which ? kw_sets[which] : nullptr);
    Py_DECREF(target);
    return out;
}

int cuda_call_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<CudaCall*>(op);
    Py_VISIT(self->to);
    Py_VISIT(self->targets);
    Py_VISIT(self->deflt);
    Py_VISIT(self->slow);
    return counter_traverse(&self->counter, visit, arg);
}

int cuda_call_clear(PyObject* op) {
    auto* self = reinterpret_cast<CudaCall*>(op);
    Py_CLEAR(self->to);
    Py_CLEAR(self->targets);
    Py_CLEAR(self->deflt);
    Py_CLEAR(self->slow);
    counter_clear(&self->counter);
    return 0;
}

void cuda_call_dealloc(PyObject* op) { counter_dealloc(op, cuda_call_clear); }

PyObject* cuda_call_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"to", "targets", "default", "on_miss", "slow", nullptr};
    PyObject *to, *targets, *deflt, *on_miss, *slow;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOO:CudaCall", const_cast<char**>(kw), &to, &PyDict_Type,
                                     &targets, &deflt, &on_miss, &slow))
        return nullptr;
    auto* self = reinterpret_cast<CudaCall*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->counter.base.vectorcall = cuda_call;
    counter_init(&self->counter, on_miss);
    Py_INCREF(to), self->to = to;
    Py_INCREF(targets), self->targets = targets;
    Py_INCREF(deflt), self->deflt = deflt;
    Py_INCREF(slow), self->slow = slow;
    return reinterpret_cast<PyObject*>(self);
}

// -- SiteCall ----------------------------------------------------------------------------
PyObject* site_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<SiteCall*>(op);
    if (count_site(&self->counter, Py_None, Py_None) < 0) return nullptr;
    return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

int site_call_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<SiteCall*>(op);
    Py_VISIT(self->fn);
    return counter_traverse(&self->counter, visit, arg);
}

int site_call_clear(PyObject* op) {
    auto* self = reinterpret_cast<SiteCall*>(op);
    Py_CLEAR(self->fn);
    counter_clear(&self->counter);
    return 0;
}

void site_call_dealloc(PyObject* op) { counter_dealloc(op, site_call_clear); }

PyObject* site_call_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"fn", "on_miss", nullptr};
    PyObject *fn, *on_miss;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:SiteCall", const_cast<char**>(kw), &fn, &on_miss))
        return nullptr;
    auto* self = reinterpret_cast<SiteCall*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->counter.base.vectorcall = site_call;
    counter_init(&self->counter, on_miss);
    Py_INCREF(fn), self->fn = fn;
    return reinterpret_cast<PyObject*>(self);
}

// -- which code calls ----------------------------------------------------------------------
// 1 when `frame`'s module is torch's or hal's own (internal[__name__] true), 0 if not (or no frame),
// -1 with an error
int called_from_inside(PyFrameObject* frame, PyObject* internal) {
    if (frame == nullptr) return 0;
    PyObject* globals = PyFrame_GetGlobals(frame);
    PyObject* name = PyDict_GetItemWithError(globals, s_name);
    Py_DECREF(globals);
    if (name == nullptr && PyErr_Occurred()) return -1;
    PyObject* flag = lookup(internal, name != nullptr ? name : Py_None);
    if (flag == nullptr) return -1;
    const int inside = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return inside;
}

// -- StandInCall -------------------------------------------------------------------------
PyObject* stand_in_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<StandInCall*>(op);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || args[0] != self->stand_in)  // a class deriving from the stand-in: as any class
        return PyObject_Vectorcall(self->base_call, args, nargsf, kwnames);
    const int inside = called_from_inside(PyEval_GetFrame(), self->internal);
    if (inside < 0) return nullptr;
    if (inside) return PyObject_Vectorcall(self->torch_call, args + 1, nargs - 1, kwnames);
    if (count_site(&self->counter, Py_None, Py_None) < 0) return nullptr;
    return PyObject_Vectorcall(self->user_new, args + 1, nargs - 1, kwnames);
}

// The stand-in class's own vectorcall (its tp_vectorcall): cls(...) reaches the StandInCall kept as its
// metaclass's __call__ without the slot's lookup and the argument tuple and dict it builds.
PyObject* stand_in_vectorcall(PyObject* cls, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    PyObject* call = PyDict_GetItemWithError(Py_TYPE(cls)->tp_dict, s_call);
    if (call == nullptr || Py_TYPE(call) != &stand_in_call_type) {
        if (PyErr_Occurred()) return nullptr;
        PyErr_SetString(PyExc_TypeError, "hal stand-in class without its StandInCall");
        return nullptr;
    }
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject* small[9];
    PyObject** buf = total < 8 ? small : static_cast<PyObject**>(PyMem_Malloc(sizeof(PyObject*) * (total + 1)));
    if (buf == nullptr) return PyErr_NoMemory();
    buf[0] = cls;
    for (Py_ssize_t i = 0; i < total; ++i) buf[i + 1] = args[i];
    PyObject* out = stand_in_call(call, buf, nargs + 1, kwnames);
    if (buf != small) PyMem_Free(buf);
    return out;
}

int stand_in_call_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<StandInCall*>(op);
    Py_VISIT(self->stand_in);
    Py_VISIT(self->base_call);
    Py_VISIT(self->torch_call);
    Py_VISIT(self->user_new);
    Py_VISIT(self->internal);
    return counter_traverse(&self->counter, visit, arg);
}

int stand_in_call_clear(PyObject* op) {
    auto* self = reinterpret_cast<StandInCall*>(op);
    Py_CLEAR(self->stand_in);
    Py_CLEAR(self->base_call);
    Py_CLEAR(self->torch_call);
    Py_CLEAR(self->user_new);
    Py_CLEAR(self->internal);
    counter_clear(&self->counter);
    return 0;
}

void stand_in_call_dealloc(PyObject* op) { counter_dealloc(op, stand_in_call_clear); }

PyObject* stand_in_call_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"stand_in", "base_call", "torch_call", "user_new", "on_miss", "internal", nullptr};
    PyObject *stand_in, *base_call, *torch_call, *user_new, *on_miss, *internal;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOO!:StandInCall", const_cast<char**>(kw), &PyType_Type,
                                     &stand_in, &base_call, &torch_call, &user_new, &on_miss, &PyDict_Type,
                                     &internal))
        return nullptr;
    auto* self = reinterpret_cast<StandInCall*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->counter.base.vectorcall = stand_in_call;
    counter_init(&self->counter, on_miss);
    Py_INCREF(stand_in), self->stand_in = stand_in;
    Py_INCREF(base_call), self->base_call = base_call;
    Py_INCREF(torch_call), self->torch_call = torch_call;
    Py_INCREF(user_new), self->user_new = user_new;
    Py_INCREF(internal), self->internal = internal;
    return reinterpret_cast<PyObject*>(self);
}

// -- SplitCall ---------------------------------------------------------------------------
PyObject* split_call(PyObject* op, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    auto* self = reinterpret_cast<SplitCall*>(op);
    PyFrameObject* frame = PyEval_GetFrame();
    const int inside = called_from_inside(frame, self->internal);
    if (inside < 0) return nullptr;
    if (inside) return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    if (!self->takes_caller) return PyObject_Vectorcall(self->for_user, args, nargsf, kwnames);
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject* small[17];
    PyObject** buf = total < 17 ? small : static_cast<PyObject**>(PyMem_Malloc(sizeof(PyObject*) * (total + 1)));
    if (buf == nullptr) return PyErr_NoMemory();
    buf[0] = frame != nullptr ? reinterpret_cast<PyObject*>(frame) : Py_None;
    for (Py_ssize_t i = 0; i < total; ++i) buf[i + 1] = args[i];
    PyObject* out = PyObject_Vectorcall(self->for_user, buf, nargs + 1, kwnames);
    if (buf != small) PyMem_Free(buf);
    return out;
}

int split_call_traverse(PyObject* op, visitproc visit, void* arg) {
    auto* self = reinterpret_cast<SplitCall*>(op);
    Py_VISIT(self->base.dict);
    Py_VISIT(self->orig);
    Py_VISIT(self->for_user);
    Py_VISIT(self->internal);
    return 0;
}

int split_call_clear(PyObject* op) {
    auto* self = reinterpret_cast<SplitCall*>(op);
    Py_CLEAR(self->base.dict);
    Py_CLEAR(self->orig);
    Py_CLEAR(self->for_user);
    Py_CLEAR(self->internal);
    return 0;
}

void split_call_dealloc(PyObject* op) {
    PyObject_GC_UnTrack(op);
    if (reinterpret_cast<Callable*>(op)->weakrefs != nullptr) PyObject_ClearWeakRefs(op);
    split_call_clear(op);
    Py_TYPE(op)->tp_free(op);
}

PyObject* split_call_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"orig", "for_user", "internal", "takes_caller", nullptr};
    PyObject *orig, *for_user, *internal;
    int takes_caller = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!|p:SplitCall", const_cast<char**>(kw), &orig, &for_user,
                                     &PyDict_Type, &internal, &takes_caller))
        return nullptr;
    auto* self = reinterpret_cast<SplitCall*>(type->tp_alloc(type, 0));
    if (self == nullptr) return nullptr;
    self->base.vectorcall = split_call;
    Py_INCREF(orig), self->orig = orig;
    Py_INCREF(for_user), self->for_user = for_user;
    Py_INCREF(internal), self->internal = internal;
    self->takes_caller = takes_caller;
    return reinterpret_cast<PyObject*>(self);
}

PyTypeObject make_type(const char* name, const char* doc, Py_ssize_t size, newfunc tp_new, destructor dealloc,
                       traverseproc traverse, inquiry clear) {
    return hal::make_callable_type(name, doc, size, tp_new, dealloc, traverse, clear, bind, callable_methods);
}

PyTypeObject device_call_type = make_type(
    "hal._C.DeviceCall",
    "DeviceCall(fn, pos, targets, on_miss, unpin, device_type): fn with its device argument mapped "
    "(hal.redirect's wrapper of a device-taking torch call, in C).",
    sizeof(DeviceCall), device_call_new, device_call_dealloc, device_call_traverse, device_call_clear);

PyTypeObject cuda_call_type = make_type(
    "hal._C.CudaCall",
    "CudaCall(to, targets, default, on_miss, slow): Tensor.cuda as Tensor.to to the mapped device "
    "(hal.redirect's Tensor.cuda, in C).",
    sizeof(CudaCall), cuda_call_new, cuda_call_dealloc, cuda_call_traverse, cuda_call_clear);

PyTypeObject site_call_type = make_type(
    "hal._C.SiteCall",
    "SiteCall(fn, on_miss): fn, its calls counted per call site (a torch.cuda answer hal.redirect's log "
    "records, in C).",
    sizeof(SiteCall), site_call_new, site_call_dealloc, site_call_traverse, site_call_clear);

PyTypeObject stand_in_call_type = make_type(
    "hal._C.StandInCall",
    "StandInCall(stand_in, base_call, torch_call, user_new, on_miss, internal): the metaclass __call__ of a "
    "torch.cuda class stand-in (hal.redirect), in C.",
    sizeof(StandInCall), stand_in_call_new, stand_in_call_dealloc, stand_in_call_traverse, stand_in_call_clear);

PyTypeObject split_call_type = make_type(
    "hal._C.SplitCall",
    "SplitCall(orig, for_user, internal, takes_caller=False): orig for torch's and hal's own code, "
    "for_user for the rest (hal.redirect's split call, in C).",
    sizeof(SplitCall), split_call_new, split_call_dealloc, split_call_traverse, split_call_clear);

PyObject* intern(const char* s) { return PyUnicode_InternFromString(s); }

// fast_stand_in(cls): calls of the stand-in class cls (whose metaclass, made for it alone, holds its
// StandInCall as __call__) go through the type's vectorcall slot from now on
PyObject* fast_stand_in(PyObject*, PyObject* cls) {
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "fast_stand_in: expected a class");
        return nullptr;
    }
    PyTypeObject* meta = Py_TYPE(cls);
    PyObject* call = PyDict_GetItemWithError(meta->tp_dict, s_call);
    if (call == nullptr || Py_TYPE(call) != &stand_in_call_type) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "fast_stand_in: the class's metaclass has no StandInCall as __call__");
        return nullptr;
    }
    if (!(meta->tp_flags & Py_TPFLAGS_HEAPTYPE) || meta->tp_vectorcall_offset != offsetof(PyTypeObject, tp_vectorcall)) {
        PyErr_SetString(PyExc_TypeError, "fast_stand_in: the metaclass is not a heap type deriving from type");
        return nullptr;
    }
    reinterpret_cast<PyTypeObject*>(cls)->tp_vectorcall = stand_in_vectorcall;
    meta->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;  // after __call__ is set: assigning it clears the flag
    Py_RETURN_NONE;
}

PyMethodDef module_functions[] = {
    {"fast_stand_in", fast_stand_in, METH_O,
     "fast_stand_in(cls): calls of the torch.cuda stand-in class cls reach its metaclass's StandInCall "
     "through the type's vectorcall slot (hal.redirect)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace
#endif

namespace hal {

void register_redirect_calls(py::module_& m) {
#ifdef HAL_REDIRECT_CALLS
    s_device = intern("device");
    s_pin_memory = intern("pin_memory");
    s_count = intern("count");
    s_name = intern("__name__");
    s_non_blocking = intern("non_blocking");
    s_memory_format = intern("memory_format");
    s_call = intern("__call__");
    kw_sets[1] = PyTuple_Pack(1, s_non_blocking);
    kw_sets[2] = PyTuple_Pack(1, s_memory_format);
    kw_sets[3] = PyTuple_Pack(2, s_non_blocking, s_memory_format);
    for (auto* t : {&device_call_type, &cuda_call_type, &site_call_type, &stand_in_call_type, &split_call_type}) {
        if (PyType_Ready(t) < 0) throw py::error_already_set();
        Py_INCREF(t);
    }
    m.attr("DeviceCall") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&device_call_type));
    m.attr("CudaCall") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&cuda_call_type));
    m.attr("SiteCall") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&site_call_type));
    m.attr("SplitCall") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&split_call_type));
    m.attr("StandInCall") = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&stand_in_call_type));
    PyObject* fast = PyCFunction_NewEx(&module_functions[0], nullptr, m.attr("__name__").ptr());
    if (fast == nullptr) throw py::error_already_set();
    m.attr("fast_stand_in") = py::reinterpret_steal<py::object>(fast);
#else
    (void)m;
#endif
}

}  // namespace hal
