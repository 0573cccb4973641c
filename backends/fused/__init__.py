"""What the adapters from vendor fused kernels to the argument conventions of ``hal.ops`` share.

Each vendor's adapters are its plugin folder's ``fused.py`` (``hal_backends.ascend.fused``);
``torch_native`` holds the kernels every torch device build registers, used by several.  An
adapter takes a hal op's arguments, calls the vendor function (imported on first call, never
at import) and returns what the hal op returns.  Inputs a vendor function cannot take raise
:class:`hal.ops.KernelUnsupported`, which makes hal fall back.  Which backend declares which
adapter is data: ``fused_kernels`` in the backend's ``backend.json``.
"""
import importlib

from hal.ops import KernelUnsupported


def vendor(module: str):
    """Import a vendor module, or raise KernelUnsupported naming it."""
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise KernelUnsupported(f"{module} cannot be imported ({type(exc).__name__}: {exc})")


def vendor_attr(module: str, attr: str):
    obj = vendor(module)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KernelUnsupported(f"{module} has no {attr} (too old a version?)")
        obj = getattr(obj, part)
    return obj
