"""The backend registry: a pluggy ``PluginManager("hal")`` with spec → probe → load.

Plugins come from three places, loaded the same way:

* ``DEFAULT_PLUGINS`` — the built-in ``hal_backends.*`` modules;
* ``HAL_PLUGINS=mod1,mod2`` — extra plugin modules by import name (like ``PYTEST_PLUGINS``);
* entry points of group ``hal.backends`` — unless ``HAL_DISABLE_PLUGIN_AUTOLOAD=1``.

``HAL_BLOCK_PLUGINS=name,...`` blocks plugins (or backends) by name, like ``pytest -p no:X``
(pluggy's ``set_blocked``); the essential ``cpu`` plugin cannot be blocked.  After registration
pluggy's ``check_pending`` fails a plugin whose hook has no hookspec (a misspelled name).
Any exception in a plugin's import, validation, spec, probe or load is caught, recorded with
its reason and shown by ``hal list``; other backends are unaffected.  Nothing is probed or
loaded until it is asked for, so ``import hal`` does no device work.

hal calls a hook through one of three methods, each calling the plugins one at a time (so one
plugin's bug cannot leak into another's result): :meth:`Registry.call_each` (every declared,
non-blocked backend), :meth:`Registry.call_for` (one candidate's plugin) and
:meth:`Registry.call_selected` (the selected backend's plugin).
"""
from __future__ import annotations

import importlib
import os
import threading
import traceback
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

import pluggy

from hal.plugin import hookspecs
from hal._errors import BackendUnavailable, NoDevice, PluginBlockRefused
from hal.plugin import PROJECT
from hal.plugin import origin
from hal.plugin.probe import ProbeContext
from hal.plugin.spec import BackendSpec, ProbeResult, Status

#: built-in plugins, loaded exactly like external ones
DEFAULT_PLUGINS = (
    "cpu", "cuda", "cuda_compatible", "ascend", "cambricon", "musa", "xpu", "mps",
    "enflame", "biren", "tecorigin", "emu",
)
#: plugins that cannot be blocked (pytest's ``essential_plugins``), each with the reason
ESSENTIAL_PLUGINS = {"cpu": "hal falls back to it when no accelerator is usable"}
ENTRY_POINT_GROUP = "hal.backends"
ENV_BACKEND = "HAL_BACKEND"
ENV_AUTOLOAD_OFF = "HAL_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "HAL_BLOCK_PLUGINS"
ENV_PLUGINS = "HAL_PLUGINS"


