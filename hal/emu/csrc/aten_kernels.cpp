// Kernels of the emulated accelerator.
//
// Allocation, views, copies and resizes are the device's own kernels.  The ops of the native
// set get the router as their kernel (set_kernels, called from Python with the native set):
// its emu arguments become CPU tensors over the same bytes (no copy), torch's CPU kernel runs,
// and results become emu tensors again (no copy).  Every other op reaches the device's one
// boxed fallback, which is Python's (hal/emu/_dispatch.py): it raises, decomposes, or runs the
// op on the host through host_call, counted.  A few ops torch selects only for non-CPU devices
// have no CPU kernel; they are written here as compositions.
#include "emu.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <unordered_set>

namespace hal_emu {

bool is_emu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

namespace {

void release_storage(void* ctx) { delete static_cast<c10::Storage*>(ctx); }

// a CPU storage over the bytes of emu storage ``st`` (keeps ``st`` alive)
c10::Storage alias_storage(const c10::Storage& st) {
  void* data = st.unsafeGetStorageImpl()->mutable_data();
  c10::DataPtr dp(data, new c10::Storage(st), &release_storage, c10::Device(c10::DeviceType::CPU));
  return c10::Storage(c10::Storage::use_byte_size_t(), st.nbytes(), std::move(dp), alias_allocator(),
                      /*resizable=*/true);
}

at::Tensor tensor_on(c10::Storage st, c10::DispatchKey key, const at::Tensor& like) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(st), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  at::Tensor out(std::move(impl));
  if (like.is_conj()) out._set_conj(true);
  if (like.is_neg()) out._set_neg(true);
  return out;
}

c10::Storage adopted_storage(const c10::Storage& cpu, c10::DeviceIndex index) {
  size_t nbytes = cpu.nbytes();
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, adopt_bytes(cpu, index), device_allocator(),
                      /*resizable=*/true);
}

}  // namespace

at::Tensor cpu_alias(const at::Tensor& t) {
  TORCH_CHECK(is_emu(t), "emu: cpu_alias() needs an emu tensor, got one on ", t.device());
  return tensor_on(alias_storage(t.storage()), c10::DispatchKey::CPU, t);
}

at::Tensor adopt(const at::Tensor& t, c10::DeviceIndex index) {
  if (!t.defined()) return t;
  return tensor_on(adopted_storage(t.storage(), index), c10::DispatchKey::PrivateUse1, t);
}

// -- routing ------------------------------------------------------------------------------
namespace {

struct OpInfo {
  std::string name;                 // aten::add.Tensor
  std::string packet;               // aten::add
  bool has_cpu_kernel = false;
  bool mixed_ok = false;            // may mix emu tensors with host tensors of any shape
  std::vector<size_t> generators;   // positions of Generator? arguments
  std::vector<size_t> written;      // positions of arguments the op writes to
  std::atomic<int64_t> count{0};
  std::atomic<bool> reported{false};
};

std::shared_mutex g_ops_mutex;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> g_ops;

std::mutex g_observer_mutex;
std::function<void(const std::string&)> g_observer;
thread_local bool tls_counting = true;

// ops that take host tensors next to device tensors on CUDA too (indices, copies, pinning)
const std::unordered_set<std::string> kMixedOk = {
    "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy",
    "aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_",
    "aten::_unsafe_index", "aten::_unsafe_index_put", "aten::record_stream",
    "aten::_pin_memory", "aten::is_pinned", "aten::set_", "aten::lift_fresh",
    "aten::_local_scalar_dense", "aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
    "aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only",
};

OpInfo& info_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  OpInfo* info = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
    auto it = g_ops.find(key);
    if (it != g_ops.end()) info = it->second.get();
  }
  if (info == nullptr) {
    auto fresh = std::make_unique<OpInfo>();
    const auto& schema = op.schema();
    fresh->packet = schema.name();
    fresh->name = schema.overload_name().empty() ? fresh->packet : fresh->packet + "." + schema.overload_name();
    fresh->has_cpu_kernel = op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
    fresh->mixed_ok = kMixedOk.count(fresh->packet) != 0;
    const auto& args = schema.arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      auto type = args[i].type();
      if (auto opt = type->cast<c10::OptionalType>()) type = opt->getElementType();
      if (type->kind() == c10::TypeKind::GeneratorType) fresh->generators.push_back(i);
      if (args[i].alias_info() && args[i].alias_info()->isWrite()) fresh->written.push_back(i);
    }
    std::unique_lock<std::shared_mutex> lock(g_ops_mutex);
    auto& slot = g_ops[key];
    if (!slot) slot = std::move(fresh);
    info = slot.get();
  }
  return *info;
}

