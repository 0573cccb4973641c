"""``HAL_EMU_OPS``: the emulated device with a vendor's operator coverage.

``HAL_EMU_OPS=ascend-2.13`` (any torch profile name or alias: ``op_coverage targets``) makes the
native set the ops the profile judges native or composite; the native kernels and the boxed
fallback of :mod:`hal.emu._dispatch` then do the rest.  An op that reaches the device and that
the vendor lacks behaves as on the vendor's stack:

* ``cpu_fallback`` (also ``error_unless_env`` with the variable set to 1, and ``unknown``): the
  fallback's host route, counted in :func:`hal.emu.fallback_report` and announced once in the
  vendor's words (the profile's ``warning_message``);
* ``error`` / ``error_unless_env`` (variable unset): ``NotImplementedError`` with the vendor's
  message naming the op (the profile's ``error_message``).

Kept whatever the vendor lists: emu's own C++ kernels (allocation, views, copies, dropout,
convolution, the fused recurrent cells, SyncBatchNorm statistics): they are the device itself,
and a vendor lacking one under that name (``_copy_from_and_resize`` on MUSA) has its own way to
do the same; :meth:`VendorOps.report` lists them (``kept``).  Ops with a composite kernel in this
torch never reach the device and are not judged: a composite of ops the vendor lacks (``gelu``
over ``gelu.out``) runs as torch's composite, as on the vendor, and its pieces reach the device.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional

import torch

from hal._errors import HalError

if TYPE_CHECKING:  # pragma: no cover
    from hal.op_support.torch_profile import TorchProfile

ENV = "HAL_EMU_OPS"


def emulated_profile(env=None) -> Optional["TorchProfile"]:
    """The torch profile ``HAL_EMU_OPS`` names (a :class:`hal.op_support.torch_profile.TorchProfile`),
    or None when it is unset; :class:`hal.HalError` naming the choices for an unknown name."""
    name = (os.environ if env is None else env).get(ENV, "").strip()
    if not name:
        return None
    from hal.op_support.torch_profile import alias_map, load_torch_profiles
    profiles = load_torch_profiles(use_plugins=False)
    amap = alias_map(profiles)
    if name not in amap:
        raise HalError(f"{ENV}={name!r} is not a torch profile; choose one of: "
                       f"{', '.join(sorted(amap))} (op_coverage targets lists them), or unset it")
    return profiles[amap[name]]


class VendorOps:
    """A vendor's coverage on the emulated device: its native set, and what it does for the rest.

    :param profile: the vendor's torch profile.
    :param reaching: the aten ops that reach the device (:func:`hal.emu._dispatch.ops_reaching_device`).
    """

    def __init__(self, profile, reaching: List[str]) -> None:
        self.profile = profile
        #: ops (``"aten::add.Tensor"``) the vendor has: judged native or composite
        self.native: frozenset = frozenset()
        #: ops that reach the device and that the vendor lacks with an error -> its message
        self.errors: Dict[str, str] = {}
        #: ops that reach the device and that the vendor lacks with a CPU fallback
        self.host: set = set()
        #: ops the vendor lacks that are emu's own C++ kernels, kept
        self.kept: List[str] = []
        self._classify(set(reaching))

    @property
    def name(self) -> str:
        return self.profile.name

    def _classify(self, reaching: set) -> None:
        p = self.profile
        env = p.unimplemented.get("env")
        env_on = bool(env) and os.environ.get(env, "") not in ("", "0")
        native = set()
        for qualified in torch._C._dispatch_get_all_op_names():
            if not qualified.startswith("aten::"):
                continue
            v = p.judge(qualified[len("aten::"):])
            if v.status != "missing":
                native.add(qualified)
            elif torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "PrivateUse1"):
                self.kept.append(v.op)  # emu's own C++ kernel (this runs before hal registers any)
            elif qualified in reaching:
                behaviour = v.behaviour
                if behaviour == "error_unless_env" and env_on:
                    behaviour = "cpu_fallback"
                if behaviour in ("error", "error_unless_env"):
                    msg = v.message or f"{p.name} has no kernel for aten::{v.op}"
                    self.errors[qualified] = f"emu ({ENV}={p.name}): {msg}"
                else:
                    self.host.add(qualified)
        self.native = frozenset(native)
        self.kept.sort()

    def message(self, qualified: str, behaviour: str) -> Optional[str]:
        """The vendor's own words for ``qualified`` and ``behaviour``, or None."""
        return self.profile.message_for(qualified.split("::", 1)[-1], behaviour)

    def report(self) -> dict:
        """The profile, how many ops are native, raise or run on the host, and emu's kernels kept."""
        return {"profile": self.name, "native_packets": len({q.split(".", 1)[0] for q in self.native}),
                "error_ops": len(self.errors), "host_ops": len(self.host), "kept": list(self.kept)}
