"""Errors a scan reports to its user, each with the exit code the CLI returns for it.

Every message names the thing, the reason and the fix, on one line.
"""
from __future__ import annotations

from hal.errors import TorchProfileError


class ScanError(Exception):
    """Base class: a model or a profile that cannot be scanned. ``exit_code`` is documented."""

    exit_code = 10
    kind = "bad-input"

    def __init__(self, message: str):
        super().__init__(message)


class ModelNotFound(ScanError):
    """The path does not exist or holds no model."""

    exit_code = 10
    kind = "not-found"


class NotOnnx(ScanError):
    """The file is not an ONNX model, or it is corrupt."""

    exit_code = 11
    kind = "not-onnx"


class TruncatedModel(ScanError):
    """The file ends in the middle of a message: an interrupted copy or download."""

    exit_code = 12
    kind = "truncated"


class UnsafeExternalData(ScanError):
    """An external-data location points outside the model's folder."""

    exit_code = 13
    kind = "unsafe-external-data"


class UnknownOpset(ScanError):
    """The model imports an opset version or uses a domain this installation cannot interpret."""

    exit_code = 14
    kind = "unknown-opset"


class BadProfile(ScanError):
    """A target profile file is missing, malformed or does not match the schema."""

    exit_code = 15
    kind = "bad-profile"


class UnknownTarget(ScanError):
    """A ``--target`` name that no profile provides."""

    exit_code = 16
    kind = "unknown-target"


class ScriptNotFound(ScanError):
    """A path given to the static torch scan does not exist, or a folder holds no ``.py`` file."""

    exit_code = 10
    kind = "not-found"


class NotAvailable(ScanError):
    """A command-line combination this build cannot serve (e.g. --static with an ONNX model)."""

    exit_code = 2
    kind = "not-available"


# -- op_coverage rewrite --------------------------------------------------------------------
class RewriteFailed(ScanError):
    """The rewritten model fails onnx.checker / shape inference; nothing was written."""

    exit_code = 6
    kind = "check-failed"


class OutputNotWritable(ScanError):
    """The ``-o`` path cannot be written."""

    exit_code = 17
    kind = "not-writable"


class VerifyFailed(ScanError):
    """Outputs changed beyond tolerance; nothing was written."""

    exit_code = 5
    kind = "verify-failed"


# -- op_coverage quantize -------------------------------------------------------------------
class BadOption(ScanError, ValueError):
    """A quantize option out of range or of the wrong type (``QuantizeOptions``, ``Gates``); a usage error."""

    exit_code = 2
    kind = "bad-option"


class QuantizeGateFailed(ScanError):
    """The quantized model is further from the float one than --max-error / --min-cosine allow; nothing written."""

    exit_code = 5
    kind = "gate-failed"


class QuantizeCheckFailed(ScanError):
    """The quantized model fails onnx.checker, or onnxruntime cannot run it or the float model; nothing written."""

    exit_code = 6
    kind = "check-failed"


class NothingQuantized(ScanError):
    """The target runs no INT8 form of any op of the model (or none is left after --exclude); nothing written."""

    exit_code = 7
    kind = "nothing-quantized"


#: what the CLI reports as bad input, with the error's ``exit_code``: op_coverage's own errors and
#: hal's torch-profile errors (torch profiles are a run-time concept, read by :mod:`hal.op_support`)
INPUT_ERRORS = (ScanError, TorchProfileError)
