"""The old name of :mod:`hal.redirect` (running CUDA-written scripts on the selected backend).

"Transfer" means host-device copies in this field; the package is now ``hal.redirect``, its
classes :class:`~hal.redirect.Redirection` and :class:`~hal.redirect.RedirectLog`.  This name
stays for one release and warns on import.
"""
import warnings

from hal.redirect import Redirection, RedirectLog, enable, run_script

warnings.warn("hal.transfer is now hal.redirect (Transfer -> Redirection, TransferLog -> RedirectLog); "
              "import hal.redirect instead (hal.transfer goes in the next release)", DeprecationWarning, stacklevel=2)

#: the old class names
Transfer = Redirection
TransferLog = RedirectLog

__all__ = ["Transfer", "TransferLog", "enable", "run_script"]
