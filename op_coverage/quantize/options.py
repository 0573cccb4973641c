"""What ``op_coverage quantize`` may be asked: :class:`QuantizeOptions` and its :class:`Gates`, checked here.

Every field has the default of the command's flag of the same name (``--runs`` is ``runs``);
a value out of range raises :class:`~op_coverage.errors.BadOption` naming the field, the reason
and the fix, when the options are made, before any model is read.
"""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from op_coverage.errors import BadOption

#: ``mode`` values: how activations get their scales
MODES = ("dynamic", "static")


def _bad(owner: str, name: str, value, reason: str, fix: str) -> BadOption:
    return BadOption(f"{owner}({name}={value!r}): {reason}; {fix}")


def _number(owner: str, name: str, value, *, flag: str) -> None:
    """A real number, not a bool or NaN (a NaN gate would refuse every model)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise _bad(owner, name, value, "not a number", f"pass a float ({flag} X), or None for no gate")


@dataclass(frozen=True)
class Gates:
    """The accuracy a quantized model must keep to be written; ``None`` is no gate.

    ``max_error`` is ``--max-error`` (the largest max abs error any output may have, >= 0);
    ``min_cosine`` is ``--min-cosine`` (the smallest cosine similarity any float output may have,
    in [-1, 1]).
    """

    max_error: float | None = None
    min_cosine: float | None = None

    def __post_init__(self):
        if self.max_error is not None:
            _number("Gates", "max_error", self.max_error, flag="--max-error")
            if self.max_error < 0:
                raise _bad("Gates", "max_error", self.max_error, "an absolute error is never negative, so no "
                           "model could pass", "pass 0 or more (--max-error X)")
        if self.min_cosine is not None:
            _number("Gates", "min_cosine", self.min_cosine, flag="--min-cosine")
            if not -1 <= self.min_cosine <= 1:
                raise _bad("Gates", "min_cosine", self.min_cosine, "a cosine similarity lies in [-1, 1]",
                           "pass a value in that range, e.g. 0.999 (--min-cosine C)")

    def failures(self, outputs) -> list[str]:
        """One line per output of *outputs* (:class:`~op_coverage.quantize.metrics.OutputAccuracy`) that
        fails a gate; empty when every output passes."""
        bad = []
        for o in outputs:
            if self.max_error is not None and not o.max_abs <= self.max_error:
                bad.append(f"{o.name}: max abs error {o.max_abs:.4g} > --max-error {self.max_error:g}")
            if self.min_cosine is not None and o.cosine is not None and not o.cosine >= self.min_cosine:
                bad.append(f"{o.name}: cosine {o.cosine:.6f} < --min-cosine {self.min_cosine:g}")
        return bad


def _names(value) -> tuple[str, ...]:
    """A tuple of strings from one path or name, or an iterable of them (``None``: empty)."""
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        return (os.fspath(value),)
    return tuple(os.fspath(v) for v in value)


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize: every knob of ``op_coverage quantize``, with the command's defaults.

    The model, the target and the output are arguments of the steps, not options.  Lists may be
    given as lists (they are kept as tuples), ``dims`` as a dict (kept as ``(name, n)`` pairs), so
    that options are immutable and can be shared between runs.  ``QuantizeOptions(runs=-1)`` raises
    :class:`~op_coverage.errors.BadOption` naming the field, the reason and the fix.
    """

    mode: str = "dynamic"
    """``dynamic`` (``--mode``): integer ops with run-time activation scales, else QDQ calibrated on
    :attr:`calibration`; ``static``: QLinear* ops, else QDQ; both calibrated."""
    calibration: str | None = None
    """``--calibration``: an ``.npz`` (one array per input; an extra leading axis counts samples) or a
    folder of ``.npz`` files, one sample each; ``None``: 8 generated random samples (the report says so)."""
    per_channel: bool = False
    """``--per-channel``: one weight scale per output channel (QDQ: when the model's opset is 13 or later)."""
    exclude: tuple[str, ...] = ()
    """``--exclude``: names of nodes to keep float; each must be a node of the model."""
    profiles: tuple[str, ...] = ()
    """``--profile``: extra target profile JSON files, read before the bundled ones."""
    inputs: tuple[str, ...] = ()
    """``--inputs``: ``.npz``/``.pb`` files for the accuracy comparison and latency; empty: generated."""
    seed: int = 0
    """``--seed``: seed of generated inputs (generated calibration samples use ``seed + 1`` onwards)."""
    dims: tuple[tuple[str, int], ...] = ()
    """``--dim``: values of symbolic dims for generated inputs, ``{"seq": 128}`` or ``(("seq", 128),)``;
    a dim not named is 2."""
    gates: Gates = field(default_factory=Gates)
    """``--max-error`` / ``--min-cosine``: the accuracy the result must keep to be written."""
    runs: int = 10
    """``--runs``: interleaved run pairs per latency repeat; 0 skips the latency measurement."""
    repeats: int = 3
    """``--repeats``: latency repeats; the ratio reported is their median."""
    compare: bool = True
    """True unless ``--no-compare``: also measure onnxruntime's own default call the same way (``baseline``)."""

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalise once, here
        o = "QuantizeOptions"
        for name in ("exclude", "profiles", "inputs"):
            try:
                set_(self, name, _names(getattr(self, name)))
            except TypeError:
                raise _bad(o, name, getattr(self, name), "not a name or a list of names",
                           f"pass a list of strings, e.g. {name}=['...']") from None
        if self.calibration is not None:
            try:
                set_(self, "calibration", os.fspath(self.calibration))
            except TypeError:
                raise _bad(o, "calibration", self.calibration, "not a path",
                           "pass an .npz file or a folder of them (--calibration)") from None
        try:
            dims = self.dims or ()
            set_(self, "dims", tuple((dims if isinstance(dims, Mapping) else dict(dims)).items()))
        except (TypeError, ValueError):
            raise _bad(o, "dims", self.dims, "not a mapping of dim names to sizes",
                       "pass a dict, e.g. {'seq': 128} (--dim seq=128)") from None
        self._check()

    def _check(self) -> None:
        """Raise :class:`BadOption` for the first field of a wrong type or out of range."""
        o = "QuantizeOptions"
        if self.mode not in MODES:
            raise _bad(o, "mode", self.mode, "not a mode", f"choose one of {', '.join(MODES)} (--mode)")
        for name in ("per_channel", "compare"):
            if not isinstance(getattr(self, name), bool):
                raise _bad(o, name, getattr(self, name), "not a bool", "pass True or False")
        for name, least, why, fix in (
                ("seed", None, "", "--seed N"),
                ("runs", 0, "it counts the interleaved run pairs of each latency repeat",
                 "pass 0 (no latency runs) or more (--runs N)"),
                ("repeats", 1, "the latency ratio is the median of the repeats, so one is needed at least",
                 "pass 1 or more (--repeats N)")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise _bad(o, name, v, "not an integer", f"pass an int ({fix})")
            if least is not None and v < least:
                raise _bad(o, name, v, f"below {least}: {why}", fix)
        for dim, n in self.dims:
            if not isinstance(dim, str) or isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
                raise _bad(o, "dims", dict(self.dims), f"symbolic dim {dim!r} = {n!r}: a dim is named by a string "
                           "and sized by a positive integer",
                           "give it a size of 1 or more, e.g. {'seq': 128} (--dim seq=128)")
        if not isinstance(self.gates, Gates):
            raise _bad(o, "gates", self.gates, "not a Gates", "pass Gates(max_error=..., min_cosine=...)")
        for name in ("exclude", "profiles", "inputs"):
            if any(not v for v in getattr(self, name)):
                raise _bad(o, name, getattr(self, name), "holds an empty name", "leave the empty entry out")

    @property
    def dim_values(self) -> dict[str, int]:
        """:attr:`dims` as a dict, as :func:`op_coverage.rewrite.verify.generate_inputs` takes it."""
        return dict(self.dims)
