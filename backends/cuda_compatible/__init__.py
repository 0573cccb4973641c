"""Stacks whose torch build presents itself as ``cuda``: AMD ROCm, Hygon DCU, MetaX,
Iluvatar CoreX, Kunlunxin.  Told apart from NVIDIA by hal.plugin.cuda_family's evidence.

One plugin, five backends: each backend's facts are in its own folder here (``rocm/backend.json``,
``metax/torch-2.4.json`` ...), the adapters of all five in ``fused.py``."""
from hal.plugin.facts import builtin_fused_kernels, builtin_stack_fact
from hal.plugin import hookimpl
from hal.plugin.spec import builtin_spec

from hal_backends.cuda import CUDA_BACKEND, CUDAFamilyPlugin

_plugins = {n: CUDAFamilyPlugin(builtin_spec(n), CUDA_BACKEND, fused_kernels=builtin_fused_kernels(n),
                                deepspeed_accelerator=builtin_stack_fact(n, "deepspeed")["accelerator"])
            for n in ("rocm", "hygon", "metax", "iluvatar", "kunlunxin")}


@hookimpl
def hal_backend_specs():
    return [p.spec for p in _plugins.values()]


@hookimpl
def hal_backend_probe(spec, context):
    p = _plugins.get(spec.name)
    return p.probe(context) if p else None


@hookimpl
def hal_backend_load(spec):
    p = _plugins.get(spec.name)
    return p.load() if p else None


@hookimpl
def hal_fused_kernels(spec):
    p = _plugins.get(spec.name)
    return p.hal_fused_kernels(spec) if p else None


@hookimpl
def hal_deepspeed_accelerator(spec):
    p = _plugins.get(spec.name)
    return p.hal_deepspeed_accelerator(spec) if p else None
