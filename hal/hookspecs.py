"""Hook specifications of the ``hal`` plugin manager.

A backend plugin is a module (or object) implementing some of these hooks.  Built-in
plugins live in ``hal_backends``; external ones register under the entry-point group
``hal.backends``.  The registry calls the probe and load hooks of the plugin that declared
a spec only, so a broken plugin can never take another one down.
"""
from __future__ import annotations

from hal.plugin import hookspec


@hookspec
def hal_backend_specs():
    """Declare the backends this plugin provides.

    Must be cheap and must not import the vendor module.

    :return: a list of :class:`hal.spec.BackendSpec` (frozen, declarative).
    """


@hookspec(firstresult=True)
def hal_backend_probe(spec, context):
    """Decide, cheaply, whether ``spec``'s backend can be used on this machine.

    Never imports the vendor module: use ``context.has_module``, ``context.device_nodes``,
    ``context.which``, ``context.env`` and ``context.torch``.

    Stops at first non-None result.

    :param spec: a :class:`hal.spec.BackendSpec` this plugin declared.
    :param context: the :class:`hal.probe.ProbeContext` (filesystem root, env, PATH, torch facts).
    :return: a :class:`hal.spec.ProbeResult`.
    """


@hookspec(firstresult=True)
def hal_backend_load(spec):
    """Import the vendor module and return the backend object.

    Called only when the probe said ``available``.  Raise :class:`hal.NoDevice` when the
    module imports but reports no device.

    Stops at first non-None result.

    :param spec: a :class:`hal.spec.BackendSpec` this plugin declared.
    :return: a :class:`hal.backend.Backend`.
    """


@hookspec
def hal_op_support(spec):
    """Ship an ONNX operator-support profile for ``spec``'s device.

    :param spec: a :class:`hal.spec.BackendSpec` this plugin declared.
    :return: a profile dict in op_coverage's profile-file format, or None.
    """


@hookspec
def hal_torch_op_profile(spec):
    """Ship the observed torch-op support profile of ``spec``'s device.

    The file ``hal probe --out PATH`` writes on the device (schema ``hal.op_profile/1``);
    ``hal conformance`` re-probes and reports every op whose status no longer matches.

    :param spec: a :class:`hal.spec.BackendSpec` this plugin declared.
    :return: the profile dict, or None.
    """


@hookspec(firstresult=True)
def hal_device_utilization(spec, index):
    """Report how busy device ``index`` is, for ``hal.metrics``.

    Implement it where the vendor exposes utilisation (a management library or tool);
    without it hal tries the device module's ``utilization()`` and otherwise reports null.

    Stops at first non-None result.

    :param spec: a :class:`hal.spec.BackendSpec` this plugin declared.
    :param index: the device index.
    :return: utilisation in percent (0..100), or None when unknown.
    """
