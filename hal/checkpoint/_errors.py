"""Errors and warnings of hal.checkpoint."""
from __future__ import annotations

from hal._errors import HalError


class CheckpointError(HalError):
    """A checkpoint cannot be saved or loaded; the message names the file, the reason and the fix."""


class CheckpointWarning(UserWarning):
    """Something in a checkpoint was not applied as saved (for example another device's RNG state)."""
