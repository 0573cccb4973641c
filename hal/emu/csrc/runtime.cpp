// Devices, streams and events (the device guard) and the PrivateUse1 hooks of the emulated accelerator.
#include "emu.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#if __has_include(<c10/core/DeviceCapability.h>)
#include <c10/core/DeviceCapability.h>
#define HAL_EMU_DEVICE_CAPABILITY 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

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

// -- processes ----------------------------------------------------------------------------
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

// -- streams and events (work is synchronous: streams never overlap) -----------------------
namespace {

// A stream id carries its priority level (0 for priority 0 ... kStreamPriorities - 1 for the highest) in its
// low bits and a sequence number above them; the default stream is id 0 (priority 0).  Each device has a pool
// of kPoolStreams streams per level, handed out in turn, as CUDA's; getNewStream makes a fresh one.
constexpr int kLevelBits = 2;
constexpr int kPoolStreams = 32;
static_assert(kStreamPriorities <= (1 << kLevelBits), "stream priority levels must fit their bits");

thread_local c10::StreamId tls_stream[kMaxDevices] = {0};
std::atomic<c10::StreamId> g_next_stream{kPoolStreams + 1};
std::atomic<uint32_t> g_next_pool[kMaxDevices][kStreamPriorities];

// priority as CUDA takes it (lower is higher), clamped to what the device offers
int level_of(int priority) { return std::clamp(-priority, 0, kStreamPriorities - 1); }

c10::StreamId stream_id(int64_t seq, int level) { return static_cast<c10::StreamId>((seq << kLevelBits) | level); }

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

#if HAL_EMU_HOOKS_AVAILABILITY
#define HAL_EMU_STREAM_NOEXCEPT
#else
#define HAL_EMU_STREAM_NOEXCEPT noexcept
#endif
  c10::Stream getStream(c10::Device d) const HAL_EMU_STREAM_NOEXCEPT override {
    auto index = d.index() < 0 ? tls_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                       tls_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, index));
  }
  // a high-priority pool stream has the highest priority the device offers, as on CUDA
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    check_index(index);
    int level = isHighPriority ? kStreamPriorities - 1 : 0;
    int64_t seq = 1 + g_next_pool[index][level].fetch_add(1) % kPoolStreams;
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), stream_id(seq, level));
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    auto index = d.index() < 0 ? tls_device : d.index();
    check_index(index);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                       stream_id(g_next_stream.fetch_add(1), level_of(priority)));
  }
  c10::Stream exchangeStream(c10::Stream s) const HAL_EMU_STREAM_NOEXCEPT override {
    auto index = s.device_index();
#if HAL_EMU_HOOKS_AVAILABILITY
    check_index(index);
#else
    if (index < 0 || index >= g_device_count) index = tls_device;  // noexcept here: no check can raise
#endif
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
#ifdef HAL_EMU_DEVICE_CAPABILITY
  // torch.accelerator.get_device_capability (2.13): every dtype, as host memory holds them.  Not marked
  // override, so that a torch whose interface lacks the method still compiles it (unused there)
  c10::DeviceCapability getDeviceCapability(c10::Device d) const {
    check_index(d.index() < 0 ? tls_device : d.index());
    return c10::DeviceCapability();
  }
#endif
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
#if HAL_EMU_HOOKS_2_6
  void synchronizeDevice(const c10::DeviceIndex) const override {}
#endif
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

int stream_priority(c10::StreamId id) { return -static_cast<int>(id & ((1 << kLevelBits) - 1)); }

c10::StreamId current_stream(c10::DeviceIndex index) {
  check_index(index);
  return tls_stream[index];
}

c10::StreamId exchange_stream(c10::StreamId id, c10::DeviceIndex index) {
  check_index(index);
  c10::StreamId old = tls_stream[index];
  tls_stream[index] = id;
  return old;
}

// -- hooks ------------------------------------------------------------------------------
namespace {

struct Hooks final : at::PrivateUse1HooksInterface {
#if HAL_EMU_HOOKS_AVAILABILITY
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
#endif
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
#if HAL_EMU_PINNED_HOOKS
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
#else
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) override {
#endif
    return default_generator(index);
  }
#if HAL_EMU_HOOKS_2_6
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }
#endif
  at::Device getDeviceFromPtr(void*) const override { return device(-1); }
#if HAL_EMU_PINNED_HOOKS
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
#endif
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "emu: trying to resize a storage that is not resizable");
    c10::DeviceIndex index = storage.device().index();
    c10::DeviceIndex old = tls_device;
    tls_device = index;
    c10::DataPtr fresh = device_allocator()->allocate(newsize);
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
