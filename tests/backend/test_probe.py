"""`hal probe`: observed op support of the device, written as a profile file."""
import json

import pytest

from hal.cli import main
from hal.op_support.observe import probe_ops


def test_probe_classifies_ops(hal_backend):
    prof = probe_ops(hal_backend, ["add", "matmul", "lgamma"])
    assert prof["schema"] == "hal.op_profile/1" and prof["backend"] == hal_backend.name
    assert prof["ops"]["add"]["status"] == "native"
    assert prof["ops"]["matmul"]["status"] == "native"
    expected = "fallback" if hal_backend.device_type == "emu" else "native"
    assert prof["ops"]["lgamma"]["status"] == expected
    assert sum(prof["summary"].values()) == 3


def test_probe_cli_writes_the_profile(hal_backend, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main(["probe", "--ops", "add,softmax", "--out", str(out)]) == 0
    prof = json.loads(out.read_text())
    assert set(prof["ops"]) == {"add", "softmax"}
    assert "written to" in capsys.readouterr().out


def test_unknown_op_is_one_clear_error(hal_backend, capsys):
    assert main(["probe", "--ops", "add,frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "frobnicate" in err and "known ops" in err


def test_a_wrong_result_is_reported_as_failing(hal_backend, monkeypatch):
    import hal.op_support.observe as op
    make, _ = op.CASES["add"]
    calls = []

    def wrong_on_second_call(a, b):  # the CPU reference runs first, the device second
        calls.append(1)
        return a + b if len(calls) == 1 else a - b

    monkeypatch.setitem(op.CASES, "add", (make, wrong_on_second_call))
    prof = probe_ops(hal_backend, ["add"])
    assert prof["ops"]["add"]["status"] == "failing"
    assert "differs from the CPU" in prof["ops"]["add"]["detail"]


def test_a_vendor_fallback_warning_marks_the_op_as_fallback(hal_backend, monkeypatch):
    import warnings

    import hal.op_support.observe as op
    make, fn = op.CASES["exp"]

    calls = []

    def exp_with_vendor_warning(a):
        calls.append(1)
        if len(calls) == 2:  # the device run (the CPU reference runs first)
            warnings.warn("The operator 'aten::exp' is not currently supported on this backend "
                          "and will fall back to run on the CPU.", UserWarning)
        return fn(a)

    monkeypatch.setitem(op.CASES, "exp", (make, exp_with_vendor_warning))
    prof = probe_ops(hal_backend, ["exp"])
    assert prof["ops"]["exp"]["status"] == "fallback"
    assert "fall back to run on the CPU" in prof["ops"]["exp"]["detail"]
