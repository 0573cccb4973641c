"""``python -m hal.transfer script.py``: the old name of ``python -m hal.redirect`` (warns once)."""
import runpy

import hal.transfer  # noqa: F401  (the deprecation warning)

if __name__ == "__main__":
    runpy.run_module("hal.redirect", run_name="__main__", alter_sys=True)