void report_first(OpInfo& info) {
  if (info.reported.exchange(true)) return;
  std::function<void(const std::string&)> observer;
  {
    std::lock_guard<std::mutex> lock(g_observer_mutex);
    observer = g_observer;
  }
  if (observer) observer(info.name);
}

[[noreturn]] void no_route(const OpInfo& info) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "emu: ", info.name, " cannot run on the emulated device: it is not in emu's native op set, ",
      "torch._decomp has no decomposition for it, and torch has no CPU kernel to compute it on the host ",
      "(tried: native, decomposition, host). It is a kernel only some devices provide; if a training ",
      "script reaches it on emu, report the script to the hal project");
}

at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> dev,
                                 std::optional<bool> pin_memory);

// one emu storage seen by a host kernel: the CPU storage that aliases it
struct Aliased {
  c10::StorageImpl* emu;
  c10::Storage alias;
  void* data;           // the alias's bytes when it was made
  size_t nbytes;
};

struct Call {
  std::vector<Aliased> storages;
  // (emu tensor, its CPU alias) for every emu tensor argument
  std::vector<std::pair<at::Tensor, at::Tensor>> tensors;
  c10::DeviceIndex index = -1;
  const at::Tensor* host_arg = nullptr;   // a host tensor of dim > 0 among the arguments
  const OpInfo* info = nullptr;

  c10::Storage alias_of(const c10::Storage& st) {
    auto* impl = st.unsafeGetStorageImpl();
    for (auto& a : storages)
      if (a.emu == impl) return a.alias;
    c10::Storage alias = alias_storage(st);
    storages.push_back({impl, alias, alias.unsafeGetStorageImpl()->mutable_data(), alias.nbytes()});
    return alias;
  }

