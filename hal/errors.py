"""The exceptions hal raises, by their public names: for plugins (``backends/``), ``op_coverage`` and
users who catch them.  ``hal`` re-exports the common ones (``hal.HalError``, ``hal.NotSupported``, ...)."""
from hal._errors import (BackendUnavailable, BadTorchProfile, HalError, NoDevice, NotSupported, PluginBlockRefused,
                         TorchProfileError, UnknownTorchTarget)

__all__ = ["BackendUnavailable", "BadTorchProfile", "HalError", "NoDevice", "NotSupported", "PluginBlockRefused",
           "TorchProfileError", "UnknownTorchTarget"]
