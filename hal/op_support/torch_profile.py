"""Torch op profiles: which aten ops a device's PyTorch stack runs natively, and the judging rules.

Profiles (format ``op_coverage.torch_profile/1``, schema ``data/torch_profile.schema.json``) come from

1. ``extra_files`` given by the user (they replace a bundled profile of the same name);
2. hal backend plugins, through the ``hal_torch_op_profile`` hook (new format, or the older
   ``hal.op_profile/1`` that ``hal probe`` wrote: converted, see :func:`from_hal_op_profile`);
3. the bundled profiles: the ``torch-<version>.json`` files of the built-in backends' folders
   (``backends/ascend/torch-2.13.json``, found through :mod:`hal.plugin.facts`), generated from the
   project's fact sheet by ``scripts/torch_profiles_from_facts.py``, like torch's own tables under
   ``hal/data/torch/`` (composite kernels per torch version, CUDA-only ops).

Loading reads plain JSON and never imports torch (plugin profiles need hal's registry, which loads
hal's backend plugins: pass ``use_plugins=False`` when that is not wanted).

Judging (:meth:`TorchProfile.judge`), exactly as the facts' README says:

* ``always_cpu`` ops are missing, with ``cpu_fallback``, even when listed;
* native: listed in ``ops``, ``ops_via_structured_delegate`` or ``generic_registered``, or the op's
  structured delegate (its ``.out`` op, from the composite table of the profile's torch version) is;
* a CUDA-only op (``cudnn_*``, ``_scaled_dot_product_flash_attention*`` ...) the device lacks is judged
  at its parent op (``data/torch/cuda_only_parents.json``);
* composite: in that torch version's CompositeImplicitAutograd / CompositeExplicitAutograd(NonFunctional);
* otherwise missing, with what the vendor does (``unimplemented.default``).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable, Optional

from hal._errors import BadTorchProfile, UnknownTorchTarget
from hal.plugin.facts import SHOWN_ROOT, builtin_files, read_builtin_json

SCHEMA = "op_coverage.torch_profile/1"
OLD_SCHEMA = "hal.op_profile/1"
STATUSES = ("native", "composite", "missing")
BEHAVIOURS = ("cpu_fallback", "error", "error_unless_env", "unknown")


def _data_dir():
    """torch's own tables (no vendor's): ``composite-<minor>.json``, ``cuda_only_parents.json``."""
    return resources.files("hal").joinpath("data", "torch")


@lru_cache(maxsize=None)
def _read_bundled(name: str) -> dict:
    """One of torch's own tables under ``hal/data/torch`` by file name."""
    return json.loads(_data_dir().joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def bundled_files() -> dict[str, str]:
    """``{profile name: file}`` of the bundled torch profiles (``"mlu-2.4": "backends/cambricon/torch-2.4.json"``),
    sorted by name: every ``torch-*.json`` of the built-in backends' folders."""
    found = {read_builtin_json(path)["name"]: path for path in builtin_files("torch-*.json")}
    return dict(sorted(found.items()))


def bundled_names() -> list[str]:
    """Names of the bundled torch profiles, sorted."""
    return list(bundled_files())


def version_key(v: str) -> tuple[int, int]:
    """``"2.13.0+cpu"`` -> ``(2, 13)``; raises ValueError for a non-version."""
    m = re.match(r"^\s*(\d+)\.(\d+)", str(v))
    if not m:
        raise ValueError(f"{v!r} is not a torch version (expected e.g. 2.13.0)")
    return int(m.group(1)), int(m.group(2))


def minor_version(v: str) -> str:
    a, b = version_key(v)
    return f"{a}.{b}"


# -- composite tables ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CompositeTable:
    """PyTorch's composite kernels and structured delegates for one torch version."""

    torch_version: str
    cia: frozenset
    cea: frozenset
    ceanf: frozenset
    structured_delegate: dict
    cea_with_backend_kernels: frozenset = frozenset()


def composite_versions() -> list[str]:
    """The torch minor versions with a bundled composite table (``["2.4", "2.7", ...]``), ascending."""
    found = [p.name[len("composite-"):-len(".json")] for p in _data_dir().iterdir()
             if p.name.startswith("composite-") and p.name.endswith(".json")]
    return sorted(found, key=version_key)


@lru_cache(maxsize=None)
def composite_table(torch_version: str) -> CompositeTable:
    """The composite table of ``torch_version``'s minor release, or of the nearest one bundled.

    The nearest table is used only when the exact minor has none; the caller learns about it from
    :attr:`CompositeTable.torch_version`.
    """
    want = version_key(torch_version)
    avail = composite_versions()
    if not avail:
        raise BadTorchProfile("hal/data/torch has no composite-*.json table; reinstall op_coverage "
                         "or run scripts/torch_profiles_from_facts.py")
    pick = min(avail, key=lambda v: (abs(_dist(version_key(v), want)), -_dist(version_key(v), want)))
    d = _read_bundled(f"composite-{pick}.json")
    return CompositeTable(d["torch_version"], frozenset(d["cia"]), frozenset(d["cea"]), frozenset(d["ceanf"]),
                          dict(d["structured_delegate"]), frozenset(d.get("cea_with_backend_kernels", ())))


def _dist(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Signed distance in minor releases (a - b); majors count as 100 minors."""
    return (a[0] - b[0]) * 100 + (a[1] - b[1])


@lru_cache(maxsize=None)
def cuda_only_rules() -> tuple:
    """``((pattern, (parents...), why), ...)`` from ``data/torch/cuda_only_parents.json``."""
    d = _read_bundled("cuda_only_parents.json")
    return tuple((r["pattern"], tuple(r["parents"]), r.get("why", "")) for r in d["rules"])


@lru_cache(maxsize=None)
def privateuse1_only_rules() -> tuple:
    """Rules for ops torch calls only on a PrivateUse1 device (``_copy_from``): judged at their parent
    on in-tree backends (CUDA, XPU, MPS), as themselves on a PrivateUse1 plugin."""
    d = _read_bundled("cuda_only_parents.json")
    return tuple((r["pattern"], tuple(r["parents"]), r.get("why", "")) for r in d.get("privateuse1_only_rules", ()))


def cuda_only_parents(op: str, in_tree: bool = False) -> Optional[tuple[tuple, str]]:
    """``(parents, why)`` when ``op`` is a CUDA-only op judged at its parent op (or, on an in-tree
    backend, an op torch calls only on PrivateUse1 devices), else None."""
    for pat, parents, why in cuda_only_rules() + (privateuse1_only_rules() if in_tree else ()):
        if fnmatchcase(op, pat):
            return parents, why
    return None


# -- verdicts --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """How one target runs one aten op.

    ``status``: native / composite / missing.  ``via``: listed, structured_delegate:<out op>, generic,
    cia, cea, ceanf, parent:<op> (a CUDA-only op judged at its parent), always_cpu, or "" (missing).
    ``behaviour`` (missing only): cpu_fallback, error, error_unless_env or unknown.
    ``message``: the vendor's text for this op when it is missing (the error, or the fallback warning).
    """

    op: str
    status: str
    via: str
    behaviour: Optional[str] = None
    detail: str = ""
    message: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


_BEHAVIOUR_TEXT = {
    "cpu_fallback": "runs on the CPU through {who}'s fallback (inputs copied to the host and back on every call)",
    "error": "raises {etype}: no kernel and no CPU fallback",
    "error_unless_env": "raises {etype} unless {env}=1 is set (then it runs on the CPU)",
    "unknown": "what {who} does with it is not known",
}


# -- profiles ---------------------------------------------------------------------------------------
@dataclass
class TorchProfile:
    """One device's torch op list for one torch version, with :meth:`judge`."""

    name: str
    torch_version: str
    device_type: str
    ops: frozenset = field(repr=False)
    ops_via_structured_delegate: frozenset = field(default=frozenset(), repr=False)
    generic_registered: frozenset = field(default=frozenset(), repr=False)
    unimplemented: dict = field(default_factory=dict, repr=False)
    aliases: list = field(default_factory=list)
    vendor: str = ""
    title: str = ""
    partial: bool = False
    uncertain: list = field(default_factory=list, repr=False)
    origin: str = ""
    data: dict = field(default_factory=dict, repr=False)

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict, origin: str = "") -> "TorchProfile":
        """Build from a parsed ``op_coverage.torch_profile/1`` dict; :class:`BadTorchProfile` names what is wrong."""
        where = origin or d.get("name", "torch profile")
        if not isinstance(d, dict):
            raise BadTorchProfile(f"{where}: a torch profile must be a JSON object; see hal/data/"
                             "torch_profile.schema.json")
        if d.get("schema") != SCHEMA:
            raise BadTorchProfile(f"{where}: schema is {d.get('schema')!r}, expected {SCHEMA!r} (or {OLD_SCHEMA!r} from "
                             "hal probe); see hal/data/torch_profile.schema.json")
        missing = [k for k in ("name", "device_type", "torch_version", "ops", "unimplemented") if k not in d]
        if missing:
            raise BadTorchProfile(f"{where}: missing required field(s) {', '.join(missing)}; "
                             "see hal/data/torch_profile.schema.json")
        try:
            version_key(d["torch_version"])
        except ValueError as e:
            raise BadTorchProfile(f"{where}: torch_version: {e}") from None
        u = dict(d["unimplemented"])
        if u.get("default") not in BEHAVIOURS:
            raise BadTorchProfile(f"{where}: unimplemented.default is {u.get('default')!r}; use one of "
                             f"{', '.join(BEHAVIOURS)}")
        return cls(name=d["name"], torch_version=d["torch_version"], device_type=d["device_type"],
                   ops=frozenset(d["ops"]),
                   ops_via_structured_delegate=frozenset(d.get("ops_via_structured_delegate", ())),
                   generic_registered=frozenset(d.get("generic_registered", ())), unimplemented=u,
                   aliases=list(d.get("aliases", [])), vendor=d.get("vendor") or d["name"].split("-")[0],
                   title=d.get("title", d["name"]), partial=bool(d.get("partial", False)),
                   uncertain=list(d.get("uncertain", [])), origin=origin, data=d)

    @classmethod
    def from_file(cls, path) -> "TorchProfile":
        """Load a profile file (new format, or ``hal.op_profile/1`` from ``hal probe``)."""
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadTorchProfile(f"torch profile {p}: no such file; check the path") from None
        except (OSError, ValueError) as e:
            raise BadTorchProfile(f"torch profile {p}: not readable JSON ({e}); fix or regenerate the file") from None
        if isinstance(d, dict) and d.get("schema") == OLD_SCHEMA:
            d = from_hal_op_profile(d)
        return cls.from_dict(d, origin=str(p))

    # -- facts ----------------------------------------------------------------------------------------
    @property
    def minor(self) -> str:
        """``"2.13"`` for torch 2.13.x."""
        return minor_version(self.torch_version)

    @property
    def native(self) -> frozenset:
        """Ops with a kernel for the device: ops + structured delegates listed + generic registrations."""
        return self.ops | self.ops_via_structured_delegate | self.generic_registered

    @property
    def always_cpu(self) -> frozenset:
        return frozenset(self.unimplemented.get("always_cpu", ()))

    def composite(self) -> CompositeTable:
        """The composite table of this profile's torch version (or the nearest one bundled)."""
        return composite_table(self.torch_version)

    def message_for(self, op: str, behaviour: Optional[str] = None) -> Optional[str]:
        """The vendor's text for a missing ``op``: the error it raises, or the warning of its CPU fallback."""
        u = self.unimplemented
        b = behaviour or u.get("default")
        tmpl = u.get("warning_message") if b == "cpu_fallback" else u.get("error_message")
        tmpl = tmpl or u.get("error_message")
        return tmpl.replace("{op}", op) if tmpl else None

    # -- judging -----------------------------------------------------------------------------------------
    def judge(self, op: str) -> Verdict:
        """Native, composite or missing for ``op`` (an aten overload name such as ``add.Tensor``)."""
        if op in self.always_cpu:
            return Verdict(op, "missing", "always_cpu", "cpu_fallback",
                           f"{self.name} always routes aten::{op} to the CPU (the vendor's always-CPU list), "
                           "whether or not a kernel is listed",
                           self.message_for(op, "cpu_fallback"))
        v = self._native(op)
        if v:
            return v
        parents = cuda_only_parents(op, in_tree=not str(self.data.get("dispatch_key", "PrivateUse1"))
                                    .startswith("PrivateUse1"))
        if parents:
            return self._judge_parent(op, *parents)
        v = self._composite(op)
        if v:
            return v
        return self._missing(op)

    def _native(self, op: str) -> Optional[Verdict]:
        note = self._chip_note(op)
        if op in self.ops:
            return Verdict(op, "native", "listed", None, f"{self.name} registers a kernel for aten::{op}" + note)
        comp = self.composite()
        out = comp.structured_delegate.get(op)
        if op in self.ops_via_structured_delegate:
            return Verdict(op, "native", f"structured_delegate:{out or '?'}", None,
                           f"{self.name} runs aten::{op} through its structured .out kernel"
                           + (f" aten::{out}" if out else "") + note)
        if op in self.generic_registered:
            how = self.data.get("generic_registered_how") or "a generic kernel"
            return Verdict(op, "native", "generic", None, f"{self.name} binds aten::{op} to {how}" + note)
        if out and out in self.native and out not in self.always_cpu:
            return Verdict(op, "native", f"structured_delegate:{out}", None,
                           f"aten::{op} is a structured delegate of aten::{out} (torch {comp.torch_version}), "
                           f"which {self.name} implements" + self._chip_note(out))
        return None

    def _composite(self, op: str) -> Optional[Verdict]:
        comp = self.composite()
        for key, table, what in (("cia", comp.cia, "CompositeImplicitAutograd: decomposes into other aten ops "
                                                     "before reaching the device"),
                                 ("cea", comp.cea, "CompositeExplicitAutograd: one generic kernel for every "
                                                   "device, calling other aten ops"),
                                 ("ceanf", comp.ceanf, "CompositeExplicitAutogradNonFunctional: one generic kernel "
                                                       "for every device")):
            if op in table:
                slow = (" (CPU/CUDA have their own kernel; the generic path may be slower)"
                        if key != "cia" and op in comp.cea_with_backend_kernels else "")
                return Verdict(op, "composite", key, None,
                               f"aten::{op} is {what} in torch {comp.torch_version}{slow}; needs no {self.name} kernel")
        return None

    def _missing(self, op: str, why: str = "") -> Verdict:
        u = self.unimplemented
        b = u.get("default", "unknown")
        who = self.title or self.name
        text = _BEHAVIOUR_TEXT[b].format(who=who, etype=u.get("error_type", "NotImplementedError"),
                                         env=u.get("env") or "?")
        detail = f"{self.name} has no kernel for aten::{op}{why}; {text}"
        if self.partial:
            detail += f" ({self.name} is a PARTIAL list: the op may well exist)"
        return Verdict(op, "missing", "", b, detail, self.message_for(op, b))

    def _judge_parent(self, op: str, parents: tuple, why: str) -> Verdict:
        for p in parents:
            v = self._native(p)
            if v and p not in self.always_cpu:
                return Verdict(op, "native", f"parent:{p}", None,
                               f"{self.name} never receives aten::{op} ({why}); it implements the parent "
                               f"aten::{p}")
        first = parents[0]
        pv = self.judge(first) if not cuda_only_parents(first) else self._missing(first)
        detail = (f"{self.name} never receives aten::{op} ({why}); judged at its parent aten::{first}: "
                  f"{pv.detail}")
        return Verdict(op, pv.status, f"parent:{first}", pv.behaviour, detail,
                       self.message_for(first, pv.behaviour) if pv.status == "missing" else None)

    def _chip_note(self, op: str) -> str:
        chips = [c for c, ops in (self.unimplemented.get("chip_cpu") or {}).items() if op in ops]
        return f" (but runs on the CPU on chip {', '.join(chips)})" if chips else ""

    def summary(self) -> dict:
        """One row for ``op_coverage targets``."""
        src = self.data.get("source") or {}
        prov = " ".join(str(x) for x in (src.get("repo"), src.get("ref"), (src.get("commit") or "")[:8]) if x)
        return {"name": self.name, "aliases": list(self.aliases), "kind": "torch", "title": self.title,
                "profile_kind": "plugin" if self.origin.startswith("hal plugin") else
                ("bundled" if self.origin.startswith(SHOWN_ROOT + "/") else "user"),
                "provenance": prov or self.data.get("provenance", "") or self.origin, "source": src,
                "origin": self.origin, "entries": len(self.native), "torch_version": self.torch_version,
                "device_type": self.device_type, "unimplemented": self.unimplemented.get("default"),
                "partial": self.partial, "uncertain": list(self.uncertain), "fallback_profile": None}


# -- the older hal.op_profile/1 format ---------------------------------------------------------------------
def from_hal_op_profile(d: dict, name: Optional[str] = None) -> dict:
    """Convert a ``hal.op_profile/1`` dict (``hal probe`` before ``--trace``) to the torch-profile format.

    Ops with status ``native`` become listed ops; ``fallback`` ops (matched the CPU but the stack signalled
    a CPU fallback) become ``always_cpu``; ``failing`` ops are left out.  Names are the probe's case names
    (``softmax``, ``linear``), not always aten overloads, and only the probed ops are known: the result is
    marked partial.
    """
    ops = d.get("ops") or {}
    if not isinstance(ops, dict):
        raise BadTorchProfile(f"{name or d.get('backend', 'hal.op_profile')}: 'ops' must map op names to "
                         "{status, detail}; regenerate it with hal probe --out")
    backend = d.get("backend") or d.get("device_type") or "device"
    tv = str(d.get("torch") or "0.0")
    return {
        "schema": SCHEMA, "name": name or backend, "aliases": [], "kind": "torch", "vendor": backend,
        "title": f"{backend} (observed by hal probe)", "partial": True,
        "backend": backend, "device_type": d.get("device_type", backend), "dispatch_key": "unknown",
        "torch_version": tv.split("+")[0] if re.match(r"^\d+\.\d+", tv) else "0.0",
        "generated": d.get("generated", ""), "provenance": d.get("provenance", "hal probe"),
        "ops": sorted(o for o, r in ops.items() if isinstance(r, dict) and r.get("status") == "native"),
        "unimplemented": {"default": "unknown", "env": None, "error_message": None, "error_message_kind": "generic",
                          "always_cpu": sorted(o for o, r in ops.items()
                                               if isinstance(r, dict) and r.get("status") == "fallback"),
                          "source": "converted from hal.op_profile/1: 'fallback' ops are always_cpu"},
        "probe": {o: {"status": r.get("status", "failing"), "detail": r.get("detail", "")}
                  for o, r in ops.items() if isinstance(r, dict)},
        "uncertain": [f"converted from {OLD_SCHEMA}: only {len(ops)} ops were probed, named by the probe's "
                      "case names; every other op is judged missing with unknown behaviour."],
    }


def plugin_torch_profiles() -> list[tuple[str, dict]]:
    """``(plugin name, profile dict)`` from every hal plugin's ``hal_torch_op_profile`` hook.

    Asks each plugin for each backend spec it declares, without probing devices; empty when hal's
    core is absent.  A hook that raises is skipped (a broken plugin must not break a scan).
    """
    try:
        from hal.plugin.registry import get_registry
    except ImportError:
        return []
    try:
        reg = get_registry()
    except Exception:  # noqa: BLE001
        return []
    return [(f"{pname}:{spec.name}", prof) for pname, spec, profs in reg.call_each("hal_torch_op_profile")
            for prof in profs if prof]


def profile_from_plugin(plugin: str, data: dict) -> TorchProfile:
    """Accept a plugin's profile in either format; :class:`BadTorchProfile` when it is neither."""
    if isinstance(data, dict) and data.get("schema") == OLD_SCHEMA:
        backend = plugin.split(":")[-1]
        data = from_hal_op_profile(data, name=data.get("backend") or backend)
    return TorchProfile.from_dict(data, origin=f"hal plugin {plugin}")


def load_torch_profiles(extra_files: Iterable = (), use_plugins: bool = True,
                        problems: Optional[list] = None) -> dict[str, TorchProfile]:
    """Every torch profile by name: user files, then plugin profiles, then the bundled ones.

    A user file replaces a bundled profile of the same name; a plugin profile never does (its name
    clash is reported in ``problems``, like a plugin profile that is malformed).
    """
    out: dict[str, TorchProfile] = {}
    for f in extra_files or ():
        p = TorchProfile.from_file(f)
        out[p.name] = p
    if use_plugins:
        bundled = set(bundled_names())
        for plugin, data in plugin_torch_profiles():
            try:
                p = profile_from_plugin(plugin, data)
            except BadTorchProfile as e:
                if problems is not None:
                    problems.append(f"hal plugin {plugin}: {e}")
                continue
            if p.name in out or p.name in bundled:
                if problems is not None:
                    problems.append(f"hal plugin {plugin}: torch profile {p.name!r} clashes with an existing one; "
                                    "ignored (rename it in the plugin)")
                continue
            out[p.name] = p
    for name, path in bundled_files().items():
        if name not in out:
            out[name] = TorchProfile.from_dict(read_builtin_json(path), origin=path)
    return out


def alias_map(profiles: dict[str, TorchProfile]) -> dict[str, str]:
    """alias -> profile name (names map to themselves)."""
    m = {n: n for n in profiles}
    for p in profiles.values():
        for a in p.aliases:
            m.setdefault(a, p.name)
    return m


def resolve_torch_targets(profiles: dict[str, TorchProfile], requested: Iterable[str]) -> list[TorchProfile]:
    """Turn ``-t`` values (names, aliases, comma lists, ``all``) into torch profiles.

    Raises :class:`UnknownTorchTarget` naming the unknown value and listing every known name and alias.
    """
    amap = alias_map(profiles)
    flat = [t.strip() for r in requested for t in str(r).split(",") if t.strip()] or ["all"]
    out: list[TorchProfile] = []
    for t in flat:
        if t == "all":
            picked = list(profiles.values())
        elif t in amap:
            picked = [profiles[amap[t]]]
        else:
            known = ", ".join(sorted(profiles)) + "; aliases: " + ", ".join(
                sorted(f"{a}={n}" for a, n in amap.items() if a != n))
            raise UnknownTorchTarget(f"torch target {t!r} is not known; choose from: {known} (or 'all', or add "
                                "one with --profile FILE in format op_coverage.torch_profile/1)")
        out += [p for p in picked if p not in out]
    return out


def nearest_profile(profiles: dict[str, TorchProfile], vendor: str,
                    torch_version: str) -> tuple[TorchProfile, Optional[str]]:
    """The profile of ``vendor`` (a vendor key, profile name or alias) closest to ``torch_version``.

    Returns ``(profile, None)`` when a profile of that torch minor exists, else the nearest one (a tie
    goes to the newer) and a warning naming the skew.
    """
    amap = alias_map(profiles)
    if vendor in amap:
        vendor_key = profiles[amap[vendor]].vendor
    else:
        vendor_key = vendor
    cands = [p for p in profiles.values() if p.vendor == vendor_key]
    if not cands:
        vendors = sorted({p.vendor for p in profiles.values()})
        raise UnknownTorchTarget(f"no torch profile for vendor {vendor!r}; known vendors: {', '.join(vendors)}")
    want = version_key(torch_version)
    best = min(cands, key=lambda p: (abs(_dist(version_key(p.torch_version), want)),
                                     -_dist(version_key(p.torch_version), want)))
    have = version_key(best.torch_version)
    if have == want:
        return best, None
    lists = ", ".join(sorted({p.torch_version for p in cands}, key=version_key))
    warn = (f"torch version skew: the trace was recorded with torch {torch_version}, but {vendor_key} has op lists "
            f"for torch {lists} only; judged against {best.name} (torch {best.torch_version}), the nearest. Ops "
            f"added, renamed or made composite between {minor_version(torch_version)} and {best.minor} may be judged "
            f"wrongly; record the trace with torch {best.minor} for an exact answer.")
    return best, warn
