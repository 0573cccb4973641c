// The generator of the emulated accelerator: counter-based, with CUDA's state (seed, offset).
//
// A random op reserves round_up(max(numel, 1), 4) offsets (CUDA's unit) from its generator, under the
// generator's mutex, and runs torch's CPU kernel with a fresh CPU generator whose whole mt19937 state is
// derived from (seed, first reserved offset).  So each draw is a function of (seed, offset, op): a seed
// reproduces a run, get_state / set_state (fork_rng, checkpoints) restore a draw exactly, two ranks with
// the same state draw the same numbers, and DTensor's RNG tracker moves a rank to its shard's offset by
// setting the offset, as it does on CUDA.  Within one seed distinct offsets give distinct streams.
#include "emu.h"

#include <ATen/CPUGeneratorImpl.h>
#if !HAL_EMU_GENERATOR_FROM_HOOKS
#include <ATen/core/GeneratorForPrivateuseone.h>
#endif
#include <ATen/core/MT19937RNGEngine.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <mutex>

namespace hal_emu {

namespace {

constexpr int64_t kStateBytes = 16;  // seed (uint64), then offset (int64), as CUDA's get_state()
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// a bijective 64-bit mixer (splitmix64's finalizer)
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// the CPU generator of the draws that start at ``offset``: its mt19937 state is filled from a splitmix64
// sequence keyed by (seed, offset); for one seed the key is a bijection of the offset
at::Generator cpu_generator(uint64_t seed, uint64_t offset) {
  uint64_t key = mix64(seed ^ mix64(offset + kGolden));
  at::mt19937 engine;
  at::mt19937_data_pod pod = engine.data();
  for (int i = 0; i < at::MERSENNE_STATE_N; i += 2) {
    uint64_t word = mix64(key + kGolden * static_cast<uint64_t>(i / 2 + 1));
    pod.state_[i] = static_cast<uint32_t>(word);
    if (i + 1 < at::MERSENNE_STATE_N) pod.state_[i + 1] = static_cast<uint32_t>(word >> 32);
  }
  pod.seed_ = key;
  pod.seeded_ = true;
  pod.left_ = 1;  // the first draw twists the whole state
  pod.next_ = 0;
  engine.set_data(pod);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(key);
  at::check_generator<at::CPUGeneratorImpl>(gen)->set_engine(engine);
  return gen;
}

void check_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "emu: generator offset ", offset,
              " is not a multiple of 4; offsets count draws in CUDA's units of 4, as torch.cuda's generator does");
}

struct Generator final : c10::GeneratorImpl {
  Generator(c10::DeviceIndex index, uint64_t seed)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override {
    check_offset(offset);
    offset_ = offset;
  }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t fresh = c10::detail::getNonDeterministicRandom(/*is_cuda=*/true);
    set_current_seed(fresh);
    return fresh;
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor state = at::detail::empty_cpu({kStateBytes}, at::kByte, std::nullopt, std::nullopt, std::nullopt,
                                             std::nullopt);
    auto* bytes = state.mutable_data_ptr<uint8_t>();
    auto offset = static_cast<int64_t>(offset_);
    std::memcpy(bytes, &seed_, sizeof(seed_));
    std::memcpy(bytes + sizeof(seed_), &offset, sizeof(offset));
    return state.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    at::detail::check_rng_state(new_state);
    int64_t n = new_state.numel();
    TORCH_CHECK(n == kStateBytes, "emu: an RNG state of ", n, " bytes is not the emulated device's: its generator "
                "state is ", kStateBytes, " bytes (seed, then offset), as CUDA's",
                n == 5056 ? "; 5056 bytes is a CPU generator's state, which emu generators held before they "
                            "became counter-based: reseed with torch.emu.manual_seed() instead"
                          : "; pass a state from torch.emu.get_rng_state() or a torch.Generator(device='emu')");
    uint64_t seed = 0;
    int64_t offset = 0;
    const auto* bytes = static_cast<const uint8_t*>(new_state.data());
    std::memcpy(&seed, bytes, sizeof(seed));
    std::memcpy(&offset, bytes + sizeof(seed), sizeof(offset));
    TORCH_CHECK(offset >= 0, "emu: RNG state has a negative offset (", offset, "); it is not a generator's state");
    check_offset(static_cast<uint64_t>(offset));
    seed_ = seed;
    offset_ = static_cast<uint64_t>(offset);
  }

  // CUDA graphs capture a generator's state by reference; emu has no graphs, but torch asks generically
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override {
    auto* other = dynamic_cast<Generator*>(state.get());
    TORCH_CHECK(other != nullptr, "emu: graphsafe_set_state() needs the state of an emu generator, got one of ",
                state->device());
    seed_ = other->seed_;
    offset_ = other->offset_;
  }
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override {
    return c10::intrusive_ptr<c10::GeneratorImpl>::reclaim(clone_impl());
  }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // the first of ``numel`` draws' offsets, which move past them (the caller holds mutex_)
  uint64_t reserve(int64_t numel) {
    uint64_t first = offset_;
    uint64_t n = numel > 0 ? static_cast<uint64_t>(numel) : 1;
    offset_ += (n + 3) / 4 * 4;
    return first;
  }

 private:
  Generator* clone_impl() const override {
    auto* g = new Generator(device().index(), seed_);
    g->offset_ = offset_;
    return g;
  }

  uint64_t seed_;
  uint64_t offset_ = 0;
};

std::once_flag g_default_once[kMaxDevices];
at::Generator g_default[kMaxDevices];

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  check_index(index);
  std::call_once(g_default_once[index], [index] {
    g_default[index] = at::make_generator<Generator>(index, c10::default_rng_seed_val);
  });
  return g_default[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  check_index(index);
  return at::make_generator<Generator>(index, c10::default_rng_seed_val);
}

#if !HAL_EMU_GENERATOR_FROM_HOOKS
// torch.Generator(device="emu") before torch asks the hooks for it (2.4-2.6)
REGISTER_GENERATOR_PRIVATEUSE1(new_generator)
#endif

at::Generator host_generator(const at::Generator& gen, int64_t numel) {
  auto* g = at::check_generator<Generator>(gen);
  uint64_t seed = 0, offset = 0;
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    seed = g->current_seed();
    offset = g->reserve(numel);
  }
  return cpu_generator(seed, offset);
}

}  // namespace hal_emu