  void see_device(c10::DeviceIndex d) {
    if (index < 0) {
      index = d;
    } else if (d != index && !info->mixed_ok) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, emu:",
                  static_cast<int>(index), " and emu:", static_cast<int>(d), "! (when checking arguments for ", info->name, ")");
    }
  }

  at::Tensor to_host(const at::Tensor& t) {
    if (!is_emu(t)) {
      if (t.defined() && t.dim() > 0 && !host_arg) host_arg = &t;
      return t;
    }
    see_device(t.device().index());
    at::Tensor alias = tensor_on(alias_of(t.storage()), c10::DispatchKey::CPU, t);
    tensors.emplace_back(t, alias);
    return alias;
  }

  c10::IValue arg_to_host(const c10::IValue& v) {
    if (v.isTensor()) return to_host(v.toTensor());
    if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(to_host(t));
      return out;
    }
    if (v.isList()) {  // Tensor?[] (indices)
      auto list = v.toList();
      if (list.size() == 0 || !list.elementType()->cast<c10::OptionalType>()) return v;
      c10::List<std::optional<at::Tensor>> out;
      out.reserve(list.size());
      for (const c10::IValue& e : list) {
        if (e.isTensor()) out.push_back(to_host(e.toTensor()));
        else out.push_back(std::nullopt);
      }
      return out;
    }
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      auto d = v.toDevice();
      see_device(d.has_index() ? d.index() : current_device());
      return c10::IValue(c10::Device(c10::DeviceType::CPU));
    }
    return v;  // an emu generator is drawn from once the call's size is known (draw_from)
  }

  // a result of the host kernel, as the tensor the caller gets
  at::Tensor from_host(const at::Tensor& r, std::vector<std::pair<c10::StorageImpl*, c10::Storage>>& made) {
    if (!r.defined() || r.device().type() != c10::DeviceType::CPU) return r;
    for (auto& [emu, alias] : tensors)
      if (alias.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) return emu;
    auto* st = r.storage().unsafeGetStorageImpl();
    for (auto& a : storages)  // a view of an argument
      if (a.alias.unsafeGetStorageImpl() == st) {
        for (auto& [emu, alias] : tensors)
          if (emu.storage().unsafeGetStorageImpl() == a.emu)
            return tensor_on(emu.storage(), c10::DispatchKey::PrivateUse1, r);
      }
    if (index < 0) return r;
    if (r._is_zerotensor())  // no memory to adopt: a zero tensor of the device
      return efficient_zero_tensor(r.sizes(), r.scalar_type(), std::nullopt, device(index), std::nullopt);
    for (auto& [cpu, emu] : made)
      if (cpu == st) return tensor_on(emu, c10::DispatchKey::PrivateUse1, r);
    c10::Storage emu = adopted_storage(r.storage(), index);
    made.emplace_back(st, emu);
    return tensor_on(emu, c10::DispatchKey::PrivateUse1, r);
  }

  // a host kernel may resize (or re-seat) an argument it writes: carry that to the emu tensor
  void write_back() {
    for (auto& [emu, alias] : tensors) {
      auto* ei = emu.unsafeGetTensorImpl();
      auto* astore = alias.storage().unsafeGetStorageImpl();
      Aliased* a = nullptr;
      for (auto& s : storages)
        if (s.emu == emu.storage().unsafeGetStorageImpl()) a = &s;
      bool reseated = a == nullptr || astore != a->alias.unsafeGetStorageImpl();
      bool moved = !reseated && (astore->mutable_data() != a->data || astore->nbytes() != a->nbytes);
      bool meta = alias.sizes() != emu.sizes() || alias.strides() != emu.strides() ||
                  alias.storage_offset() != emu.storage_offset();
      if (!reseated && !moved && !meta) continue;
      if (reseated) {
        ei->set_storage_keep_dtype(adopted_storage(alias.storage(), emu.device().index()));
      } else if (moved) {
        auto* es = a->emu;
        es->set_data_ptr_noswap(relabel(astore->set_data_ptr(c10::DataPtr()), emu.device().index()));
        es->set_nbytes(astore->nbytes());
        // the alias now shares the new bytes again, for any other tensor of this call
        astore->set_data_ptr_noswap(c10::DataPtr(es->mutable_data(), c10::Device(c10::DeviceType::CPU)));
        a->data = es->mutable_data();
        a->nbytes = es->nbytes();
      }
      if (meta) ei->set_sizes_and_strides(alias.sizes(), alias.strides(), alias.storage_offset());
    }
  }
};

// the kernel of a native op: torch's CPU kernel on the same bytes
void route_native(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  host_call(op, stack, /*count=*/false);
}

// the kernel of an op outside the native set that the host route claims from torch's composites
void route_counted(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  host_call(op, stack, /*count=*/true);
}

// the number of draws a random op makes, as far as its arguments tell: its largest tensor, or for a factory
// its size (randn, rand's size; randperm's n); an op's draws only need distinct offsets from the next op's
int64_t draws_of(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) {
  int64_t most = 0;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isTensor()) {
      most = std::max(most, v.toTensor().numel());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) most = std::max(most, t.numel());
    } else if (args[i].name() == "size" && v.isIntList()) {
      int64_t n = 1;
      for (int64_t d : v.toIntList()) n *= d;
      most = std::max(most, n);
    } else if (args[i].name() == "n" && v.isInt()) {
      most = std::max(most, v.toInt());
    }
  }
  return most;
}

