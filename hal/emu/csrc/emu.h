// The hal emulated accelerator: a PyTorch device on PrivateUse1 whose memory is host memory.
//
// the device runtime (what a vendor's runtime and its c10 registration provide)
//   runtime.cpp        devices, streams/events (device guard), hooks
//   memory.cpp         the device allocator and its statistics, pinned host memory
//   generator.cpp      the counter-based (seed, offset) generator random ops draw from
// its torch integration at the op level (ATen)
//   aten_kernels.cpp   allocation / view / copy kernels, the router (the native set's kernel, and
//                      the host runs of the fallback), the kernels torch selects only for non-CPU
//                      devices
//   aten_autocast.cpp  AutocastPrivateUse1 with CUDA's cast lists
//   aten_trace.cpp     the op trace (RecordFunction callbacks at the dispatcher)
// and Python's view of all of it
//   python_module.cpp  the Python module hal_emu_C
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// What this torch offers a device, by the release that brought it (the torch window is 2.4 to the newest;
// compiled and tested on each by `make torch-window`).  c10::DeviceAllocator, behind torch.accelerator's memory API
// (memory_allocated, empty_cache, memory_stats, ...), arrived in torch 2.9: before it the allocator is a plain
// c10::Allocator and torch.emu's own memory calls are the only ones.
#define HAL_EMU_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
// PrivateUse1HooksInterface: a const getDefaultGenerator and isPinnedPtr (pinned memory through the hooks) from 2.5;
// before, pinning is the aten ops is_pinned / _pin_memory dispatched to PrivateUse1 (aten_kernels.cpp)
#define HAL_EMU_PINNED_HOOKS HAL_EMU_TORCH_AT_LEAST(2, 5)
// getNewGenerator in the hooks and DeviceGuardImplInterface::synchronizeDevice: 2.6
#define HAL_EMU_HOOKS_2_6 HAL_EMU_TORCH_AT_LEAST(2, 6)
// torch.Generator(device=...) asks the hooks from 2.7; before, the generator registered with
// REGISTER_GENERATOR_PRIVATEUSE1 (generator.cpp)
#define HAL_EMU_GENERATOR_FROM_HOOKS HAL_EMU_TORCH_AT_LEAST(2, 7)
// the hooks' isBuilt / isAvailable, and getStream / exchangeStream no longer noexcept: 2.7
#define HAL_EMU_HOOKS_AVAILABILITY HAL_EMU_TORCH_AT_LEAST(2, 7)
// torch.library.Library.fallback (a boxed fallback written in Python): 2.5; before, python_module.cpp registers a
// boxed C++ fallback that calls the Python one
#define HAL_EMU_PY_FALLBACK_API HAL_EMU_TORCH_AT_LEAST(2, 5)
// scaled_dot_product_attention's enable_gqa (and _fused_sdp_choice_stub's argument for it): 2.5
#define HAL_EMU_SDP_GQA HAL_EMU_TORCH_AT_LEAST(2, 5)
#define HAL_EMU_DEVICE_ALLOCATOR HAL_EMU_TORCH_AT_LEAST(2, 9)
// at::HostAllocator registered for the device (torch 2.13's torch.accelerator.empty_host_cache crashes the
// process on a device without one): its interface moved between releases, so only from the release compiled here
#define HAL_EMU_HOST_ALLOCATOR HAL_EMU_TORCH_AT_LEAST(2, 13)

namespace hal_emu {

constexpr int kMaxDevices = 64;

// -- devices ------------------------------------------------------------------------------
int device_count();                       // HAL_EMU_DEVICES (default 8), fixed at load
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);  // checked
void check_index(int64_t index);
c10::Device device(c10::DeviceIndex index);

// -- memory -------------------------------------------------------------------------------
// One counter as torch's caching allocators keep them (c10::CachingAllocator::Stat).
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
};
// torch's pools, in the order of its StatType: all, small (up to 1 MiB), large
enum Pool : int { kAllPools = 0, kSmallPool = 1, kLargePool = 2, kPools = 3 };
// The device's counters, the one source of its memory statistics (torch.emu.memory_stats and, from torch
// 2.9, torch.accelerator's).  The allocator does not cache: every allocation is its own segment and active
// block, so segments, active blocks and reserved, active and requested bytes are these two counters.
struct MemoryStats {
  Stat blocks[kPools];  // allocations
  Stat bytes[kPools];   // allocated bytes
  int64_t num_ooms = 0;
};
MemoryStats memory_stats(c10::DeviceIndex index);  // a snapshot
void reset_peak(c10::DeviceIndex index);
void reset_accumulated(c10::DeviceIndex index);
// (free, total) bytes of device ``index``: host memory, which emulated device memory is
std::pair<size_t, size_t> memory_info(c10::DeviceIndex index);
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned(const void* ptr);

