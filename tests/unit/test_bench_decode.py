"""bench/bench_decode.py and bench/bench_emulator.py --ops run as a user runs them and print their
ratios against the named baseline (no timings are asserted)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("HAL_BACKEND", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


def test_decode_help_names_its_options_and_baseline():
    proc = _bench("bench/bench_decode.py", "--help")
    assert proc.returncode == 0, proc.stderr
    for word in ("--repeats", "--new-tokens", "--batch", "--json", "--quick", "--emu", "plain", "hal run"):
        assert word in proc.stdout


@pytest.mark.long  # four fresh processes building a model: ~25 s, kept out of make test's time (make long)
def test_decode_quick_run_prints_every_variant_against_plain():
    proc = _bench("bench/bench_decode.py", "--quick", "--batch", "1,2", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    variants = res["settings"]["default"]["variants"]
    assert set(variants) == {"plain", "hal_run_cpu", "hal_ops"}
    for name, row in variants.items():
        for batch in ("1", "2"):
            b = row["batches"][batch]
            assert b["tokens_per_s"]["median"] > 0 and b["tokens_per_s_vs_plain"]["median"] > 0
            # greedy decoding of the same weights: the redirected CUDA script gives plain's tokens
            if name != "hal_ops":
                assert b["agree_with_plain"] == 1.0
    assert variants["plain"]["batches"]["1"]["tokens_per_s_vs_plain"]["median"] == 1.0
    # hal.ops really ran in the hal_ops variant, and only there
    assert {"rms_norm", "swiglu", "rotary_embedding"} <= set(variants["hal_ops"]["hal_ops_calls"])
    assert "hal_ops_calls" not in variants["plain"]


@pytest.mark.emu
@pytest.mark.slow
def test_emulator_small_op_tax_prints_a_ratio_per_op_and_size():
    proc = _bench("bench/bench_emulator.py", "--ops", "--repeats", "1", "--block-ms", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["rows"]
    assert {(r["op"], tuple(r["shape"])) for r in rows} >= {("add", (1, 64)), ("linear", (1024, 1024))}
    assert all(r["emu_vs_cpu"] > 0 and r["cpu_us"] > 0 for r in rows)
