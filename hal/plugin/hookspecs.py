"""Hook specifications of the ``hal`` plugin manager.

A backend plugin is a module (or object) implementing some of these hooks.  Built-in
plugins live in ``hal_backends``; external ones register under the entry-point group
``hal.backends``.  The registry calls the probe and load hooks of the plugin that declared
a spec only, so a broken plugin can never take another one down.
"""
from __future__ import annotations

from hal.plugin import hookspec


@hookspec
def hal_backend_specs():
    """Declare the backends this plugin provides.

    Must be cheap and must not import the vendor module.

    :return: a list of :class:`hal.plugin.spec.BackendSpec` (frozen, declarative).
    """


@hookspec(firstresult=True)
def hal_backend_probe(spec, context):
    """Decide, cheaply, whether ``spec``'s backend can be used on this machine.

    Never imports the vendor module: use ``context.has_module``, ``context.device_nodes``,
    ``context.which``, ``context.env`` and ``context.torch``.

    Stops at first non-None result.

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :param context: the :class:`hal.plugin.probe.ProbeContext` (filesystem root, env, PATH, torch facts).
    :return: a :class:`hal.plugin.spec.ProbeResult`.
    """


@hookspec(firstresult=True)
def hal_backend_load(spec):
    """Import the vendor module and return the backend object.

    Called only when the probe said ``available``.  Raise :class:`hal.NoDevice` when the
    module imports but reports no device.

    Stops at first non-None result.

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :return: a :class:`hal.plugin.backend.Backend`.
    """


@hookspec
def hal_op_support(spec):
    """Ship an ONNX operator-support profile for ``spec``'s device.

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :return: a profile dict in op_coverage's profile-file format, or None.
    """


@hookspec
def hal_torch_op_profile(spec):
    """Ship the torch-op support profile of ``spec``'s device.

    Either a torch profile (schema ``op_coverage.torch_profile/1``, see
    ``hal/data/torch_profile.schema.json``: what ``hal probe --trace ops.json --out PATH``
    writes, or a vendor's own list) or the older ``hal.op_profile/1`` that ``hal probe --out PATH``
    writes; ``op_coverage`` accepts both as a torch target.  ``hal conformance`` re-probes and
    reports every op whose status no longer matches.  :func:`hal.fallback.install` plans against the
    selected backend's profile in the new format (a device that emulates another one's coverage
    returns that one's).

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :return: the profile dict, or None.
    """


@hookspec(firstresult=True)
def hal_device_utilization(spec, index):
    """Report how busy device ``index`` is, for ``hal.metrics``.

    Implement it where the vendor exposes utilisation (a management library or tool);
    without it hal tries the device module's ``utilization()`` and otherwise reports null.

    Stops at first non-None result.

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :param index: the device index.
    :return: utilisation in percent (0..100), or None when unknown.
    """


@hookspec(firstresult=True)
def hal_c10d_backend(spec):
    """Name the out-of-tree collective library of ``spec``'s device, for ``hal.dist.init`` to register.

    Called once, on the selected backend's plugin only, before the process group is created.
    hal registers the result with :func:`hal.dist.register_c10d_backend` (checked, idempotent);
    return None when the vendor module registers its library itself on import (torch_npu does).

    Stops at first non-None result.

    :param spec: the selected :class:`hal.plugin.spec.BackendSpec`.
    :return: ``{"name": "emuccl", "creator": fn, "devices": ["privateuseone"]}`` (optionally
        ``"extended_api": True``), or None.
    """


@hookspec
def hal_fused_kernels(spec):
    """Declare the fused kernels ``spec``'s device has for ``hal.ops`` operators.

    Values are resolved on first use, so declaring a kernel imports nothing.  Each kernel
    takes the arguments of the hal op it implements, in hal's convention (see
    ``docs/ops.md``), and returns what that op returns; an adapter bridges a vendor
    function whose layout or argument order differs.  A kernel that cannot take a call's
    inputs raises :class:`hal.ops.KernelUnsupported`, and hal falls back to a torch
    composition (then to the C++ host kernel).  A kernel with a ``for_dtype(dtype)``
    attribute is asked once per dtype which callable to run for it (a variant per dtype,
    chosen once instead of tested on every call).

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :return: a dict mapping hal op names (``"rms_norm"``, ``"rms_norm_backward"``,
        ``"add_layer_norm"``, ``"rotary_embedding"``, ``"swiglu"``, ``"gelu"``,
        ``"softmax"``, ``"fused_adamw_"``, ``"nms"``, ``"roi_align"``, ...) to a callable
        or a ``"module:function"`` string; or None.
    """


@hookspec(firstresult=True)
def hal_deepspeed_accelerator(spec):
    """Name DeepSpeed's own accelerator for ``spec``'s device, where DeepSpeed has one.

    :mod:`hal.stacks.deepspeed` installs it with ``deepspeed.accelerator.set_accelerator`` (so that
    DeepSpeed does not take the device for CUDA under ``hal run``); without an answer it installs
    hal's generic accelerator over the backend (``hal.stacks.deepspeed.HalAccelerator``).  The
    class is imported only when DeepSpeed itself is.

    Stops at first non-None result.

    :param spec: a :class:`hal.plugin.spec.BackendSpec` this plugin declared.
    :return: ``"module:Class"`` (``"deepspeed.accelerator.npu_accelerator:NPU_Accelerator"``), or None.
    """
