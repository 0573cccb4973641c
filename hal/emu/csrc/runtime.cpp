// Devices, memory, streams and events, generators and hooks of the emulated accelerator.
#include "emu.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace hal_emu {

// -- devices ------------------------------------------------------------------------------
namespace {

int read_device_count() {
  const char* env = std::getenv("HAL_EMU_DEVICES");
  if (env == nullptr || *env == '\0') return 8;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  // the Python side validates the variable with a clear message before loading; stay safe
  if (end == env || *end != '\0' || n < 1 || n > kMaxDevices) return 8;
  return static_cast<int>(n);
}

const int g_device_count = read_device_count();
thread_local c10::DeviceIndex tls_device = 0;
DeviceStats g_stats[kMaxDevices];

}  // namespace

int device_count() { return g_device_count; }

c10::DeviceIndex current_device() { return tls_device; }

void check_index(int64_t index) {
  TORCH_CHECK(index >= 0 && index < g_device_count, "emu: device index ", index,
              " is out of range; this process has ", g_device_count,
              " emulated devices (0..", g_device_count - 1, "), set by HAL_EMU_DEVICES");
}

void set_device(c10::DeviceIndex index) {
  check_index(index);
  tls_device = index;
}

c10::Device device(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index < 0 ? tls_device : index);
}

// -- memory -------------------------------------------------------------------------------
DeviceStats& stats(c10::DeviceIndex index) {
  check_index(index);
  return g_stats[index];
}

void reset_peak(c10::DeviceIndex index) {
  auto& s = stats(index);
  s.peak.store(s.allocated.load());
}

namespace {

void count_alloc(c10::DeviceIndex index, int64_t nbytes) {
  auto& s = g_stats[index];
  int64_t now = s.allocated.fetch_add(nbytes) + nbytes;
  int64_t peak = s.peak.load();
  while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
  }
  s.num_alloc.fetch_add(1);
  s.active.fetch_add(1);
}

void count_free(c10::DeviceIndex index, int64_t nbytes) {
  auto& s = g_stats[index];
  s.allocated.fetch_sub(nbytes);
  s.num_free.fetch_add(1);
  s.active.fetch_sub(1);
}

// one allocation of emulated device memory
struct Block {
  void* ptr;
  int64_t nbytes;
  c10::DeviceIndex device;
};

void free_block(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  count_free(b->device, b->nbytes);
  c10::free_cpu(b->ptr);
  delete b;
}

// device bytes that belong to a CPU storage (adopted from a host kernel's result)
struct Adopted {
  c10::Storage storage;
  int64_t nbytes;
  c10::DeviceIndex device;
};

void free_adopted(void* ctx) {
  auto* a = static_cast<Adopted*>(ctx);
  count_free(a->device, a->nbytes);
  delete a;
}

c10::DataPtr allocate_block(size_t nbytes, c10::Device label) {
  c10::DeviceIndex index = tls_device;
  void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
  count_alloc(index, static_cast<int64_t>(nbytes));
  return {ptr, new Block{ptr, static_cast<int64_t>(nbytes), index}, &free_block, label};
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    check_not_forked();
    return allocate_block(nbytes, c10::Device(c10::DeviceType::PrivateUse1, tls_device));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    std::memcpy(dest, src, count);
  }
};

// Emulated device memory seen as host memory, for the host kernels that resize a result.
struct AliasAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_block(nbytes, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    std::memcpy(dest, src, count);
  }
};

// Page-locked host memory, emulated: ordinary host memory whose pointers are remembered so
// that Tensor.is_pinned() answers as on a device.
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    std::memcpy(dest, src, count);
  }
};

