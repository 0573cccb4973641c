"""Building blocks for backend plugins whose facts fit the standard shape.

A typical vendor module is three lines::

    from hal.plugin.kit import VendorPlugin
    from hal.plugin.spec import builtin_spec
    _plugin = VendorPlugin(builtin_spec("ascend"))
    hal_backend_specs, hal_backend_probe, hal_backend_load, hal_op_support = _plugin.hooks()
    hal_fused_kernels = _plugin.hal_fused_kernels     # when it passes fused_kernels=

Override :meth:`VendorPlugin.probe` or pass ``backend_cls`` for what differs.  A plugin
module imports torch only when it loads a backend, never when it is registered (finding
plugin profiles, ``hal list`` before probing): pass ``backend_cls`` as ``"module:Class"``
when the class's module imports torch (``hal.plugin.backend`` does).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Dict, Optional, Type, Union

from hal.plugin import hookimpl
from hal.plugin.probe import ProbeContext, installed_label, probe_module_and_nodes, runtime_missing
from hal.plugin.spec import BackendSpec, ProbeResult, Status

if TYPE_CHECKING:  # pragma: no cover
    from hal.plugin.backend import Backend


def resolve(ref: Union[str, object]):
    """``"module:attr"`` imported and looked up; anything else is returned as it is."""
    if not isinstance(ref, str):
        return ref
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


class VendorPlugin:
    """Hooks for one backend spec: standard probe, standard load."""

    def __init__(self, spec: BackendSpec, backend_cls: Union[str, Type[Backend]] = "hal.plugin.backend:Backend",
                 op_profile: Optional[dict] = None, fused_kernels: Optional[Dict[str, object]] = None,
                 deepspeed_accelerator: Optional[str] = None, runtime: Optional[dict] = None):
        self.spec = spec
        #: the Backend class, or ``"module:Class"`` imported on first load
        self.backend_cls = backend_cls
        self.op_profile = op_profile
        #: hal op name -> "module:function" or callable (see hookspec hal_fused_kernels)
        self.fused_kernels = dict(fused_kernels or {})
        #: "module:Class" of DeepSpeed's own accelerator for the device (see hookspec hal_deepspeed_accelerator)
        self.deepspeed_accelerator = deepspeed_accelerator
        #: the vendor runtime the device module needs beside its package (a backend.json ``runtime``), or None
        self.runtime = runtime or None

    def probe(self, context: ProbeContext) -> ProbeResult:
        """The module and device nodes (:func:`probe_module_and_nodes`); with the module installed and a
        declared :attr:`runtime` not set up, ``NOT_INSTALLED`` naming both and the fix."""
        result = probe_module_and_nodes(self.spec, context)
        if self.runtime and result.status != Status.NOT_INSTALLED:
            missing = runtime_missing(self.runtime, context)
            if missing:
                return ProbeResult(Status.NOT_INSTALLED, f"{installed_label(self.spec.module)} is installed but {missing}",
                                   result.evidence + (f"env {self.runtime['home_env']}={context.env.get(self.runtime['home_env'])!r}",))
        return result

    def backend_class(self) -> Type[Backend]:
        """The Backend class (imports its module, and so torch, on first call)."""
        self.backend_cls = resolve(self.backend_cls)
        return self.backend_cls

    def load(self) -> Backend:
        from hal.plugin.backend import load_device_backend

        return load_device_backend(self.spec, self.backend_class(), self.runtime)

    @hookimpl
    def hal_backend_specs(self):
        return [self.spec]

    @hookimpl
    def hal_backend_probe(self, spec, context):
        return self.probe(context) if spec.name == self.spec.name else None

    @hookimpl
    def hal_backend_load(self, spec):
        return self.load() if spec.name == self.spec.name else None

    @hookimpl
    def hal_op_support(self, spec):
        return self.op_profile if spec.name == self.spec.name else None

    @hookimpl
    def hal_fused_kernels(self, spec):
        return dict(self.fused_kernels) if spec.name == self.spec.name and self.fused_kernels else None

    @hookimpl
    def hal_deepspeed_accelerator(self, spec):
        return self.deepspeed_accelerator if spec.name == self.spec.name else None

    def hooks(self):
        """The bound hook functions, for assignment at a plugin module's top level."""
        return self.hal_backend_specs, self.hal_backend_probe, self.hal_backend_load, self.hal_op_support
