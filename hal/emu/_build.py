"""Build and load ``hal_emu_C``, the C++ half of the emulated accelerator.

The extension links against the torch that is installed (its C++ ABI changes between torch
releases), so it is compiled on first use for that torch and cached: under
``$HAL_EMU_BUILD_DIR`` if set, else ``$XDG_CACHE_HOME/hal/emu`` (``~/.cache/hal/emu``), in a
folder named after the torch version and a hash of the sources and the build inputs.
``scripts/setup.sh`` builds it once (``python -m hal.emu.build``), so that the first
``HAL_BACKEND=emu`` run does not wait; a later run with another torch builds its own copy.

Concurrent first uses are safe: each builds in its own temporary folder and the first to
finish renames it into place.
"""
from __future__ import annotations

import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from types import ModuleType
from typing import List, Optional

from hal._errors import HalError

NAME = "hal_emu_C"
#: compiler flags (also part of the cache key)
# NDEBUG as torch is built: record_function.h lays out RecordFunction differently without it
CFLAGS = ["-O2", "-g0", "-DNDEBUG"]
_module: Optional[ModuleType] = None


def sources() -> List[str]:
    """The C++ sources, shipped inside the package (``hal/emu/csrc``)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
    return sorted(glob.glob(os.path.join(here, "*.cpp")) + glob.glob(os.path.join(here, "*.h")))


def cache_key() -> str:
    """Hash of everything the compiled module depends on."""
    import torch

    h = hashlib.sha256()
    for path in sources():
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as f:
            h.update(f.read())
    for part in (torch.__version__, str(getattr(torch.version, "git_version", "")), str(torch.compiled_with_cxx11_abi()),
                 sys.version, sysconfig.get_platform(), " ".join(CFLAGS)):
        h.update(part.encode())
    return h.hexdigest()[:16]


def build_root() -> str:
    root = os.environ.get("HAL_EMU_BUILD_DIR")
    if root:
        return os.path.abspath(os.path.expanduser(root))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "hal", "emu")


def build_dir() -> str:
    """The folder holding the module built for the torch installed here."""
    import torch

    version = torch.__version__.replace("+", "_")
    return os.path.join(build_root(), f"torch-{version}-{cache_key()}")


def _library_path(folder: str) -> str:
    return os.path.join(folder, NAME + ".so")


def _import(path: str) -> ModuleType:
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[NAME] = module
    return module


def _compile(verbose: bool) -> ModuleType:
    """Compile into a private temporary folder, move it into place, return the loaded module."""
    import torch.utils.cpp_extension as cpp_extension

    final = build_dir()
    os.makedirs(os.path.dirname(final), exist_ok=True)
    work = tempfile.mkdtemp(prefix=os.path.basename(final) + ".build-", dir=os.path.dirname(final))
    if not verbose:
        print(f"hal: building the emulated accelerator for torch {_torch_version()} (about a minute, "
              f"once per torch version) in {final}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        module = cpp_extension.load(name=NAME, sources=[s for s in sources() if s.endswith(".cpp")],
                                    build_directory=work, extra_cflags=list(CFLAGS), verbose=verbose,
                                    is_python_module=True)
    except Exception as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise HalError(f"emu: building the emulated accelerator failed ({type(exc).__name__}: "
                       f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else exc}); it needs a C++17 "
                       f"compiler (g++ or clang++) and ninja (pip install ninja). Run "
                       f"`python -m hal.emu.build --verbose` to see the compiler output") from exc
    try:
        from hal.util.io import current_umask
        os.chmod(work, 0o777 & ~current_umask())  # mkdtemp made it 0700; a shared cache is read by others
        os.rename(work, final)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(work, ignore_errors=True)
    if not verbose:
        print(f"hal: emulated accelerator built in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    sys.modules[NAME] = module
    return module


def _torch_version() -> str:
    import torch
    return torch.__version__


def load(verbose: bool = False) -> ModuleType:
    """The ``hal_emu_C`` module, built first if this torch has none yet.

    Loading it registers the ``PrivateUse1`` device (allocator, device guard, hooks,
    kernels, autocast) with torch; :func:`hal.emu.install` does that in the right order.
    """
    global _module
    if _module is not None:
        return _module
    if NAME in sys.modules:
        _module = sys.modules[NAME]
        return _module
    path = _library_path(build_dir())
    # a process loads the library once: a second copy would register its kernels again
    _module = _import(path) if os.path.exists(path) else _compile(verbose)
    return _module
