"""``hal.dist``: torch.distributed for whatever backend is selected, with failures that explain
themselves.  ::

    import hal
    info = hal.dist.init()             # under torchrun, or alone (one rank)
    t = torch.ones(4, device=info.device)
    hal.dist.all_reduce(t)             # names absent ranks, reports shape mismatches

* :func:`init` / :func:`backend_string` / :func:`destroy` — process group set-up
  (``"cpu:gloo,<device>:<ccl>"``, device binding from ``LOCAL_RANK``, timeouts);
* :func:`register_c10d_backend` — safe registration of an out-of-tree collective library;
  :func:`register_plugin_ccl` — the selected backend's, as its plugin names it (``hal_c10d_backend``);
* checked collectives :func:`all_reduce`, :func:`all_gather`, :func:`reduce_scatter`,
  :func:`broadcast`, :func:`all_to_all`, :func:`barrier`;
* :func:`premul_sum_factor` / :func:`premultiplied` — ``ReduceOp.PREMUL_SUM`` for a CCL that serves
  it itself; hal serves it on gloo while ``hal run`` or :func:`init` is in force (:mod:`hal.dist.premul_sum`);
* :mod:`hal.dist.launch` starts local ranks with a hard time limit; :mod:`hal.dist.bench`
  is ``hal bench``.
"""
from hal.dist.checked import (all_gather, all_reduce, all_to_all, barrier, broadcast, precheck,
                              reduce_scatter)
from hal.dist.errors import CollectiveMismatch, CollectiveTimeout, DistError, RendezvousError
from hal.dist.premul_sum import premul_sum_factor, premultiplied
from hal.dist.process_group import (DEFAULT_TIMEOUT_S, DistInfo, backend_string, default_timeout,
                                    destroy, info, init, is_initialized, register_plugin_ccl)
from hal.dist.register import register_c10d_backend, registered_backends

__all__ = [
    "init", "destroy", "info", "is_initialized", "backend_string", "default_timeout", "DistInfo",
    "DEFAULT_TIMEOUT_S", "register_c10d_backend", "register_plugin_ccl", "registered_backends",
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier", "precheck",
    "premul_sum_factor", "premultiplied",
    "DistError", "RendezvousError", "CollectiveTimeout", "CollectiveMismatch",
]
