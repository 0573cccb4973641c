"""Cambricon (torch_mlu / torch_mlu_ops) fused kernels, adapted to hal.ops conventions."""
import torch

from hal_backends.fused import vendor_attr


def rms_norm(x, weight, eps):
    # fused_rms_norm(x, residual, gamma, beta, bias, eps, store_output_before_norm, ...)
    fn = vendor_attr("torch_mlu_ops", "fused_rms_norm")
    return fn(x, None, weight.to(x.dtype), None, None, eps, False)


def swiglu(x):
    # active(input, act_mode, is_gated): act(first half) * second half when is_gated
    return vendor_attr("torch_mlu_ops", "active")(x, "silu", True)


def fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step, maximize):
    # torch.ops.torch_mlu.fused_adam(_dummy_overflow_buf, grads, params, exp_avgs, exp_avg_sqs,
    #     learning_rate, beta1, beta2, epsilon, step, mode, bias_correction, weight_decay)
    # mode=1 (decoupled weight decay) and bias_correction=1 follow apex's convention.
    if maximize:
        grads = [-g for g in grads]
    overflow = torch.zeros(1, dtype=torch.int32, device=params[0].device)
    torch.ops.torch_mlu.fused_adam(overflow, grads, params, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps,
                                   int(step), 1, 1, weight_decay)
