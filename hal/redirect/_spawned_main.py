"""Run by multiprocessing in a spawned child of a ``hal run`` script, in place of the script.

Enables the shim for the rest of the child's life, then runs the script's top level as
``__mp_main__`` (its path comes from the parent's environment) and takes over its names, as
multiprocessing itself would, so that the child's target and its arguments unpickle.  The
process's exit code (what its target's ``_bootstrap`` returns) is recorded for the run report.
"""
import logging
import multiprocessing.process
import os
import runpy
import time

from hal.plugin.registry import get_registry
from hal.redirect._children import ENV_BACKEND, ENV_SCRIPT, record_exit, record_start
from hal.redirect._enable import enable


def _recording(bootstrap, log, script):
    def _bootstrap(self, *args, **kwargs):
        record_start("multiprocessing", script)
        start = time.monotonic()
        code = bootstrap(self, *args, **kwargs)
        record_exit(code, None, log, time.monotonic() - start, kind="multiprocessing", script=script)
        return code
    return _bootstrap


if __name__ == "__mp_main__" and os.environ.get(ENV_SCRIPT):  # as multiprocessing runs it; importing does nothing
    logging.getLogger("hal.redirect").setLevel(logging.ERROR)  # children count silently
    _shim = enable(get_registry().get(os.environ[ENV_BACKEND]) if os.environ.get(ENV_BACKEND) else None)
    _redirection = _shim.__enter__()  # for the rest of the process
    _redirection.log.echo = False
    multiprocessing.process.BaseProcess._bootstrap = _recording(multiprocessing.process.BaseProcess._bootstrap,
                                                                _redirection.log, os.environ[ENV_SCRIPT])
    globals().update({k: v for k, v in runpy.run_path(os.environ[ENV_SCRIPT], run_name="__mp_main__").items()
                      if k not in ("__name__", "__spec__", "__loader__")})
