// The Python module of the emulated accelerator (hal_emu_C): what hal.emu needs from C++.
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <algorithm>

#include "emu.h"

namespace py = pybind11;

namespace {

py::dict stat_dict(const hal_emu::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict pools(const hal_emu::Stat (&stats)[hal_emu::kPools]) {
  py::dict d;
  d["all"] = stat_dict(stats[hal_emu::kAllPools]);
  d["small_pool"] = stat_dict(stats[hal_emu::kSmallPool]);
  d["large_pool"] = stat_dict(stats[hal_emu::kLargePool]);
  return d;
}

// the statistics of one device as torch's allocators report them (nested; torch.emu flattens them).  The
// allocator does not cache, so segments and active blocks are the allocations, reserved, active and requested
// bytes the allocated ones, and nothing is ever inactive or oversize.
py::dict memory_stats(int index) {
  hal_emu::MemoryStats s = hal_emu::memory_stats(static_cast<c10::DeviceIndex>(index));
  const hal_emu::Stat none[hal_emu::kPools] = {};
  py::dict d;
  for (const char* key : {"allocation", "segment", "active"}) d[key] = pools(s.blocks);
  for (const char* key : {"allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"})
    d[key] = pools(s.bytes);
  d["inactive_split"] = pools(none);
  d["inactive_split_bytes"] = pools(none);
  d["oversize_allocations"] = stat_dict(none[0]);
  d["oversize_segments"] = stat_dict(none[0]);
  d["num_alloc_retries"] = 0;
  d["num_ooms"] = s.num_ooms;
  d["num_sync_all_streams"] = 0;
  d["num_device_alloc"] = s.blocks[hal_emu::kAllPools].allocated;
  d["num_device_free"] = s.blocks[hal_emu::kAllPools].freed;
  d["max_split_size"] = 0;  // no block is ever split
  return d;
}

// what this build of the emulator gives torch's device-generic code (it depends on the torch compiled against)
py::dict features() {
  py::dict d;
  d["device_allocator"] = static_cast<bool>(HAL_EMU_DEVICE_ALLOCATOR);
  d["host_allocator"] = static_cast<bool>(HAL_EMU_HOST_ALLOCATOR);
  d["torch"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  d["stream_priorities"] = hal_emu::kStreamPriorities;
  return d;
}

py::tuple default_generators() {
  int n = hal_emu::device_count();
  py::tuple out(n);
  for (int i = 0; i < n; ++i) {
    PyObject* g = THPGenerator_initDefaultGenerator(hal_emu::default_generator(static_cast<c10::DeviceIndex>(i)));
    if (g == nullptr) throw py::error_already_set();
    out[i] = py::reinterpret_steal<py::object>(g);
  }
  return out;
}

std::function<void(const std::string&)> python_callback(py::object fn, const char* what);

void set_fallback_observer(py::object fn) {
  hal_emu::set_fallback_observer(python_callback(std::move(fn), "hal.emu fallback observer"));
}

// A Python number where the schema wants a Tensor, as a wrapped number (what torch's own argument
// parser makes of it): a boxed kernel's arguments reach Python with wrapped numbers as numbers.
py::object wrapped_if_number(const py::handle& obj, const c10::Argument& arg) {
  auto type = arg.type();
  if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
  if (type->kind() != c10::TypeKind::TensorType || THPVariable_Check(obj.ptr())) {
    return py::reinterpret_borrow<py::object>(obj);
  }
  c10::Scalar value;
  if (PyBool_Check(obj.ptr())) {
    value = c10::Scalar(obj.cast<bool>());
  } else if (PyLong_Check(obj.ptr())) {
    value = c10::Scalar(obj.cast<int64_t>());
  } else if (PyFloat_Check(obj.ptr())) {
    value = c10::Scalar(obj.cast<double>());
  } else if (PyComplex_Check(obj.ptr())) {
    value = c10::Scalar(c10::complex<double>(PyComplex_RealAsDouble(obj.ptr()), PyComplex_ImagAsDouble(obj.ptr())));
  } else {
    return py::reinterpret_borrow<py::object>(obj);
  }
  at::Tensor t = at::scalar_to_tensor(value);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return py::cast(t);
}

py::object run_host(const std::string& name, const std::string& overload, py::args args, py::kwargs kwargs) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  const auto& schema_args = op.schema().arguments();
  py::list positional;
  for (size_t i = 0; i < args.size(); ++i) {
    positional.append(i < schema_args.size() ? wrapped_if_number(args[i], schema_args[i]) : args[i]);
  }
  py::kwargs named;
  for (auto item : kwargs) {
    auto key = item.first.cast<std::string>();
    auto it = std::find_if(schema_args.begin(), schema_args.end(), [&](const c10::Argument& a) { return a.name() == key; });
    named[item.first] = it != schema_args.end() ? wrapped_if_number(item.second, *it) : item.second;
  }
  torch::jit::Stack stack = torch::jit::createStackForSchema(op.schema(), py::tuple(positional), named, std::nullopt);
  {
    py::gil_scoped_release no_gil;
    hal_emu::host_call(op, &stack, /*count=*/true);
  }
  return torch::jit::createPyObjectForStack(std::move(stack));
}

std::function<void(const std::string&)> python_callback(py::object fn, const char* what) {
  if (fn.is_none()) return nullptr;
  // kept for the life of the process: it may run while the interpreter shuts down
  auto* held = new py::object(std::move(fn));
  return [held, what](const std::string& name) {
    py::gil_scoped_acquire gil;
    try {
      (*held)(name);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(what);
    }
  };
}

py::list trace_rows() {
  py::list out;
  for (auto& r : hal_emu::trace_rows()) {
    py::dict d;
    d["op"] = r.op;
    d["top"] = r.top;
    d["nested"] = r.nested;
    d["forward"] = r.forward;
    d["backward"] = r.backward;
    d["optimizer"] = r.optimizer;
    d["dtypes"] = r.dtypes;
    py::dict parents;
    for (auto& [p, n] : r.parents) parents[py::str(p)] = n;
    d["parents"] = parents;
    out.append(d);
  }
  return out;
}

#if !HAL_EMU_PY_FALLBACK_API
// PrivateUse1's boxed fallback as torch 2.5's Library.fallback(fn, "PrivateUse1") makes it: fn(op, *args, **kwargs)
// with op the OpOverload (torch.ops.<ns>.<name>.<overload>), keyword-only arguments as keywords, and its answer
// pushed back as the schema's returns.
// held for the life of the process (never destroyed: a py::object outliving the interpreter must not be freed)
py::object* g_python_fallback = nullptr;
torch::Library* g_fallback_library = nullptr;
std::unordered_map<std::string, py::object>* g_overloads = new std::unordered_map<std::string, py::object>();

py::object overload_of(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  std::string key = name.name + "." + name.overload_name;
  auto it = g_overloads->find(key);
  if (it != g_overloads->end()) return it->second;
  auto sep = name.name.find("::");
  py::object packet = py::module::import("torch").attr("ops").attr(name.name.substr(0, sep).c_str())
                          .attr(name.name.substr(sep + 2).c_str());
  py::object overload = packet.attr(name.overload_name.empty() ? "default" : name.overload_name.c_str());
  return g_overloads->emplace(key, overload).first->second;
}

py::object argument_to_python(const c10::Argument& arg, const c10::IValue& value) {
  if (value.isInt()) {  // a dtype, layout or memory format travels as an int in an IValue
    c10::TypePtr type = arg.type();
    if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
    switch (type->kind()) {
      case c10::TypeKind::ScalarTypeType: return py::cast(static_cast<at::ScalarType>(value.toInt()));
      case c10::TypeKind::LayoutType: return py::cast(static_cast<at::Layout>(value.toInt()));
      case c10::TypeKind::MemoryFormatType: return py::cast(static_cast<at::MemoryFormat>(value.toInt()));
      default: break;
    }
  }
  return torch::jit::toPyObject(value);
}

void boxed_python_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  std::vector<c10::IValue> values = torch::jit::pop(*stack, arguments.size());
  py::gil_scoped_acquire gil;
  py::list args;
  py::dict kwargs;
  for (size_t i = 0; i < arguments.size(); ++i) {
    py::object v = argument_to_python(arguments[i], values[i]);
    if (arguments[i].kwarg_only()) kwargs[arguments[i].name().c_str()] = v;
    else args.append(v);
  }
  // a Python exception travels as py::error_already_set: torch's bindings restore it as it was raised (a
  // NotImplementedError stays one, as hal.fallback and torch's callers expect)
  py::object out = (*g_python_fallback)(overload_of(op), *args, **kwargs);
  const auto& returns = schema.returns();
  if (returns.size() == 1) {
    stack->push_back(torch::jit::toIValue(out, returns[0].type()));
  } else if (returns.size() > 1) {
    py::tuple outs = out.cast<py::tuple>();
    for (size_t i = 0; i < returns.size(); ++i) stack->push_back(torch::jit::toIValue(outs[i], returns[i].type()));
  }
}

void set_python_fallback(py::object fn) {
  if (g_python_fallback == nullptr) g_python_fallback = new py::object();
  *g_python_fallback = std::move(fn);
  if (g_fallback_library == nullptr) {
    g_fallback_library = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__,
                                            __LINE__);
    g_fallback_library->fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_python_fallback>());
  }
}
#endif

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "hal emulated accelerator: devices, memory, generators and the op router (C++)";
  m.def("device_count", &hal_emu::device_count, "number of emulated devices (HAL_EMU_DEVICES)");
  m.def("current_device", [] { return static_cast<int>(hal_emu::current_device()); });
  m.def("set_device", [](int index) { hal_emu::set_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("memory_stats", &memory_stats, "allocator statistics of one device, nested as torch's allocators give them");
  m.def("reset_peak", [](int index) { hal_emu::reset_peak(static_cast<c10::DeviceIndex>(index)); });
  m.def("reset_accumulated", [](int index) { hal_emu::reset_accumulated(static_cast<c10::DeviceIndex>(index)); });
  m.def("memory_info", [](int index) { return hal_emu::memory_info(static_cast<c10::DeviceIndex>(index)); },
        "(free, total) bytes of a device: the host's");
#if !HAL_EMU_PY_FALLBACK_API
  m.def("set_python_fallback", &set_python_fallback,
        "fn(op, *args, **kwargs) answers every op without a PrivateUse1 kernel (torch < 2.5: no Library.fallback)");
#endif
  m.def("current_stream", [](int index) { return static_cast<int64_t>(hal_emu::current_stream(static_cast<c10::DeviceIndex>(index))); },
        "id of the current stream of device index on this thread");
  m.def("exchange_stream", [](int64_t id, int index) {
        return static_cast<int64_t>(hal_emu::exchange_stream(static_cast<c10::StreamId>(id), static_cast<c10::DeviceIndex>(index)));
      }, "make stream id current on device index (this thread); returns the previous id");
  m.def("stream_priority", [](int64_t id) { return hal_emu::stream_priority(static_cast<c10::StreamId>(id)); },
        "the priority a stream id carries");
  m.def("features", &features, "what this build gives torch's device-generic code");
  m.def("default_generators", &default_generators, "the default torch.Generator of each device");
  m.def("set_kernels", &hal_emu::set_kernels, py::arg("native"), py::arg("counted"),
        "make the router the kernel of these aten ops: native ones uncounted, counted ones as host fallbacks");
  m.def("host_counts", &hal_emu::host_counts, "(op, count) of every op computed as a host fallback");
  m.def("reset_host_counts", &hal_emu::reset_host_counts);
  m.def("set_fallback_observer", &set_fallback_observer, "called with an op name on its first host fallback");
  m.def("set_counting", &hal_emu::set_counting, "count host fallbacks on this thread; returns the old value");
  m.def("cpu_alias", &hal_emu::cpu_alias, "a CPU tensor over the bytes of an emu tensor (no copy)");
  m.def("adopt", [](const at::Tensor& t, int index) { return hal_emu::adopt(t, static_cast<c10::DeviceIndex>(index)); },
        "an emu tensor over the bytes of a CPU tensor (no copy)");
  m.def("host_storage", [](const at::Tensor& t) -> py::object {
    c10::Storage host = hal_emu::adopted_host_storage(t.storage());
    if (!host) return py::none();
    return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(host)));
  }, "the host storage an emu tensor's bytes live in (after move_to_host_storage), else None");
  m.def("move_to_host_storage", [](const at::Tensor& t, py::object storage) {
    hal_emu::move_to_host_storage(t, torch::createStorage(storage.ptr()));
  }, "copy an emu tensor's storage into a host storage and keep using those bytes");
  m.def("mark_forked", &hal_emu::mark_forked, "refuse device work from now on (called in a forked child)");
  m.def("trace_start", [](py::object first_seen) {
    hal_emu::trace_start(python_callback(std::move(first_seen), "hal.emu trace observer"));
  }, "record every op that reaches the device; first_seen(op) on each op's first top-level call");
  m.def("trace_stop", [] {
    py::gil_scoped_release no_gil;
    hal_emu::trace_stop();
  });
  m.def("trace_set_optimizer", &hal_emu::trace_set_optimizer, "an optimizer step begins (True) or ends (False)");
  m.def("trace_rows", &trace_rows, "the recorded ops: op, top, nested, forward, backward, optimizer, dtypes, parents");
  m.def("run_host", &run_host, "run aten op name.overload on the host bytes of its arguments");
}