DeviceAllocator g_device_allocator;
AliasAllocator g_alias_allocator;
PinnedAllocator g_pinned_allocator;

}  // namespace

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* alias_allocator() { return &g_alias_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool is_pinned(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(ptr) != 0;
}

c10::DataPtr adopt_bytes(c10::Storage cpu, c10::DeviceIndex index) {
  void* ptr = cpu.mutable_data();
  int64_t nbytes = static_cast<int64_t>(cpu.nbytes());
  count_alloc(index, nbytes);
  return {ptr, new Adopted{std::move(cpu), nbytes, index}, &free_adopted,
          c10::Device(c10::DeviceType::PrivateUse1, index)};
}

c10::DataPtr relabel(c10::DataPtr&& dp, c10::DeviceIndex index) {
  void* ptr = dp.get();
  c10::DeleterFnPtr deleter = dp.get_deleter();
  if (deleter == &free_block) {
    void* ctx = dp.release_context();
    auto* b = static_cast<Block*>(ctx);
    if (b->device != index) {  // counted on the device the bytes now belong to
      count_free(b->device, b->nbytes);
      count_alloc(index, b->nbytes);
      b->device = index;
    }
    return {ptr, ctx, deleter, c10::Device(c10::DeviceType::PrivateUse1, index)};
  }
  // bytes from another allocator: keep them alive through a storage that owns them
  c10::Storage owner(c10::Storage::use_byte_size_t(), 0, std::move(dp), nullptr, false);
  return adopt_bytes(std::move(owner), index);
}

c10::Storage adopted_host_storage(const c10::Storage& st) {
  const c10::DataPtr& dp = st.data_ptr();
  if (dp.get_deleter() != &free_adopted) return c10::Storage();
  return static_cast<Adopted*>(dp.get_context())->storage;
}

void move_to_host_storage(const at::Tensor& t, c10::Storage host) {
  c10::Storage st = t.storage();
  TORCH_CHECK(host.nbytes() >= st.nbytes(), "emu: host storage of ", host.nbytes(), " bytes is too small for ",
              st.nbytes());
  if (st.nbytes()) std::memcpy(host.mutable_data(), st.data(), st.nbytes());
  st.unsafeGetStorageImpl()->set_data_ptr_noswap(adopt_bytes(std::move(host), t.device().index()));
}

namespace {
std::atomic<bool> g_forked{false};
}

void mark_forked() { g_forked.store(true); }

void check_not_forked() {
  TORCH_CHECK(!g_forked.load(),
              "emu: cannot use the emulated device in a forked subprocess (its device memory is the parent's "
              "and is not shared after fork, as with CUDA); use the 'spawn' start method: "
              "torch.multiprocessing.set_start_method('spawn') or multiprocessing_context='spawn'");
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

// -- streams and events (work is synchronous: streams never overlap) -----------------------
namespace {

thread_local c10::StreamId tls_stream[kMaxDevices] = {0};
std::atomic<c10::StreamId> g_next_stream{1};

struct Event {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
  bool timing = false;
};

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::PrivateUse1, tls_device); }
  void setDevice(c10::Device d) const override {
    if (d.index() >= 0) set_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_device_count) tls_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                       tls_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, index));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool = false) const override { return getNewStream(d, 0); }
  c10::Stream getNewStream(c10::Device d, int = 0) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    check_index(index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                       g_next_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto index = s.device_index();
    check_index(index);
    c10::Stream old(c10::Stream::UNSAFE, s.device(), tls_stream[index]);
    tls_stream[index] = s.id();
    return old;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) {
      auto* e = new Event();
      e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = e;
    }
    auto* e = static_cast<Event*>(*event);
    e->time = std::chrono::steady_clock::now();
    e->recorded = true;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count);
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex) const override {
    auto* a = static_cast<Event*>(event1);
    auto* b = static_cast<Event*>(event2);
    TORCH_CHECK(a && b && a->recorded && b->recorded,
                "emu: both events must be recorded before elapsed_time(); call record() on each");
    TORCH_CHECK(a->timing && b->timing,
                "emu: both events must be created with enable_timing=True to measure elapsed_time()");
    return std::chrono::duration<double, std::milli>(b->time - a->time).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace

// -- generators: a device generator that keeps its state in a CPU generator ----------------
namespace {

struct Generator final : c10::GeneratorImpl {
  Generator(c10::DeviceIndex index, uint64_t seed)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

  void set_current_seed(uint64_t seed) override { host.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host.set_offset(offset); }
  uint64_t get_offset() const override { return host.get_offset(); }
  uint64_t current_seed() const override { return host.current_seed(); }
  uint64_t seed() override { return host.seed(); }
  void set_state(const c10::TensorImpl& new_state) override {
    host.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return host.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  at::Generator host;

 private:
  Generator* clone_impl() const override {
    auto* g = new Generator(device().index(), 0);
    g->host = host.clone();
    return g;
  }
};

std::once_flag g_default_once[kMaxDevices];
at::Generator g_default[kMaxDevices];

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) index = tls_device;
  check_index(index);
  std::call_once(g_default_once[index], [index] {
    g_default[index] = at::make_generator<Generator>(index, c10::default_rng_seed_val);
  });
  return g_default[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  if (index < 0) index = tls_device;
  check_index(index);
  return at::make_generator<Generator>(index, c10::default_rng_seed_val);
}

at::Generator host_generator(const at::Generator& gen) {
  return at::check_generator<Generator>(gen)->host;
}

// -- hooks ------------------------------------------------------------------------------
namespace {

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(g_device_count); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return tls_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    auto old = tls_device;
    if (index >= 0) set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }
  at::Device getDeviceFromPtr(void*) const override { return device(-1); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "emu: trying to resize a storage that is not resizable");
    c10::DeviceIndex index = storage.device().index();
    c10::DeviceIndex old = tls_device;
    tls_device = index;
    c10::DataPtr fresh = g_device_allocator.allocate(newsize);
    tls_device = old;
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep) std::memcpy(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new Hooks()); }
};
RegisterHooks g_register_hooks;

}  // namespace

}  // namespace hal_emu
