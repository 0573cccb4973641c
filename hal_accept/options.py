"""What ``hal accept`` runs and judges: :class:`AcceptOptions` (one frozen object, checked in one place)
and :class:`Target` (a hal backend, optionally the emulator with a vendor's operator coverage)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

from hal.errors import HalError


class AcceptUsageError(HalError):
    """A bad option: names it, why, and the fix (``hal accept`` exits 2)."""


@dataclass(frozen=True)
class Target:
    """Where a run goes: ``backend`` (``HAL_BACKEND``: ``cpu``, ``emu``, ``ascend`` ...) and, on the
    emulator, ``emu_ops``: a vendor's torch operator coverage to take on (``HAL_EMU_OPS``:
    ``musa-2.7``, ``ascend-2.13`` ...; ``op_coverage targets`` lists them)."""

    backend: str
    emu_ops: Optional[str] = None

    @property
    def name(self) -> str:
        """``emu:musa-2.7`` / ``cpu``: as given on the command line."""
        return f"{self.backend}:{self.emu_ops}" if self.emu_ops else self.backend

    @property
    def profile(self) -> str:
        """The torch operator profile its operators are judged against (``op_coverage targets``)."""
        return self.emu_ops or self.backend

    def env(self) -> Dict[str, str]:
        """The environment a ``hal run`` on this target gets."""
        env = {"HAL_BACKEND": self.backend}
        if self.emu_ops:
            env["HAL_EMU_OPS"] = self.emu_ops
        return env


def parse_target(text: str) -> Target:
    """``cpu``, ``emu``, ``emu:musa-2.7`` (the emulator with Moore Threads' coverage) -> :class:`Target`."""
    text = (text or "").strip()
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?::([A-Za-z0-9_.-]+))?", text)
    if not m:
        raise AcceptUsageError(f"target {text!r}: give a hal backend (cpu, emu, ascend ...), or emu:<vendor "
                               f"profile> for the emulator with a vendor's operator coverage (emu:musa-2.7)")
    backend, ops = m.group(1), m.group(2)
    if ops and backend != "emu":
        raise AcceptUsageError(f"target {text!r}: ':{ops}' takes on a vendor's operator coverage on the emulator "
                               f"only; write emu:{ops}, or {backend} alone")
    return Target(backend, ops)


