"""Build of the private native extension ``hal._C`` (pybind11, no libtorch link).

Everything else lives in pyproject.toml.  A machine without a C++ compiler still gets a
working hal: the build prints one clear line and ``hal._C`` reports itself unavailable.
"""
import glob
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

try:
    from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
except ImportError:  # pragma: no cover - pybind11 is a build requirement
    sys.exit("hal: building needs pybind11 (pip install pybind11), or use pip install . "
             "which installs the build requirements from pyproject.toml")

VERSION = "0.1.0"
# compile the kernel sources in parallel (HAL_BUILD_JOBS=N to choose; default: all cores)
ParallelCompile("HAL_BUILD_JOBS", default=0).install()
OPENMP = [] if sys.platform == "darwin" else ["-fopenmp"]

ext = Pybind11Extension(
    "hal._C",
    sorted(glob.glob("csrc/*.cpp")),
    include_dirs=["csrc"],
    define_macros=[("HAL_VERSION_INFO", f'"{VERSION}"')],
    # no errno, no FP traps: lets loops with sqrt and selects vectorise; hal never reads either
    extra_compile_args=["-O3", "-fno-math-errno", "-fno-trapping-math"] + OPENMP,
    extra_link_args=OPENMP,
    depends=sorted(glob.glob("csrc/*.h")),
    cxx_std=17,
)


class OptionalBuildExt(build_ext):
    """Build hal._C, but never fail the install: host kernels are an optional fallback."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # compiler missing or broken
            self._explain(exc)

    def build_extension(self, extension):
        try:
            super().build_extension(extension)
        except Exception as exc:
            self._explain(exc)

    @staticmethod
    def _explain(exc):
        if os.environ.get("HAL_REQUIRE_NATIVE") == "1":
            raise exc
        sys.stderr.write(
            f"hal: WARNING: the C++ host kernels (hal._C) were not built: {exc}. "
            "hal still works; host-kernel fallbacks report themselves unavailable. "
            "Fix: install a C++17 compiler with OpenMP (e.g. apt-get install g++) and reinstall; "
            "set HAL_REQUIRE_NATIVE=1 to make this an error.\n")


setup(ext_modules=[ext], cmdclass={"build_ext": OptionalBuildExt})
