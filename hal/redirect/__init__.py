"""Run unmodified CUDA-written scripts on the selected backend.

::

    with hal.redirect.enable() as t:        # scoped: everything is restored on exit
        model = Net().cuda()                # -> hal.device()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x.to("cuda"))
    t.log.rows("redirected")

or from the shell: ``hal run train.py --epochs 1`` (``--nproc-per-node 2`` for DDP).

Only the torch calls that take a device or answer about CUDA are wrapped (found from
torch's operator schemas at enable time); every other call is torch's own.  torch's own
code keeps seeing the real ``torch.cuda`` / ``torch.accelerator`` answers.  What each CUDA
idiom does on each backend: docs/transfer.md.
"""
from hal.redirect._log import TransferLog
from hal.redirect._run import run_script
from hal.redirect._shim import Transfer, enable

__all__ = ["Transfer", "TransferLog", "enable", "run_script"]
