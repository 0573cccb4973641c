// Autocast on the emulated device: the cast lists CUDA uses (lower precision for matmuls and
// convolutions, float32 for reductions, norms and losses, promotion for mixed inputs), so that
// torch.autocast("emu") casts where torch.autocast("cuda") would.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "emu: torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
              "(as on CUDA); use binary_cross_entropy_with_logits / BCEWithLogitsLoss, which combine the "
              "sigmoid and the loss and are safe to autocast");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// the op lists spell their signatures with at:: names unqualified
namespace at {

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define HAL_EMU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(HAL_EMU_LOWER)
#define HAL_EMU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(HAL_EMU_FP32)
#define HAL_EMU_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(HAL_EMU_FP32_OPT)
#define HAL_EMU_APPEND(...) KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(__VA_ARGS__)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(HAL_EMU_APPEND)
#define HAL_EMU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(HAL_EMU_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace at
