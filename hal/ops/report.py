"""What ``hal.ops`` will run on a device type: declared fused kernels, fallbacks, host kernels."""
from __future__ import annotations

from typing import Optional

from hal._errors import HalError
from hal.plugin.facts import fused_kernel_facts
from hal.plugin.kernels import SizedKernel
from hal.ops import _dispatch, host
from hal.ops._boundary import native_entry

#: the forward operators a user calls, in the order docs/ops.md lists them
PUBLIC_OPS = ("rms_norm", "add_rms_norm", "layer_norm", "add_layer_norm", "rotary_embedding", "swiglu", "gelu", "softmax",
              "fused_adamw_", "nms", "roi_align")


def report(backend: Optional[str] = None) -> dict:
    """The ``hal ops --json`` report (schema ``hal.ops/1``).

    :param backend: a backend name (``"ascend"``, ``"cuda"``, ``"cpu"``, ...), reported as its
        plugin declares it whether or not it is usable here; default: the selected backend.
    :return: per op, the fused kernel the owning plugin declares (with the vendor
        function and its source confidence when the built-in data file has them, and the
        sizes it is used at where the torch composition wins at others) and the fallbacks after
        it; plus whether the C++ host kernels are built, whether calls are entered in C
        (``native_entry``), and the counters of this process (:func:`hal.ops.stats`).
    """
    from hal.plugin.registry import get_registry

    reg = get_registry()
    if backend is None:
        cand = reg.selected()
    else:
        cands = reg.candidates()
        cand = next((c for c in cands if c.name == backend), None)
        if cand is None:
            raise HalError(f"backend {backend!r} is not declared by any plugin; choose one of: "
                           + ", ".join(sorted(c.name for c in cands)))
    declared = _dispatch.plugin_kernels(reg, cand)
    facts = fused_kernel_facts()["backends"].get(cand.name, {})
    try:
        C = host.native()
        native, native_error, threads = True, None, C.openmp_threads()
        try:  # the instruction set of the swiglu/gelu/softmax kernels (HAL_HOST_ISA may refuse)
            isa = C.isa()
        except RuntimeError as exc:
            isa = f"unusable: {exc}"
    except _dispatch.KernelUnsupported as exc:
        native, native_error, threads, isa = False, str(exc), 0, None
    ops = []
    for op in PUBLIC_OPS:
        kernel = declared.get(op)
        sized = kernel if isinstance(kernel, SizedKernel) else None
        if sized is not None:
            kernel = sized.kernel
        fact = facts.get(op, {})
        ops.append({"op": op, "fused_kernel": kernel if isinstance(kernel, str) else
                    (None if kernel is None else repr(kernel)),
                    "sizes": None if sized is None else {**sized.describe(), "measured": sized.measured},
                    "vendor_function": fact.get("vendor_function"), "confidence": fact.get("confidence"),
                    "uncertain": fact.get("uncertain"),
                    "then": ["composition", "host"] if native else ["composition"]})
    return {"schema": "hal.ops/1", "backend": cand.name, "device_type": cand.spec.device_type,
            "status": cand.status.value,
            "plugin_error": declared.get("__error__"), "native_available": native, "native_error": native_error,
            "openmp_threads": threads, "host_isa": isa, "native_entry": native_entry(), "ops": ops,
            "stats": _dispatch.stats()}
