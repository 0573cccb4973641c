"""The README's quick starts do what they say."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_training_author_quick_start_runs(tmp_path, monkeypatch, clean_registry):
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(BLOCKS[0], "README quick start", "exec"), scope)
    assert scope["y"].shape == (8, 512)
    assert (tmp_path / "ckpt" / "latest").exists()
    import hal.dist
    hal.dist.destroy()


def test_plugin_author_quick_start_registers_a_backend(tmp_path):
    (tmp_path / "my_hal_chip.py").write_text(BLOCKS[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
    env.update(PYTHONPATH=str(tmp_path) + os.pathsep + env.get("PYTHONPATH", ""), HAL_PLUGINS="my_hal_chip")
    out = subprocess.run([sys.executable, "-m", "hal", "list", "--json"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    chip = next(b for b in json.loads(out.stdout)["backends"] if b["name"] == "mychip")
    assert chip["status"] == "not installed" and "torch_acme" in chip["reason"]
