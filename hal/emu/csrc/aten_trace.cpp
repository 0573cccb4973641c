// The op trace of the emulated device: every aten op that reaches it, as a vendor kernel
// would receive it (after autograd and CompositeImplicitAutograd), with its overload, dtypes,
// count, phase, and the ops it ran inside.
//
// It listens to the dispatcher's RecordFunction callbacks (one per dispatcher call, not per
// redispatch) and keeps the calls on emu tensors (or with an emu device argument) whose
// device kernel is not torch's CompositeImplicitAutograd decomposition: those decompose
// above the device and their pieces arrive one by one.  A call made while another device
// kernel runs (the pieces of a CompositeExplicitAutograd kernel such as _to_copy, allocations
// of a kernel: calls below autograd while another device call is open) is counted as nested, under its parent, so the top-level counts are what a
// dispatch mode at the Python key sees.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <map>
#include <set>

#include "emu.h"

namespace hal_emu {
namespace {

struct Entry {
  int64_t top = 0;
  int64_t nested = 0;
  int64_t phase[3] = {0, 0, 0};  // forward (outside backward and optimizer), backward, optimizer
  std::set<std::string> dtypes;
  std::map<std::string, int64_t> parents;
};

std::mutex g_mutex;
std::map<std::string, Entry> g_entries;
std::unordered_map<std::string, bool> g_above_device;  // op name -> decomposes above the device
std::function<void(const std::string&)> g_first;
std::atomic<bool> g_on{false};
std::atomic<int> g_optimizer{0};
at::CallbackHandle g_handle = 0;

thread_local int tls_backward = 0;
thread_local std::vector<std::string> tls_stack;

struct Ctx : at::ObserverContext {
  bool device = false;
  bool backward = false;
};

bool on_emu(const c10::IValue& v) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
  }
  if (v.isDevice()) return v.toDevice().type() == c10::DeviceType::PrivateUse1;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) return true;
    }
    return false;
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (on_emu(e)) return true;
    }
  }
  return false;
}

void add_dtypes(const c10::IValue& v, std::set<std::string>& out) {
  if (v.isTensor()) {
    const auto& t = v.toTensor();
    if (t.defined()) out.insert(std::string(c10::toString(t.scalar_type())));
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (t.defined()) out.insert(std::string(c10::toString(t.scalar_type())));
    }
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) add_dtypes(e, out);
  }
}

// true when the op's kernel for the device is torch's CompositeImplicitAutograd one: it
// never reaches a device kernel itself
bool above_device(const c10::OperatorName& name, const std::string& full) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_above_device.find(full);
    if (it != g_above_device.end()) return it->second;
  }
  bool above = false;
  auto op = c10::Dispatcher::singleton().findOp(name);
  if (op) {
    above = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
            !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_above_device[full] = above;
  return above;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ++tls_backward;
    auto ctx = std::make_unique<Ctx>();
    ctx->backward = true;
    return ctx;
  }
  if (!g_on.load() || !counting()) return nullptr;
  auto opname = fn.operator_name();
  if (!opname) return nullptr;
  bool device = false;
  for (const c10::IValue& v : fn.inputs()) {
    if (on_emu(v)) {
      device = true;
      break;
    }
  }
  if (!device) return nullptr;
  std::string name = opname->name.rfind("aten::", 0) == 0 ? opname->name.substr(6) : opname->name;
  if (!opname->overload_name.empty()) name += "." + opname->overload_name;
  if (above_device(*opname, name)) return nullptr;
  std::set<std::string> dtypes;
  for (const c10::IValue& v : fn.inputs()) add_dtypes(v, dtypes);
  // a call from inside a device kernel runs below autograd (its keys are excluded); a call an
  // autograd kernel makes before it redispatches (saving a detached output) is a call of its own
  bool nested = !tls_stack.empty() && c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::AutogradFunctionality);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    Entry& e = g_entries[name];
    if (!nested) {
      first = e.top == 0;
      ++e.top;
      ++e.phase[tls_backward > 0 ? 1 : (g_optimizer.load() > 0 ? 2 : 0)];
    } else {
      ++e.nested;
      ++e.parents[tls_stack.back()];
    }
    e.dtypes.insert(dtypes.begin(), dtypes.end());
  }
  tls_stack.push_back(name);
  if (first) {
    std::function<void(const std::string&)> observer;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      observer = g_first;
    }
    if (observer) observer(name);
  }
  auto ctx = std::make_unique<Ctx>();
  ctx->device = true;
  return ctx;
}

void on_exit(const at::RecordFunction&, at::ObserverContext* raw) {
  auto* ctx = static_cast<Ctx*>(raw);
  if (ctx == nullptr) return;
  if (ctx->backward) {
    --tls_backward;
  } else if (ctx->device && !tls_stack.empty()) {
    tls_stack.pop_back();
  }
}

}  // namespace

void trace_start(std::function<void(const std::string&)> first_seen) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_entries.clear();
    g_first = std::move(first_seen);
  }
  if (g_handle == 0) {
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(on_enter, on_exit)
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }
  g_on.store(true);
}

void trace_stop() {
  g_on.store(false);
  if (g_handle != 0) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_first = nullptr;
}

void trace_set_optimizer(bool inside) {
  if (inside) {
    g_optimizer.fetch_add(1);
  } else {
    g_optimizer.fetch_sub(1);
  }
}

std::vector<TraceRow> trace_rows() {
  std::vector<TraceRow> rows;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [name, e] : g_entries) {
    TraceRow r;
    r.op = name;
    r.top = e.top;
    r.nested = e.nested;
    r.forward = e.phase[0];
    r.backward = e.phase[1];
    r.optimizer = e.phase[2];
    r.dtypes.assign(e.dtypes.begin(), e.dtypes.end());
    r.parents.assign(e.parents.begin(), e.parents.end());
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace hal_emu
