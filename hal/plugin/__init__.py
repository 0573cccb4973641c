"""The plugin contract: what a backend plugin declares, how it is probed and loaded, what it returns.

``hookspecs`` (the hooks, ``hal_*``) · ``spec`` (``BackendSpec``, ``ProbeResult``: plain frozen
data) · ``probe`` (cheap evidence: modules, device nodes, tools, env, torch build facts) ·
``registry`` (pluggy's ``PluginManager("hal")``: discovery, blocking, validation, spec -> probe ->
load, selection, the hook fan-out) · ``origin`` (the distribution that supplied each plugin) ·
``backend`` (the ``Backend`` object a load hook returns) · ``kit`` (building blocks for plugins
of the standard shape) · ``facts`` (the built-in backends' data files) · ``cuda_family`` (which
vendor a ``cuda``-typed torch build is).

The pluggy marker pair is defined here, once for every hal plugin.

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
