"""`hal list` and `hal info` as a user runs them."""
import json
import subprocess
import sys
from importlib import resources

import jsonschema
import pytest

REQUIRED_BACKENDS = {"cpu", "cuda", "rocm", "hygon", "ascend", "cambricon", "musa", "xpu", "mps",
                     "enflame", "biren", "tecorigin", "metax", "iluvatar", "kunlunxin"}


def hal(*args, env_extra=None):
    import os
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAL_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "hal", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(scope="module")
def list_json():
    out = hal("list", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_list_json_validates_against_published_schema(list_json):
    schema = json.loads(resources.files("hal").joinpath("data/hal-list.schema.json").read_text())
    jsonschema.validate(list_json, schema)


def test_list_names_every_backend_with_status_and_evidence(list_json):
    by_name = {b["name"]: b for b in list_json["backends"]}
    assert REQUIRED_BACKENDS <= set(by_name)
    for b in by_name.values():
        assert b["status"] and b["reason"], b
        assert b["evidence"], f"{b['name']} gives no evidence"
    assert by_name["cpu"]["status"] == "available"
    assert by_name["ascend"]["dist_backend"] == "hccl" and by_name["ascend"]["device_type"] == "npu"
    assert by_name["metax"]["presents_as_cuda"] is True


def test_list_table_fits_80_columns_and_has_no_colour_when_piped():
    out = hal("list")
    assert out.returncode == 0
    assert "\033[" not in out.stdout
    rows = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith("selected:")]
    assert max(len(ln) for ln in rows) <= 80
    assert "selected: " in out.stdout


def test_info_json_and_forced_backend():
    out = hal("info", "--json", env_extra={"HAL_BACKEND": "cpu"})
    info = json.loads(out.stdout)
    assert info["backend"] == "cpu" and info["selection_reason"] == "forced by HAL_BACKEND=cpu"
    assert "float32" in info["supported_dtypes"]


def test_forcing_an_unusable_backend_is_one_clear_line():
    out = hal("info", env_extra={"HAL_BACKEND": "npu"})
    assert out.returncode == 3
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "torch_npu is not installed" in err[0] and "Traceback" not in out.stderr


def test_help_teaches_with_examples():
    out = hal("list", "--help")
    assert "examples:" in out.stdout and "hal list --json" in out.stdout
