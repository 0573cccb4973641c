// Memory of the emulated accelerator: the device allocator (host memory counted as device memory), its
// statistics, and pinned host memory.
#include "emu.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#if HAL_EMU_DEVICE_ALLOCATOR
#include <c10/core/CachingDeviceAllocator.h>
#endif
#if HAL_EMU_HOST_ALLOCATOR
#include <ATen/core/CachingHostAllocator.h>
#endif

#include <unistd.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace hal_emu {

// -- statistics ---------------------------------------------------------------------------
namespace {

// torch's small pool holds allocations up to 1 MiB (CUDA's kSmallSize)
constexpr int64_t kSmallSize = 1 << 20;

struct DeviceCounters {
  std::mutex mutex;
  MemoryStats stats;
};
DeviceCounters g_counters[kMaxDevices];

void increase(Stat& s, int64_t amount) {
  s.current += amount;
  s.allocated += amount;
  if (s.current > s.peak) s.peak = s.current;
}

void decrease(Stat& s, int64_t amount) {
  s.current -= amount;
  s.freed += amount;
}

// a zero-byte allocation owns no memory and is not counted, as on CUDA
void count(c10::DeviceIndex index, int64_t nbytes, void (*change)(Stat&, int64_t)) {
  if (nbytes == 0) return;
  auto& c = g_counters[index];
  Pool pool = nbytes <= kSmallSize ? kSmallPool : kLargePool;
  std::lock_guard<std::mutex> lock(c.mutex);
  for (Pool p : {kAllPools, pool}) {
    change(c.stats.blocks[p], 1);
    change(c.stats.bytes[p], nbytes);
  }
}

void count_alloc(c10::DeviceIndex index, int64_t nbytes) { count(index, nbytes, increase); }

void count_free(c10::DeviceIndex index, int64_t nbytes) { count(index, nbytes, decrease); }

void count_oom(c10::DeviceIndex index) {
  auto& c = g_counters[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  ++c.stats.num_ooms;
}

}  // namespace

MemoryStats memory_stats(c10::DeviceIndex index) {
  check_index(index);
  auto& c = g_counters[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak(c10::DeviceIndex index) {
  check_index(index);
  auto& c = g_counters[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  for (int p = 0; p < kPools; ++p) {
    c.stats.blocks[p].peak = c.stats.blocks[p].current;
    c.stats.bytes[p].peak = c.stats.bytes[p].current;
  }
}

void reset_accumulated(c10::DeviceIndex index) {
  check_index(index);
  auto& c = g_counters[index];
  std::lock_guard<std::mutex> lock(c.mutex);
  for (int p = 0; p < kPools; ++p) {
    for (Stat* s : {&c.stats.blocks[p], &c.stats.bytes[p]}) s->allocated = s->freed = 0;
  }
  c.stats.num_ooms = 0;
}

std::pair<size_t, size_t> memory_info(c10::DeviceIndex index) {
  check_index(index);
  auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  return {page * static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)), page * static_cast<size_t>(sysconf(_SC_PHYS_PAGES))};
}

// -- allocators ---------------------------------------------------------------------------
namespace {

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
  c10::DeviceIndex index = current_device();
  void* ptr = nullptr;
  if (nbytes) {
    try {
      ptr = c10::alloc_cpu(nbytes);
    } catch (const c10::Error&) {  // the host's out of memory is the device's
      count_oom(index);
      throw;
    }
  }
  count_alloc(index, static_cast<int64_t>(nbytes));
  return {ptr, new Block{ptr, static_cast<int64_t>(nbytes), index}, &free_block, label};
}

#if HAL_EMU_DEVICE_ALLOCATOR
// torch.accelerator's memory API asks the device's allocator through this interface (checked on torch 2.13)
using AllocatorBase = c10::DeviceAllocator;

void copy_stats(const Stat (&from)[kPools], c10::CachingDeviceAllocator::StatArray& to) {
  for (int p = 0; p < kPools; ++p) {
    to[p].current = from[p].current;
    to[p].peak = from[p].peak;
    to[p].allocated = from[p].allocated;
    to[p].freed = from[p].freed;
  }
}
#else
using AllocatorBase = c10::Allocator;
#endif

struct DeviceAllocator final : AllocatorBase {
  c10::DataPtr allocate(size_t nbytes) override {
    check_not_forked();
    return allocate_block(nbytes, c10::Device(c10::DeviceType::PrivateUse1, current_device()));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }

#if HAL_EMU_DEVICE_ALLOCATOR
  bool initialized() override { return true; }
  // nothing is cached: memory returns to the host when its last tensor goes
  void emptyCache(c10::MempoolId_t) override {}
  // work is synchronous: no stream can still be using a block when it is freed
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    MemoryStats s = memory_stats(index);
    c10::CachingDeviceAllocator::DeviceStats out;
    copy_stats(s.blocks, out.allocation);
    copy_stats(s.blocks, out.segment);
    copy_stats(s.blocks, out.active);
    copy_stats(s.bytes, out.allocated_bytes);
    copy_stats(s.bytes, out.reserved_bytes);
    copy_stats(s.bytes, out.active_bytes);
    copy_stats(s.bytes, out.requested_bytes);
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.blocks[kAllPools].allocated;
    out.num_device_free = s.blocks[kAllPools].freed;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex index) override { reset_accumulated(index); }
  void resetPeakStats(c10::DeviceIndex index) override { reset_peak(index); }
  // not marked override: DeviceAllocator gained getMemoryInfo after 2.9; where it has none this is unused
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) { return memory_info(index); }
#endif
};