def _short_error(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


@dataclass
class Candidate:
    """One backend as the registry sees it: spec, probe outcome and (once loaded) object."""

    spec: BackendSpec
    plugin: str
    result: ProbeResult
    backend: object = None
    load_error: Optional[str] = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def status(self) -> Status:
        return self.result.status

    def to_dict(self) -> dict:
        d = self.spec.to_dict()
        d.update(plugin=self.plugin, status=self.result.status.value, reason=self.result.reason,
                 evidence=list(self.result.evidence), loaded=self.backend is not None)
        return d


@dataclass
class PluginFailure:
    """A plugin that is blocked, or failed before its backends could be probed (stage
    ``import``, ``validate``, ``spec``, ...) or while a hook of it was fanned out (``op_support``)."""

    plugin: str
    stage: str
    error: str

    def to_dict(self) -> dict:
        return {"plugin": self.plugin, "stage": self.stage, "status": Status.BROKEN.value,
                "reason": self.error}


class Registry:
    """Discovers plugins, probes their backends and selects one.

    :param env: environment to read ``HAL_*`` variables from (default ``os.environ``).
    :param context: the :class:`ProbeContext` probes run against (default: this machine).
    """

    def __init__(self, env=None, context: Optional[ProbeContext] = None):
        self.env = dict(os.environ if env is None else env)
        self._context = context
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.failures: List[PluginFailure] = []
        #: ``(plugin name, source, module name or entry point)`` of every plugin tried, in order
        self._found: List[Tuple[str, str, object]] = []
        self._declared: Optional[List[Tuple[str, object, BackendSpec]]] = None
        self._candidates: Optional[List[Candidate]] = None
        self._selected: Optional[Candidate] = None
        self.selection_reason = ""
        self._lock = threading.RLock()
        self._block(self.env.get(ENV_BLOCK, ""))
        self._load_plugins()
        self._validate()

    # -- discovery --------------------------------------------------------------------
    def _block(self, value: str) -> None:
        """Block every name of ``HAL_BLOCK_PLUGINS`` in pluggy; refuse an essential one."""
        names = [n.strip() for n in value.split(",") if n.strip()]
        for name in names:
            if name in ESSENTIAL_PLUGINS:
                raise PluginBlockRefused(
                    f"{ENV_BLOCK}={value.strip()}: the {name} plugin cannot be blocked: "
                    f"{ESSENTIAL_PLUGINS[name]}; remove it from {ENV_BLOCK}")
        for name in names:
            self.pm.set_blocked(name)

    @property
    def blocked(self) -> set:
        """The names ``HAL_BLOCK_PLUGINS`` blocks (plugins, or backends a plugin declares)."""
        return {name for name, plugin in self.pm.list_name_plugin() if plugin is None}

    def _register(self, name: str, source: str, where, loader) -> None:
        self._found.append((name, source, where))
        if self.pm.is_blocked(name):  # not even imported
            self.failures.append(PluginFailure(name, "blocked", f"blocked by {ENV_BLOCK}"))
            return
        try:
            plugin = loader()
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:  # a hook whose arguments its spec lacks
            self.pm.unregister(name=name)  # pluggy keeps the hooks registered before the bad one
            self.failures.append(PluginFailure(name, "validate", str(exc).replace("\n", "; ") +
                                               "; hal/plugin/hookspecs.py names each hook's arguments"))
        except Exception as exc:  # a broken plugin never breaks the others
            self.failures.append(PluginFailure(name, "import", _short_error(exc)))

    def _load_plugins(self) -> None:
        for name in DEFAULT_PLUGINS:
            mod = f"hal_backends.{name}"
            self._register(name, origin.BUILTIN, mod, lambda m=mod: importlib.import_module(m))
        for mod in [m.strip() for m in self.env.get(ENV_PLUGINS, "").split(",") if m.strip()]:
            self._register(mod, origin.ENV_LIST, mod, lambda m=mod: importlib.import_module(m))
        if self.env.get(ENV_AUTOLOAD_OFF, "") not in ("1", "true", "yes"):
            from importlib.metadata import entry_points

            try:
                eps = entry_points(group=ENTRY_POINT_GROUP)
            except Exception as exc:  # pragma: no cover - broken metadata on disk
                self.failures.append(PluginFailure(ENTRY_POINT_GROUP, "discover", _short_error(exc)))
                eps = ()
            for ep in eps:
                if self.pm.has_plugin(ep.name):
                    continue
                self._register(ep.name, origin.ENTRY_POINT, ep, ep.load)

    def _validate(self) -> None:
        """pluggy's ``check_pending``: a plugin implementing a hook no hookspec names (a
        misspelled hook, silently never called otherwise) is recorded and unregistered."""
        while True:
            try:
                self.pm.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                name = self.pm.get_name(exc.plugin)
                if name is None:  # pragma: no cover - pluggy names only registered plugins
                    raise
                unknown = sorted(h.name for h in self.pm.get_hookcallers(exc.plugin) or () if not h.has_spec()
                                 and any(i.plugin is exc.plugin and not i.optionalhook for i in h.get_hookimpls()))
                self.pm.unregister(name=name)
                self.failures.append(PluginFailure(name, "validate", self._unknown_hooks(unknown)))

    def _unknown_hooks(self, unknown: List[str]) -> str:
        known = sorted(n for n, caller in vars(self.pm.hook).items() if caller.has_spec())
        from difflib import get_close_matches  # only for a plugin that misspells a hook
        said = []
        for hook in unknown:
            close = get_close_matches(hook, known, n=1)
            said.append(f"{hook}" + (f" (did you mean {close[0]}?)" if close else ""))
        it = "it" if len(said) == 1 else "them"
        return (f"unknown hook{'s' if len(said) > 1 else ''} {', '.join(said)}: no hookspec has that name; "
                f"the hal hooks are {', '.join(known)}; rename {it}, or mark {it} @hookimpl(optionalhook=True)")

    def plugin_origins(self) -> List[origin.PluginOrigin]:
        """Every plugin hal tried to register (blocked and broken ones too), with the
        distribution that supplied it."""
        return origin.describe(self._found)

    def plugin_call(self, plugin, hook: str, **kwargs):
        """Call ``hook`` on one plugin only (so another plugin's bug cannot leak in).

        What the hook returns: a list of results, or the first result (None when the
        plugin has no such hook) for a ``firstresult`` hook.  Exceptions propagate.
        """
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        return self.pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)

    def call_each(self, hook: str, record_as: Optional[str] = None,
                  **kwargs) -> Iterator[Tuple[str, Optional[BackendSpec], object]]:
        """Fan ``hook`` out: ``(plugin name, spec, result)`` for every declared backend that is
        not blocked, in declaration order, each call on the declaring plugin alone.

        A hook without a ``spec`` argument (``hal_backend_specs``) is called once per plugin,
        with ``spec`` None.  A plugin's exception skips that call and, when ``record_as`` names
        a stage, is recorded in :attr:`failures`: a broken plugin never takes another down.
        """
        if "spec" in getattr(self.pm.hook, hook).spec.argnames:
            calls = [(pname, plugin, spec) for pname, plugin, spec in self._specs()
                     if not self.pm.is_blocked(spec.name)]
        else:
            calls = [(pname, plugin, None) for pname, plugin in self.pm.list_name_plugin() if plugin is not None]
        for pname, plugin, spec in calls:
            try:
                result = self.plugin_call(plugin, hook, **(kwargs if spec is None else {**kwargs, "spec": spec}))
            except Exception as exc:
                if record_as:
                    self.failures.append(PluginFailure(pname, record_as, _short_error(exc)))
                continue
            yield pname, spec, result

    def call_for(self, cand: Candidate, hook: str, **kwargs):
        """``hook(spec=cand.spec, **kwargs)`` on the plugin that declared ``cand`` alone;
        what :meth:`plugin_call` returns.  Exceptions propagate: the caller decides."""
        # an unregistered plugin is None: the subset then has no implementation, an empty result
        return self.plugin_call(self.pm.get_plugin(cand.plugin), hook, spec=cand.spec, **kwargs)

    def call_selected(self, hook: str, **kwargs):
        """:meth:`call_for` on the selected backend (:meth:`selected`)."""
        return self.call_for(self.selected(), hook, **kwargs)

    @property
    def context(self) -> ProbeContext:
        if self._context is None:
            self._context = ProbeContext(env=self.env)
        return self._context

    def candidates(self) -> List[Candidate]:
        """Every declared backend with its probe result (probes run once, lazily)."""
        with self._lock:
            if self._candidates is None:
                self._candidates = self._probe_all()
            return list(self._candidates)

    def _specs(self) -> List[Tuple[str, object, BackendSpec]]:
        """``(plugin name, plugin, spec)`` for every declared backend, nothing probed."""
        with self._lock:
            if self._declared is None:
                self._declared = [(pname, self.pm.get_plugin(pname), spec)
                                  for pname, _, groups in self.call_each("hal_backend_specs", record_as="spec")
                                  for group in groups for spec in (group or [])]
            return list(self._declared)

    def _probe_all(self) -> List[Candidate]:
        out: List[Candidate] = []
        for pname, plugin, spec in self._specs():
            if self.pm.is_blocked(spec.name):
                res = ProbeResult(Status.BLOCKED, f"blocked by {ENV_BLOCK}")
            else:
                res = self._probe_one(plugin, spec)
            out.append(Candidate(spec, pname, res))
        out.sort(key=lambda c: (-c.spec.priority, c.spec.name))
        return out

    def _probe_one(self, plugin, spec: BackendSpec) -> ProbeResult:
        try:
            res = self.plugin_call(plugin, "hal_backend_probe", spec=spec, context=self.context)
        except Exception as exc:
            return ProbeResult(Status.BROKEN, f"probe raised {_short_error(exc)}")
        if not isinstance(res, ProbeResult):
            return ProbeResult(Status.BROKEN, f"probe returned {type(res).__name__}, not a ProbeResult")
        return res

    # -- loading and selection --------------------------------------------------------
    def load(self, cand: Candidate):
        """Load an available candidate; on failure record why and return None."""
        with self._lock:
            if cand.backend is not None or cand.status is not Status.AVAILABLE:
                return cand.backend
            try:
                backend = self.call_for(cand, "hal_backend_load")
                if backend is None:
                    raise RuntimeError("load hook returned None")
                cand.backend = backend
            except NoDevice as exc:
                cand.result = ProbeResult(Status.NO_DEVICE, str(exc), cand.result.evidence + ("load: " + str(exc),))
            except Exception as exc:
                err = _short_error(exc)
                cand.load_error = err
                cand.result = ProbeResult(Status.BROKEN, f"load raised {err}",
                                          cand.result.evidence + ("load: " + err,))
            return cand.backend

    def get(self, name: str):
        """The loaded backend named (or of device type) ``name``; raises BackendUnavailable."""
        return self._forced(name).backend

    def _forced(self, wanted: str) -> Candidate:
        cands = self.candidates()
        matches = [c for c in cands if c.name == wanted] or [c for c in cands if c.spec.device_type == wanted]
        if not matches:
            known = ", ".join(sorted({c.name for c in cands}))
            raise BackendUnavailable(f"{ENV_BACKEND}={wanted}: no backend has that name or device type; "
                                     f"known backends: {known}")
        reasons = []
        for c in matches:
            if c.status is Status.AVAILABLE and self.load(c) is not None:
                return c
            reasons.append(f"{c.name}: {c.status.value} ({c.result.reason})")
        usable = ", ".join(c.name for c in cands if c.status is Status.AVAILABLE) or "none"
        raise BackendUnavailable(f"{ENV_BACKEND}={wanted}: " + "; ".join(reasons) +
                                 f"; unset {ENV_BACKEND} or choose one of: {usable}")

    def selected(self) -> Candidate:
        """The backend hal uses: ``HAL_BACKEND`` if set, else the best available one."""
        with self._lock:
            if self._selected is not None:
                return self._selected
            wanted = self.env.get(ENV_BACKEND, "").strip()
            if wanted:
                self._selected = self._forced(wanted)
                self.selection_reason = f"forced by {ENV_BACKEND}={wanted}"
                return self._selected
            skipped = []
            for c in self.candidates():
                if c.name == "cpu":
                    continue
                if c.status is Status.AVAILABLE and self.load(c) is not None:
                    self._selected = c
                    self.selection_reason = f"highest-priority available backend (priority {c.spec.priority})"
                    return c
                if c.status is not Status.NOT_INSTALLED:
                    skipped.append(f"{c.name}: {c.status.value}")
            cpu = self._cpu()
            self.load(cpu)
            self._selected = cpu
            self.selection_reason = ("no accelerator backend is available" +
                                     (f" ({'; '.join(skipped)})" if skipped else
                                      " (no vendor stack is installed)"))
            return cpu

    def _cpu(self) -> Candidate:
        """The cpu candidate, hal's fallback; a clear error when its plugin failed."""
        cpu = next((c for c in self.candidates() if c.name == "cpu"), None)
        if cpu is None:
            why = "; ".join(f"{f.stage}: {f.error}" for f in self.failures if f.plugin == "cpu") or \
                "no plugin declares it"
            raise BackendUnavailable(f"no accelerator is usable and the cpu backend is missing ({why}); "
                                     f"reinstall hal, or check the plugins hal list names as broken")
        return cpu

    def op_profiles(self) -> List[Tuple[str, dict]]:
        """Operator-support profiles shipped by plugins through ``hal_op_support``.

        A profile describes a target whether or not its device is here, so nothing is
        probed (probes read torch's build facts; finding profiles never imports torch).
        """
        calls = sorted(self.call_each("hal_op_support", record_as="op_support"),
                       key=lambda t: (-t[1].priority, t[1].name))
        return [(pname, prof) for pname, _, profs in calls for prof in profs if prof]

    def report(self) -> dict:
        """Everything ``hal list --json`` prints (schema ``hal.list/1``)."""
        sel = None
        try:
            sel = self.selected()
        except BackendUnavailable as exc:
            self.selection_reason = str(exc)
        return {
            "schema": "hal.list/1",
            "selected": sel.name if sel else None,
            "selection_reason": self.selection_reason,
            "backends": [c.to_dict() for c in self.candidates()],
            "plugin_failures": [f.to_dict() for f in self.failures],
            "plugins": [o.to_dict() for o in self.plugin_origins()],
        }


_registry: Optional[Registry] = None
_registry_lock = threading.Lock()


_generation = 0


def get_registry() -> Registry:
    """The process-wide registry, created on first use."""
    global _registry, _generation
    with _registry_lock:
        if _registry is None:
            _registry = Registry()
            _generation += 1
        return _registry


def reset_registry() -> None:
    """Forget the process-wide registry (the next call re-reads env and re-probes)."""
    global _registry, _generation
    with _registry_lock:
        _registry = None
        _generation += 1


def generation() -> int:
    """A number that changes whenever the process-wide registry is created or reset.

    Caches of what the registry answered (``hal.ops``' per-op paths) compare it to know
    when to ask again; reading it takes no lock.
    """
    return _generation


def selected_backend():
    """The loaded :class:`hal.plugin.backend.Backend` hal uses in this process."""
    return get_registry().selected().backend


def plugin_op_profiles() -> List[Tuple[str, dict]]:
    """``(plugin name, profile dict)`` for every profile a backend plugin ships."""
    return get_registry().op_profiles()
