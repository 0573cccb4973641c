"""Run unmodified CUDA-written scripts on the selected backend.

::

    with hal.redirect.enable() as t:        # scoped: everything is restored on exit
        model = Net().cuda()                # -> hal.device()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to("cuda"))
    r.log.rows("redirected")

or from the shell: ``hal run train.py --epochs 1`` (``--nproc-per-node 2`` for DDP).

Only the torch calls that take a device or answer about CUDA are wrapped (found from
torch's operator schemas at enable time); every other call is torch's own.  torch's own
code keeps seeing the real ``torch.cuda`` / ``torch.accelerator`` answers.  What each CUDA
idiom does on each backend: docs/redirect.md.

Nothing sees every torch call: only the calls that take a device (or answer a question
about CUDA) are replaced, each by a thin wrapper that maps ``cuda`` arguments and calls
torch's own function.  The parts, one module each, all working on the one ``_core.Redirection``
that ``_enable`` installs them on:

- ``_devices``: every torch function and ``Tensor`` method with a ``device`` argument,
  found from the operator schemas at enable time, plus the Python-level ones
  (``Tensor.to/cuda``, ``Module.to/cuda``, ``with torch.device(...)``, generators, streams,
  events, legacy ``torch.cuda.FloatTensor`` constructors, DataLoader);
- ``_cuda_module``: ``torch.cuda.*`` and ``torch.accelerator.*`` (answers for the user's
  code; torch's own code gets the truth, see ``_split`` and :mod:`hal.util.frames`), with
  ``_cuda_classes`` (its classes stay classes whose instances are the backend's; ``_host``:
  the CPU backend's streams and events) and ``_cuda_submodules`` (``torch.cuda.random``,
  ``memory``, ``streams`` ... and ``torch.backends.cuda`` answer as ``torch.cuda`` does);
- ``_amp``, ``_load``, ``_dist``, ``_compile``, ``_children``: autocast and GradScaler,
  ``torch.load`` map locations, process groups / DDP / DataParallel, ``torch.compile``,
  child processes (multiprocessing's, and any Python that runs a script file: ``_child_start``
  and ``_site/sitecustomize.py`` start them under the shim);
- ``_log`` (what was redirected, at the user's line) and ``_run`` (a script file under it, with its report).

The hottest wrappers (device arguments, ``Tensor.cuda``, the split ``torch.cuda`` calls) are C types
of ``hal._C`` (``csrc/redirect_calls.cpp``) where it is built; :func:`native_wrappers` says which.

``hal.transfer`` is the old name of this package (kept for one release, with a warning).
"""
from hal.redirect._log import RedirectLog
from hal.redirect._run import run_script
from hal.redirect._core import Redirection
from hal.redirect._enable import enable
from hal.redirect._compile import inductor_supports
from hal.redirect._devices import native_wrappers

__all__ = ["Redirection", "RedirectLog", "enable", "inductor_supports", "native_wrappers", "record_child_exit",
           "run_script"]


def record_child_exit(exit_code: int, error, log, duration_s: float, **where) -> None:
    """Record how this child process of a ``hal run`` ended, for its parent's report (nothing outside a
    run); see :func:`hal.redirect._children.record_exit`.  Imported on first use: ``import hal.redirect``
    does not load the child bookkeeping."""
    from hal.redirect._children import record_exit

    record_exit(exit_code, error, log, duration_s, **where)
