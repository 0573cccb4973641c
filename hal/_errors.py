"""Errors hal raises.  Each names the thing, the reason and the fix."""
from __future__ import annotations


class HalError(RuntimeError):
    """Base class of every error hal raises on purpose."""


class NotSupported(HalError):
    """A feature the selected device does not have.

    ``backend`` is the backend name (``"cpu"``, ``"ascend"``, ...) and ``feature`` the
    facet call that was asked for.  hal raises this instead of returning a silent ``None``.
    """

    def __init__(self, backend: str, feature: str, hint: str = ""):
        self.backend = backend
        self.feature = feature
        msg = f"{backend}: {feature} is not supported by this backend"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)


class BackendUnavailable(HalError):
    """The backend asked for (``HAL_BACKEND`` or ``select(name)``) cannot be used."""


class PluginBlockRefused(HalError):
    """``HAL_BLOCK_PLUGINS`` names an essential plugin (the ``cpu`` one), which cannot be blocked."""


class NoDevice(HalError):
    """Raised by a backend's load step when its module imports but no device is visible."""


class TorchProfileError(HalError):
    """A torch op profile that cannot be used.  ``exit_code`` and ``kind`` are what
    ``op_coverage`` reports for it (as for its own input errors)."""

    exit_code = 15
    kind = "bad-profile"


class BadTorchProfile(TorchProfileError):
    """A torch profile file or plugin dict that is not valid (the message names the field and the fix)."""


class UnknownTorchTarget(TorchProfileError):
    """A torch target name that no profile has (the message lists the known ones)."""

    exit_code = 16
    kind = "unknown-target"
