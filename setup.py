"""Build of the private native extension ``hal._C`` (pybind11, no libtorch link).

Everything else lives in pyproject.toml.  A machine without a C++ compiler still gets a
working hal: the build prints one clear line and ``hal._C`` reports itself unavailable.
"""
import glob
import os
import platform
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
# no errno, no FP traps: lets loops with sqrt and selects vectorise; hal never reads either
OPT = ["-O3", "-fno-math-errno", "-fno-trapping-math"]

# The exp-bound kernels (csrc/isa/kernels.h) are compiled once more per wider x86 ISA; isa.cpp
# picks one at run time, so the module still runs on any x86-64 CPU.  setuptools gives one
# set of flags to every source, hence the separate compile in OptionalBuildExt.
ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mprefer-vector-width=512"],
}
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")

ext = Pybind11Extension(
    "hal._C",
    sorted(glob.glob("csrc/*.cpp")) + ["csrc/isa/baseline.cpp"],
    include_dirs=["csrc"],
    define_macros=[("HAL_VERSION_INFO", f'"{VERSION}"')],
    extra_compile_args=OPT + OPENMP,
    extra_link_args=OPENMP,
    depends=sorted(glob.glob("csrc/*.h") + glob.glob("csrc/isa/*")),
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
            self._add_isa_objects(extension)
            super().build_extension(extension)
        except Exception as exc:
            self._explain(exc)

    def _add_isa_objects(self, extension):
        """Compile csrc/isa/<isa>.cpp with its -m flags and link it in, defining HAL_HAVE_<ISA>
        so that isa.cpp offers it.  An ISA the compiler refuses is left out with one line:
        the kernels then run with the baseline ISA.  HAL_BUILD_ISAS=avx2 (comma list; empty for
        none) builds fewer."""
        if not X86 or self.compiler.compiler_type != "unix":
            return
        wanted = os.environ.get("HAL_BUILD_ISAS", ",".join(ISA_FLAGS)).replace(" ", "").split(",")
        unknown = sorted(set(wanted) - set(ISA_FLAGS) - {""})
        if unknown:
            raise ValueError(f"HAL_BUILD_ISAS names {unknown}; choose from {sorted(ISA_FLAGS)} (comma-separated)")
        for isa, flags in ISA_FLAGS.items():
            if isa not in wanted:
                continue
            try:
                objs = self.compiler.compile(
                    [f"csrc/isa/{isa}.cpp"], output_dir=self.build_temp, include_dirs=["csrc"],
                    extra_postargs=["-std=c++17", "-fvisibility=hidden", "-g0"] + OPT + OPENMP + flags)
            except Exception as exc:  # an old compiler without these flags
                sys.stderr.write(f"hal: note: the {isa} host kernels were not built ({exc}); "
                                 "the baseline ones run instead\n")
                continue
            extension.extra_objects = list(extension.extra_objects or []) + objs
            extension.define_macros = list(extension.define_macros) + [(f"HAL_HAVE_{isa.upper()}", "1")]

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
