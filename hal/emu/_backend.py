"""The emulator's :class:`hal.plugin.backend.Backend`: what it tells hal beyond the device module.

Every facet here is one a vendor's Backend may provide the same way (each has a default in
:class:`~hal.plugin.backend.Backend`): the emulator counts the ops it lacks, so it reports and
announces them, says what it does with one it has no kernel for, and leaves hal's own ops
uncounted.
"""
from __future__ import annotations

from hal._version import __version__
from hal.emu import _dispatch
from hal.plugin.backend import Backend


class EmuBackend(Backend):
    def runtime_version(self):
        return f"hal-emu {__version__}"

    def processes_share_devices(self):
        """Emulated devices are host memory: every process may use each of them."""
        return True

    def own_ops(self):
        """hal's own ops are neither counted as fallbacks nor traced (:func:`hal.emu.uncounted`)."""
        return _dispatch.uncounted()

    def fallback_report(self):
        """:func:`hal.emu.fallback_report`: the emulator's host runs and decompositions."""
        return _dispatch.fallback_report()

    def reset_fallback_report(self):
        _dispatch.reset_fallback_report()

    def on_op_fallback(self, notice):
        if notice is None:
            _dispatch.set_notice(None)
            return
        _dispatch.set_notice(lambda op, route, where: notice(op, route, _dispatch.device_name()))

    def op_fallback(self, op):
        """The emulator's boxed fallback for ``op``: the emulated vendor's error, or a counted host run
        (see :mod:`hal.emu._dispatch`)."""
        return _dispatch.missing_op(op)