// a random op's emu generator (given, or the device's default) becomes the CPU generator of its draws
void draw_from(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first, const OpInfo& info,
               c10::DeviceIndex index) {
  int64_t draws = -1;
  for (size_t g : info.generators) {
    c10::IValue& v = (*stack)[first + g];
    at::Generator gen;
    if (v.isGenerator() && v.toGenerator().device().type() == c10::DeviceType::PrivateUse1) {
      gen = v.toGenerator();
    } else if (v.isNone() && index >= 0) {
      gen = default_generator(index);
    } else {
      continue;  // a CPU generator for a host op: torch's own
    }
    if (draws < 0) draws = draws_of(op.schema(), *stack, first);
    v = c10::IValue(host_generator(gen, draws));
  }
}

}  // namespace

void host_call(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool count) {
  check_not_forked();
  OpInfo& info = info_for(op);
  const size_t nargs = op.schema().arguments().size();
  const size_t first = stack->size() - nargs;
  Call call;
  call.info = &info;
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue& v = (*stack)[first + i];
    v = call.arg_to_host(v);
  }
  if (call.index >= 0) {
    if (call.host_arg && !info.mixed_ok) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, emu:",
                  static_cast<int>(call.index), " and ", call.host_arg->device(), "! (when checking arguments for ", info.name, ")");
    }
  }
  if (!info.generators.empty()) draw_from(op, stack, first, info, call.index);
  if (!info.has_cpu_kernel) no_route(info);
  if (count && tls_counting) {
    info.count.fetch_add(1);
    report_first(info);
  }
  std::optional<c10::DeviceGuard> guard;
  if (call.index >= 0) guard.emplace(device(call.index));
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  call.write_back();
  const size_t nret = op.schema().returns().size();
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> made;
  for (size_t i = stack->size() - nret; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) {
      v = call.from_host(v.toTensor(), made);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> out;
      out.reserve(list.size());
      for (const at::Tensor& t : list) out.push_back(call.from_host(t, made));
      v = out;
    }
  }
}

namespace {
std::mutex g_kernels_mutex;
std::unique_ptr<torch::Library> g_kernels;
}  // namespace

void set_kernels(const std::vector<std::string>& native, const std::vector<std::string>& counted) {
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  g_kernels.reset();  // deregisters the previous set
  if (native.empty() && counted.empty()) return;
  g_kernels = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                               __FILE__, __LINE__);
  for (const auto& name : native)
    g_kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&route_native>());
  for (const auto& name : counted)
    g_kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&route_counted>());
}

std::vector<std::pair<std::string, int64_t>> host_counts() {
  std::vector<std::pair<std::string, int64_t>> out;
  std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
  for (auto& [key, info] : g_ops) {
    int64_t n = info->count.load();
    if (n > 0) out.emplace_back(info->name, n);
  }
  return out;
}

void reset_host_counts() {
  std::shared_lock<std::shared_mutex> lock(g_ops_mutex);
  for (auto& [key, info] : g_ops) {
    info->count.store(0);
    info->reported.store(false);
  }
}

void set_fallback_observer(std::function<void(const std::string&)> observer) {
  std::lock_guard<std::mutex> lock(g_observer_mutex);
  g_observer = std::move(observer);
}

bool set_counting(bool on) {
  bool old = tls_counting;
  tls_counting = on;
  return old;
}

bool counting() { return tls_counting; }