// Emulated device memory seen as host memory, for the host kernels that resize a result.
struct AliasAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override { return allocate_block(nbytes, c10::Device(c10::DeviceType::CPU)); }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
};

// Page-locked host memory, emulated: ordinary host memory whose pointers are remembered so that
// Tensor.is_pinned() answers as on a device.
std::mutex g_pinned_mutex;
// under g_pinned_mutex: the size of each pinned allocation, and their counters
std::unordered_map<const void*, size_t> g_pinned;
Stat g_pinned_blocks, g_pinned_bytes;

void free_pinned(void* ptr) {
  if (ptr) {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.find(ptr);
    if (it != g_pinned.end()) {
      decrease(g_pinned_blocks, 1);
      decrease(g_pinned_bytes, static_cast<int64_t>(it->second));
      g_pinned.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

#if HAL_EMU_HOST_ALLOCATOR
// torch.accelerator.empty_host_cache and the host allocator registry ask for this (checked on torch 2.13)
using PinnedBase = at::HostAllocator;
#else
using PinnedBase = c10::Allocator;
#endif

struct PinnedAllocator final : PinnedBase {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned[ptr] = nbytes;
      increase(g_pinned_blocks, 1);
      increase(g_pinned_bytes, static_cast<int64_t>(nbytes));
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }

#if HAL_EMU_HOST_ALLOCATOR
  // copies are synchronous: pinned memory is free to reuse as soon as its tensor goes
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // nothing is cached
  at::HostStats get_stats() override {
    at::HostStats out;
    auto copy = [](const Stat& from, auto& to) {
      to.current = from.current;
      to.peak = from.peak;
      to.allocated = from.allocated;
      to.freed = from.freed;
    };
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    // nothing is cached: every pinned allocation is active
    copy(g_pinned_blocks, out.active_requests);
    copy(g_pinned_blocks, out.allocations);
    copy(g_pinned_bytes, out.active_bytes);
    copy(g_pinned_bytes, out.allocated_bytes);
    out.num_host_alloc = g_pinned_blocks.allocated;
    out.num_host_free = g_pinned_blocks.freed;
    return out;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (Stat* s : {&g_pinned_blocks, &g_pinned_bytes}) s->allocated = s->freed = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    for (Stat* s : {&g_pinned_blocks, &g_pinned_bytes}) s->peak = s->current;
  }
#endif
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

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)
#if HAL_EMU_HOST_ALLOCATOR
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator)
#endif

}  // namespace hal_emu