@dataclass(frozen=True)
class AcceptOptions:
    """Everything ``hal accept`` needs; :meth:`check` names a bad field, why, and the fix."""

    #: the user's training script and its own arguments (run unmodified through ``hal run``)
    script: str
    script_args: Tuple[str, ...] = ()
    #: where the script is known to work (on a real site ``cuda``; here ``cpu``)
    reference: Target = Target("cpu")
    #: the backends to accept (``emu``, ``emu:musa-2.7``, a vendor's backend)
    targets: Tuple[Target, ...] = (Target("emu"),)
    #: processes per run (torchrun); 0 = one process without torchrun
    nproc_per_node: int = 0
    #: optimizer steps per run: the script is ended cleanly after them
    steps: int = 10
    #: gate: each target's median samples/s (else steps/s) at least this share of the reference's (FlagRelease: 0.8)
    min_throughput_ratio: float = 0.8
    #: gate: every step's loss within ``loss_rtol`` x |reference| + ``loss_atol`` of the reference's
    loss_rtol: float = 0.02
    loss_atol: float = 1e-6
    #: when the losses differ: find the operator by routing halves of the op set to the host
    bisect: bool = True
    #: rehearse a failure (rank 0 killed, torchrun's restart, resume from a checkpoint taken from outside)
    #: on every backend, and resume the reference's checkpoint on each target
    stability: bool = True
    #: the runs' files (reports, metrics, traces); kept
    workdir: Path = field(default_factory=lambda: Path("accept-runs"))
    #: a run that has not ended after this long is stopped and counted as failed
    timeout_s: float = 900.0
    #: extra environment for every run (``HAL_PLUGINS`` of a vendor's plugin ...)
    env: Tuple[Tuple[str, str], ...] = ()
    #: inference: a Hugging Face causal-LM folder (or its config.json) to generate with; None: no inference
    model: Optional[str] = None
    #: inference: the batch sizes (concurrency) generated at, and the tokens generated per sequence
    batches: Tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    new_tokens: int = 16
    #: gate: the share of the target's generated tokens that may differ from the reference's
    max_token_disagreement: float = 0.05
    #: an ONNX export of the model: op_coverage's scan and rewrite for each target's ONNX profile (section 2) and
    #: INT8 through op_coverage quantize's steps (section 6); None: no ONNX part
    onnx: Optional[str] = None
    #: gates on the INT8 model's outputs against the float model's, as op_coverage quantize's --max-error and
    #: --min-cosine: None (the default, as there) reports the accuracy without judging it
    int8_max_error: Optional[float] = None
    int8_min_cosine: Optional[float] = None

    def check(self) -> "AcceptOptions":
        """Raise :class:`AcceptUsageError` on a bad field; return ``self``."""
        if not os.path.isfile(self.script):
            raise AcceptUsageError(f"script {self.script!r}: no such file; give the path of the training script "
                                   f"(hal accept train.py -- --epochs 1)")
        if not self.targets:
            raise AcceptUsageError("targets: none given; name at least one (--target emu)")
        if self.nproc_per_node < 0:
            raise AcceptUsageError(f"nproc_per_node={self.nproc_per_node}: give 0 (one process) or more")
        if self.steps < 2:
            raise AcceptUsageError(f"steps={self.steps}: give at least 2 optimizer steps (the first is warm-up, "
                                   f"throughput is read from the others)")
        if not 0 < self.min_throughput_ratio:
            raise AcceptUsageError(f"min_throughput_ratio={self.min_throughput_ratio}: give a share above 0 (0.8 = "
                                   f"the target at 80% of the reference's samples/s)")
        if self.loss_rtol < 0 or self.loss_atol < 0:
            raise AcceptUsageError(f"loss_rtol={self.loss_rtol}, loss_atol={self.loss_atol}: tolerances are >= 0")
        if self.timeout_s <= 0:
            raise AcceptUsageError(f"timeout_s={self.timeout_s}: give seconds above 0")
        if self.model is not None and not os.path.exists(self.model):
            raise AcceptUsageError(f"model {self.model!r}: no such folder or file; give a Hugging Face causal-LM "
                                   f"folder (config.json and weights) or its config.json")
        if not self.batches or any(b < 1 for b in self.batches):
            raise AcceptUsageError(f"batches={self.batches}: give batch sizes of 1 or more (1,2,4,8,16,32)")
        if self.new_tokens < 2:
            raise AcceptUsageError(f"new_tokens={self.new_tokens}: give at least 2 (the first is TTFT's, the "
                                   f"others TPOT's)")
        if not 0 <= self.max_token_disagreement <= 1:
            raise AcceptUsageError(f"max_token_disagreement={self.max_token_disagreement}: give a share in [0, 1]")
        if self.onnx is not None:
            self._check_onnx()
        elif self.int8_max_error is not None or self.int8_min_cosine is not None:
            raise AcceptUsageError("int8_max_error / int8_min_cosine: the INT8 gates judge the INT8 model of an ONNX "
                                   "export; give the export too (--onnx model.onnx)")
        if self.int8_max_error is not None and not self.int8_max_error >= 0:
            raise AcceptUsageError(f"int8_max_error={self.int8_max_error}: an absolute error is never negative, so "
                                   f"no model could pass; give 0 or more (--int8-max-error 0.05)")
        if self.int8_min_cosine is not None and not -1 <= self.int8_min_cosine <= 1:
            raise AcceptUsageError(f"int8_min_cosine={self.int8_min_cosine}: a cosine similarity lies in [-1, 1]; "
                                   f"give e.g. 0.999 (--int8-min-cosine 0.999)")
        return self

    def _check_onnx(self) -> None:
        """The export exists and is an ONNX model (its structure read as op_coverage scan reads it, weights
        not), so that a wrong path is told before the training runs, not after them."""
        from op_coverage.errors import ScanError
        from op_coverage.onnx.load import load_for_scan

        if not os.path.isfile(self.onnx):
            raise AcceptUsageError(f"onnx {self.onnx!r}: no such file; give the ONNX export of the model "
                                   f"(--onnx model.onnx, written by torch.onnx.export or onnx.save)")
        try:
            load_for_scan(Path(self.onnx))
        except ScanError as exc:  # its message begins with the path, which ours names already
            why = str(exc)
            why = why[len(self.onnx) + 2:] if why.startswith(f"{self.onnx}: ") else why
            raise AcceptUsageError(f"onnx {self.onnx!r}: {why}") from None