// -- the device's own kernels ----------------------------------------------------------------
namespace {

c10::DeviceIndex index_of(std::optional<c10::Device> d) {
  if (!d.has_value() || !d->has_index()) return current_device();
  check_index(d->index());
  return d->index();
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> dev,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> fmt) {
  TORCH_CHECK(!pin_memory.value_or(false), "emu: only host tensors can be pinned, not emu tensors");
  c10::DeviceGuard guard(device(index_of(dev)));
  auto t = at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                     c10::dtype_or_default(dtype), fmt);
  (void)layout;
  return t;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> dev,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "emu: only host tensors can be pinned, not emu tensors");
  c10::DeviceGuard guard(device(index_of(dev)));
  (void)layout;
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// a tensor of zeros without memory, as autograd uses for gradients known to be zero
at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> dev,
                                 std::optional<bool> pin_memory) {
  (void)layout;
  (void)pin_memory;
  auto d = device(index_of(dev));
  at::native::ZeroTensorAllocator allocator(d);
  auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

void grow_storage(const at::Tensor& self, size_t nbytes) {
  auto* st = self.storage().unsafeGetStorageImpl();
  if (nbytes <= st->nbytes()) return;
  TORCH_CHECK(st->resizable(), "emu: trying to resize a storage that is not resizable");
  c10::DeviceGuard guard(self.device());
  c10::DataPtr fresh = device_allocator()->allocate(nbytes);
  if (st->nbytes()) std::memcpy(fresh.get(), st->data(), st->nbytes());
  st->set_data_ptr_noswap(std::move(fresh));
  st->set_nbytes(nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> fmt) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (fmt.has_value() && *fmt != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*fmt);
  size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                 self.storage_offset());
  grow_storage(self, need);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "emu: set_() needs a storage on the emulated device, got one on ", source.device(),
              "; move it first (storage.to('emu'))");
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, offset);
  size_t need = at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(), offset);
  grow_storage(self, need);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  return set_storage(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  check_not_forked();
  at::Tensor src = is_emu(self) ? cpu_alias(self) : self;
  at::Tensor out = is_emu(dst) ? cpu_alias(dst) : dst;
  out.copy_(src, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

void record_stream(at::Tensor&, c10::Stream) {}  // work is synchronous: nothing to track

// a host tensor's TensorImpl can take an emu tensor's (and the reverse), as vendors declare for their
// device (torch lists only its in-tree dense backends): Module.to("emu") then sets param.data and keeps
// the Parameter objects an optimizer, DeepSpeed's name maps or a weakref already hold, as on CUDA
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().is_cpu() || t.device().is_privateuseone());
  };
  return self.key_set() == from.key_set() || (dense(self) && dense(from));
}

// dropout draws its mask from the emu device's generator, as it would from a device's own
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  auto index = input.device().index();
  c10::DeviceGuard guard(input.device());
  at::Tensor x = cpu_alias(input);
  if (input.numel() == 0) return {input.clone(), at::empty_like(input, input.options().dtype(at::kBool))};
  if (train.has_value() && !*train)
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  double keep = 1.0 - p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(x);  // the input's layout, as the CPU's dropout draws it
  mask.bernoulli_(keep, host_generator(default_generator(index), input.numel()));
  at::Tensor out = x.mul(mask).mul_(scale);
  return {adopt(out, index), adopt(mask.to(at::kBool), index)};
}