// a DataPtr on emu device ``index`` that owns ``cpu``'s bytes (zero copy; counted as device memory)
c10::DataPtr adopt_bytes(c10::Storage cpu, c10::DeviceIndex index);
// the bytes of ``dp`` (allocated through the alias allocator) re-labelled as emu device memory
c10::DataPtr relabel(c10::DataPtr&& dp, c10::DeviceIndex index);
// allocator of CPU aliases: a CPU kernel that resizes an alias gets emu-counted memory
c10::Allocator* alias_allocator();

// the host storage whose bytes emu storage ``st`` uses (set by adopt_bytes), or an undefined one
c10::Storage adopted_host_storage(const c10::Storage& st);
// copy the bytes of emu tensor ``t``'s storage into ``host`` (large enough), then make the
// storage use ``host``'s bytes from now on (every view follows): the way into shared memory
void move_to_host_storage(const at::Tensor& t, c10::Storage host);

// -- processes ----------------------------------------------------------------------------
// after fork() the child's copy of emulated device memory is not the parent's: like CUDA,
// the device refuses work in a forked child (use the spawn start method)
void mark_forked();
void check_not_forked();

// -- streams ------------------------------------------------------------------------------
// stream priorities, as CUDA takes them: 0 (the default, lowest) to -(kStreamPriorities - 1) (highest);
// work is synchronous, so a priority orders nothing
constexpr int kStreamPriorities = 4;
int stream_priority(c10::StreamId id);
// the current stream of device ``index`` on this thread (what the device guard's getStream answers), and
// making ``id`` current there (its exchangeStream), for the Python module on a torch without torch.accelerator
c10::StreamId current_stream(c10::DeviceIndex index);
c10::StreamId exchange_stream(c10::StreamId id, c10::DeviceIndex index);

// -- generators ---------------------------------------------------------------------------
// A counter-based generator with CUDA's state: (seed, offset), 16 bytes.  A random op reserves the offsets
// of its draws and runs torch's CPU kernel with a CPU generator made from (seed, first offset) alone.
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);
// reserve ``numel`` draws from emu generator ``gen`` and return the CPU generator that makes them
at::Generator host_generator(const at::Generator& gen, int64_t numel);

// -- aliases ------------------------------------------------------------------------------
bool is_emu(const at::Tensor& t);
// a CPU tensor over the bytes of emu tensor ``t`` (same sizes, strides, offset; keeps t's
// storage alive)
at::Tensor cpu_alias(const at::Tensor& t);
// an emu tensor on device ``index`` over the bytes of CPU tensor ``t`` (zero copy)
at::Tensor adopt(const at::Tensor& t, c10::DeviceIndex index);

// -- routing ------------------------------------------------------------------------------
// the router is the PrivateUse1 kernel of the ops in ``native`` (uncounted: the device's native
// set) and ``counted`` (ops outside it that the host route takes from torch's composites, so that
// they run as the CPU runs them: counted as host fallbacks); names with overload, e.g.
// "add.Tensor".  Replaces the previous set.  Every other op reaches the Python boxed fallback.
void set_kernels(const std::vector<std::string>& native, const std::vector<std::string>& counted);
std::vector<std::pair<std::string, int64_t>> host_counts();
void reset_host_counts();
// called (with the GIL taken by the binding) the first time an op falls back to the host
void set_fallback_observer(std::function<void(const std::string&)> observer);
bool set_counting(bool on);  // thread-local; returns the previous value
bool counting();

// run ``op`` on the host bytes of its emu arguments (the router's path); with ``count`` (and
// counting on for this thread) it is a host fallback: counted, the first one reported
void host_call(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool count);

// -- trace ------------------------------------------------------------------------------
// every op that reaches the device while tracing (see aten_trace.cpp)
struct TraceRow {
  std::string op;
  int64_t top = 0, nested = 0, forward = 0, backward = 0, optimizer = 0;
  std::vector<std::string> dtypes;
  std::vector<std::pair<std::string, int64_t>> parents;
};
// start recording (clears the previous trace); ``first_seen`` is called (GIL taken by the
// binding) the first time an op is seen at the top level, on the thread that called it
void trace_start(std::function<void(const std::string&)> first_seen);
void trace_stop();
void trace_set_optimizer(bool inside);  // nests: the optimizer step begins / ends
std::vector<TraceRow> trace_rows();

}  // namespace hal_emu
