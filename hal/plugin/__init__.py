"""The pluggy marker pair, defined once for every hal plugin.

Vendor plugins decorate their hook functions with :data:`hookimpl`::

    from hal import hookimpl

    @hookimpl
    def hal_backend_specs():
        return [BackendSpec(name="mychip", ...)]
"""
import pluggy

PROJECT = "hal"
#: marks a hook specification in :mod:`hal.plugin.hookspecs`
hookspec = pluggy.HookspecMarker(PROJECT)
#: marks a plugin's hook implementation
hookimpl = pluggy.HookimplMarker(PROJECT)