// -- recurrent cells torch fuses on devices (CUDA, XPU, PrivateUse1) -----------------------
struct OnHost {
  c10::DeviceIndex index;
  explicit OnHost(const at::Tensor& any) : index(any.device().index()) {}
  at::Tensor in(const at::Tensor& t) const { return is_emu(t) ? cpu_alias(t) : t; }
  at::Tensor in(const std::optional<at::Tensor>& t) const {
    return t.has_value() && t->defined() ? in(*t) : at::Tensor();
  }
  at::Tensor out(const at::Tensor& t) const { return t.defined() ? adopt(t, index) : t; }  // keeps its layout
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  OnHost h(input_gates);
  at::Tensor gates = h.in(input_gates) + h.in(hidden_gates);
  at::Tensor b1 = h.in(input_bias), b2 = h.in(hidden_bias);
  if (b1.defined()) gates = gates + b1 + b2;
  auto chunks = gates.chunk(4, 1);
  at::Tensor ig = chunks[0].sigmoid(), fg = chunks[1].sigmoid(), cg = chunks[2].tanh(), og = chunks[3].sigmoid();
  at::Tensor cy = fg * h.in(cx) + ig * cg;
  at::Tensor hy = og * cy.tanh();
  at::Tensor workspace = at::cat({ig, fg, cg, og}, 1);
  return {h.out(hy), h.out(cy), h.out(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  OnHost h(workspace);
  at::Tensor ws = h.in(workspace), c = h.in(cy), x = h.in(cx);
  at::Tensor ghy = h.in(grad_hy), gcy = h.in(grad_cy);
  auto parts = ws.chunk(4, 1);
  const at::Tensor &ig = parts[0], &fg = parts[1], &cg = parts[2], &og = parts[3];
  at::Tensor tanh_cy = c.tanh();
  at::Tensor go = ghy.defined() ? ghy : at::zeros_like(c);
  at::Tensor g_og = go * tanh_cy;
  at::Tensor gc = go * og * (1 - tanh_cy * tanh_cy);
  if (gcy.defined()) gc = gc + gcy;
  at::Tensor g_ig = gc * cg * (1 - ig) * ig;
  at::Tensor g_fg = gc * x * (1 - fg) * fg;
  at::Tensor g_cg = gc * ig * (1 - cg * cg);
  g_og = g_og * (1 - og) * og;
  at::Tensor grad_gates = at::cat({g_ig, g_fg, g_cg, g_og}, 1);
  at::Tensor grad_cx = gc * fg;
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {h.out(grad_gates), h.out(grad_cx), h.out(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  OnHost h(input_gates);
  at::Tensor ig = h.in(input_gates), hg = h.in(hidden_gates), x = h.in(hx);
  at::Tensor b1 = h.in(input_bias), b2 = h.in(hidden_bias);
  if (b1.defined()) {
    ig = ig + b1;
    hg = hg + b2;
  }
  auto i = ig.chunk(3, 1);
  auto g = hg.chunk(3, 1);
  at::Tensor rg = (i[0] + g[0]).sigmoid();
  at::Tensor zg = (i[1] + g[1]).sigmoid();
  at::Tensor ng = (i[2] + rg * g[2]).tanh();
  at::Tensor hy = ng + zg * (x - ng);
  at::Tensor workspace = at::cat({rg, zg, ng, x, g[2]}, 1);
  return {h.out(hy), h.out(workspace)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  OnHost h(workspace);
  at::Tensor go = h.in(grad_hy);
  auto w = h.in(workspace).chunk(5, 1);
  const at::Tensor &rg = w[0], &zg = w[1], &ng = w[2], &hx = w[3], &hn = w[4];
  at::Tensor g_z = go * (hx - ng) * (1 - zg) * zg;
  at::Tensor g_hx = go * zg;
  at::Tensor g_n = go * (1 - zg) * (1 - ng * ng);
  at::Tensor g_hn = g_n * rg;
  at::Tensor g_r = g_n * hn * (1 - rg) * rg;
  at::Tensor grad_input_gates = at::cat({g_r, g_z, g_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({g_r, g_z, g_hn}, 1);
  at::Tensor gib = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor ghb = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {h.out(grad_input_gates), h.out(grad_hidden_gates), h.out(g_hx), h.out(gib), h.out(ghb)};
}

// torch routes convolutions of devices other than CPU / CUDA / MPS to these two
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  OnHost h(input);
  c10::DeviceGuard guard(input.device());
  at::Tensor b = h.in(bias);
  return h.out(at::convolution(h.in(input), h.in(weight), b.defined() ? std::optional<at::Tensor>(b) : std::nullopt,
                               stride, padding, dilation, transposed, output_padding, groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  OnHost h(input);
  c10::DeviceGuard guard(input.device());
  std::optional<std::vector<int64_t>> bias_sizes;
  if (output_mask[2]) bias_sizes = std::vector<int64_t>{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(
      h.in(grad_output), h.in(input), h.in(weight),
      bias_sizes.has_value() ? std::optional<c10::IntArrayRef>(*bias_sizes) : std::nullopt, stride, padding,
      dilation, transposed, output_padding, groups, output_mask);
  return {h.out(gi), h.out(gw), h.out(gb)};
}

// -- SyncBatchNorm's per-device statistics (torch uses them for CUDA and PrivateUse1) --------
// the channel dimension is 1; reductions run over every other dimension, in float
std::vector<int64_t> non_channel_dims(const at::Tensor& x) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);
  return dims;
}

at::Tensor per_channel(const at::Tensor& v, const at::Tensor& like) {  // (C) -> (1, C, 1, ...)
  std::vector<int64_t> shape(like.dim(), 1);
  shape[1] = like.size(1);
  return v.reshape(shape);
}

at::ScalarType acc_type(const at::Tensor& x) {
  return at::isReducedFloatingType(x.scalar_type()) ? at::kFloat : x.scalar_type();
}

std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps) {
  OnHost h(input);
  at::Tensor x = h.in(input).to(acc_type(input));
  auto dims = non_channel_dims(x);
  at::Tensor mean = x.mean(dims);
  at::Tensor var = (x - per_channel(mean, x)).square().mean(dims);
  return {h.out(mean), h.out((var + eps).rsqrt())};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  OnHost h(mean);
  at::Tensor m = h.in(mean), is = h.in(invstd), n = h.in(counts).to(m.scalar_type()).unsqueeze(1);
  at::Tensor total = n.sum();
  at::Tensor gmean = (m * n).sum(0) / total;
  at::Tensor var_i = is.square().reciprocal() - eps;
  at::Tensor gvar = (n * (var_i + (m - gmean).square())).sum(0) / total;
  at::Tensor rm = h.in(running_mean), rv = h.in(running_var);
  if (rm.defined()) rm.mul_(1 - momentum).add_(gmean.to(rm.scalar_type()) * momentum);
  if (rv.defined()) {
    at::Tensor unbiased = gvar * total / (total - 1);
    rv.mul_(1 - momentum).add_(unbiased.to(rv.scalar_type()) * momentum);
  }
  (void)input;
  return {h.out(gmean), h.out((gvar + eps).rsqrt())};
}

at::Tensor batch_norm_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double eps) {
  (void)eps;
  OnHost h(input);
  at::Tensor x = h.in(input);
  at::Tensor y = (x.to(acc_type(input)) - per_channel(h.in(mean), x)) * per_channel(h.in(invstd), x);
  at::Tensor w = h.in(weight), b = h.in(bias);
  if (w.defined()) y = y * per_channel(w, x);
  if (b.defined()) y = y + per_channel(b, x);
  return h.out(y.to(input.scalar_type()));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  (void)weight;
  OnHost h(input);
  at::Tensor x = h.in(input).to(acc_type(input)), dy = h.in(grad_out).to(acc_type(input));
  auto dims = non_channel_dims(x);
  at::Tensor sum_dy = dy.sum(dims);
  at::Tensor sum_dy_xmu = (dy * (x - per_channel(h.in(mean), x))).sum(dims);
  at::Tensor gw = weight_g ? sum_dy_xmu * h.in(invstd) : at::Tensor();
  at::Tensor gb = bias_g ? sum_dy : at::Tensor();
  if (!input_g) return {at::Tensor(), at::Tensor(), h.out(gw), h.out(gb)};
  return {h.out(sum_dy), h.out(sum_dy_xmu), h.out(gw), h.out(gb)};
}

at::Tensor batch_norm_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  OnHost h(input);
  at::Tensor x = h.in(input).to(acc_type(input)), dy = h.in(grad_out).to(acc_type(input));
  at::Tensor total = h.in(count).to(x.scalar_type()).sum();
  at::Tensor is = per_channel(h.in(invstd), x);
  at::Tensor mean_dy = per_channel(h.in(sum_dy), x) / total;
  at::Tensor mean_dy_xmu = per_channel(h.in(sum_dy_xmu), x) / total;
  at::Tensor g = (dy - mean_dy - (x - per_channel(h.in(mean), x)) * is * is * mean_dy_xmu) * is;
  at::Tensor w = h.in(weight);
  if (w.defined()) g = g * per_channel(w, x);
  return h.out(g.to(input.scalar_type()));
}

// scaled_dot_product_attention asks the device which fused kernel to use; the CPU's answer
// (its flash kernel where it applies, else math) keeps emu's attention the CPU's, bit for bit.
// The answer depends on shapes, strides, dtypes and flags only, and torch asks it of fake tensors
// too (torch.compile's tracing: the meta kernel forwards PrivateUse1 inputs here), whose bytes
// must not be touched: the CPU is asked with tensors that carry the metadata and no bytes.
at::Tensor metadata_only(const at::Tensor& t) {
  return at::from_blob(nullptr, t.sizes(), t.strides(), t.options().device(at::kCPU));
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale
#if HAL_EMU_SDP_GQA
                         , bool enable_gqa
#endif
) {
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value() && attn_mask->defined()) mask = metadata_only(*attn_mask);
  // the CPU's kernel itself, not through the dispatcher: under torch.compile's FakeTensorMode a
  // dispatched call would reach the mode with these real (byte-less) CPU tensors
  return at::native::_fused_sdp_choice_cpp(metadata_only(query), metadata_only(key), metadata_only(value), mask,
                                           dropout_p, is_causal, scale
#if HAL_EMU_SDP_GQA
                                           , enable_gqa
#endif
  );
}

#if !HAL_EMU_PINNED_HOOKS
// torch 2.4 pins through the aten ops dispatched to the device asked for (the hooks' isPinnedPtr from 2.5)
bool is_pinned_kernel(const at::Tensor& self, std::optional<at::Device>) {
  return is_pinned(self.storage().data());
}

at::Tensor pin_memory_kernel(const at::Tensor& self, std::optional<at::Device>) {
  size_t nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, pinned_allocator(), /*resizable=*/false);
  at::Tensor pinned = at::empty({0}, self.options()).set_(storage, 0, self.sizes(), self.strides());
  pinned.copy_(self);
  return pinned;
}
#endif

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_efficientzerotensor", efficient_zero_tensor);
  m.impl("as_strided", as_strided);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("native_dropout", native_dropout);
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
  m.impl("batch_norm_stats", batch_norm_stats);
  m.impl("batch_norm_gather_stats_with_counts", batch_norm_gather_stats_with_counts);
  m.impl("batch_norm_elemt", batch_norm_elemt);
  m.impl("batch_norm_backward_reduce", batch_norm_backward_reduce);
  m.impl("batch_norm_backward_elemt", batch_norm_backward_elemt);
#if !HAL_EMU_PINNED_HOOKS
  m.impl("is_pinned", is_pinned_kernel);
  m.impl("_pin_memory", pin_memory_kernel);
#endif
}

// a composite op with a device kernel: torch 2.4 then leaves AutogradPrivateUse1 without one (no math kernel, no
// fallthrough); the answer is a bool, so autograd has nothing to record
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace hal_emu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &hal_emu::fused_sdp_choice)
}  // namespace at::native

namespace hal_emu {

// copies handle the conjugate and negative bits themselves (the host copy_ resolves them);
// torch's fallbacks for those keys would materialise through clone -> copy_ -> _copy_from again
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace hal_emu
