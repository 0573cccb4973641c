"""Old import paths of modules that moved, kept importable for one release with a warning.

``import hal.spec`` (moved to :mod:`hal.plugin.spec`) still works: the finder gives back the
new module itself, so both names see one module object, and warns once with the new path::

    DeprecationWarning: hal.spec moved to hal.plugin.spec; import that instead
    (the old path goes in the next release)

Each package installs its own table (:data:`hal.util.moved.HAL_MOVED`,
``op_coverage._moved.MOVED``) when it is imported.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Dict

#: old hal module -> where it lives now
HAL_MOVED: Dict[str, str] = {
    "hal.hookspecs": "hal.plugin.hookspecs",
    "hal.spec": "hal.plugin.spec",
    "hal.probe": "hal.plugin.probe",
    "hal.registry": "hal.plugin.registry",
    "hal.plugin_kit": "hal.plugin.kit",
    "hal.backend": "hal.plugin.backend",
    "hal.cuda_family": "hal.plugin.cuda_family",
    "hal.kernel_table": "hal.plugin.facts",
    "hal.opprobe": "hal.op_support.observe",
    "hal.opprobe_inputs": "hal.op_support.observe_inputs",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, table: Dict[str, str]):
        self.table = table
        self._specs: Dict[str, object] = {}

    def new_name(self, fullname: str):
        """Where *fullname* lives now (a moved module, or a module inside a moved package)."""
        if fullname in self.table:
            return self.table[fullname]
        head = fullname
        while "." in head:
            head = head.rsplit(".", 1)[0]
            if head in self.table:
                return self.table[head] + fullname[len(head):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        if self.new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = self.new_name(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; import that instead (the old path goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the new module ran already; the import system set its __spec__ to the old name's: undo that
        real = self._specs.pop(module.__spec__.name, None)
        if real is not None:
            module.__spec__ = real


def install(table: Dict[str, str]) -> None:
    """Make every old name in *table* import the module it names now (idempotent)."""
    if not any(isinstance(f, _Alias) and f.table is table for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(table))  # ahead of the path finders: these names have no file any more
