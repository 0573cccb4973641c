"""Each vendor function a built-in plugin calls exists, with the arguments it is given, in the vendor's
release on the index: read from the wheel's sources (hal.plugin.contract), never imported."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hal.plugin.contract import check

ROOT = Path(__file__).resolve().parents[2]
#: vendor package -> (distribution on PyPI, the release checked, the plugin sources that call it)
RELEASES = {"torch_npu": ("torch-npu", "2.14.0", ["backends/ascend/fused.py"])}


def _wheel(dist: str, version: str) -> Path:
    cache = Path(os.environ.get("HAL_VENDOR_WHEELS", Path.home() / ".cache" / "hal" / "vendor-wheels"))
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        out = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              f"{dist}=={version}", "-d", str(cache)], capture_output=True, text=True, timeout=600)
        found = sorted(cache.glob(pattern))
        if not found:
            pytest.skip(f"{dist}=={version} could not be downloaded here (pip: "
                        f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}); put the wheel in {cache}")
    return found[0]


@pytest.mark.parametrize("package", sorted(RELEASES))
def test_the_plugin_calls_only_what_the_vendors_release_has(package):
    dist, version, plugins = RELEASES[package]
    problems = check(_wheel(dist, version), package, [ROOT / p for p in plugins])
    assert not problems, f"{dist} {version}:\n" + "\n".join(problems)


def test_a_missing_function_a_wrong_keyword_and_an_extra_argument_are_each_named(tmp_path):
    wheel = tmp_path / "vendor_ops-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vendor_ops/__init__.py", "def fast_norm(x, w, eps=1e-6):\n    pass\n__all__ = ['fast_norm']\n")
        z.writestr("vendor_ops/ops.py", "import vendor_ops\nvendor_ops.fast_gelu = object()\n")
        z.writestr("vendor_ops/functions.yaml", "- func: fast_gelu(Tensor self, *, str approximate='none') -> Tensor\n")
    plugin = tmp_path / "fused.py"
    plugin.write_text("from hal_backends.fused import vendor_attr\n"
                      "def a(x):\n    return vendor_attr('vendor_ops', 'fast_gelu')(x, approximate='tanh')\n"
                      "def b(x):\n    return vendor_attr('vendor_ops', 'fast_gelu')(x, mode='tanh')\n"
                      "def c(x):\n    return vendor_attr('vendor_ops', 'fast_gelu')(x, 'tanh')\n"
                      "def d(x, w):\n    return vendor_attr('vendor_ops', 'fast_norm')(x, w)\n"
                      "def e(x):\n    return vendor_attr('vendor_ops', 'fast_silu')(x)\n")
    problems = check(wheel, "vendor_ops", [plugin])
    assert len(problems) == 3, problems
    assert "fused.py:5: vendor_ops.fast_gelu takes no keyword 'mode'" in problems[0]
    assert "fused.py:7: vendor_ops.fast_gelu takes 1 positional arguments" in problems[1]
    assert "fused.py:11: vendor_ops.fast_silu is not in vendor_ops-1.0-py3-none-any.whl" in problems[2]
