"""`hal probe --trace`: every op of a trace probed on the device, inputs built from each op's schema."""
import json
from importlib import resources

import jsonschema
import pytest
import torch

from hal.cli import main
from hal.op_support.observe import _error_template, load_trace, probe_trace, probe_trace_op
from hal.op_support.torch_profile import TorchProfile

OPS = [("addmm", ["float32"]), ("add.Tensor", ["float32", "int64"]), ("lgamma", ["float32"]),
       ("embedding_dense_backward", ["float32"]), ("native_dropout", ["float32"]),
       ("empty.memory_format", ["float32"]), ("max_pool2d_with_indices", ["float32"]),
       ("_fused_adamw_", ["float32"]), ("_scaled_dot_product_flash_attention", ["float32"]),
       ("no_such_op.Tensor", ["float32"])]


@pytest.fixture
def trace_file(tmp_path):
    """A tiny trace written by hand in the op_coverage.torch_trace/1 format."""
    trace = {"schema": "op_coverage.torch_trace/1", "torch_version": torch.__version__.split("+")[0],
             "source": {"kind": "script", "target": "train.py", "argv": []}, "steps": 1, "seconds": 0.1,
             "stopped_by": "steps",
             "ops": [{"op": op, "count": 1, "dtypes": dts,
                      "phases": {"forward": 1, "backward": 0, "optimizer": 0, "other": 0},
                      "first_frame": "train.py:1", "first_function": "forward"} for op, dts in OPS]}
    f = tmp_path / "ops.json"
    f.write_text(json.dumps(trace))
    return f


def test_every_op_of_the_trace_is_probed_or_says_why_not(hal_backend, trace_file):
    prof = probe_trace(hal_backend, load_trace(trace_file), trace_path=str(trace_file))
    jsonschema.Draft202012Validator(json.loads(resources.files("hal").joinpath("data", "torch_profile.schema.json").read_text())).validate(prof)
    assert prof["schema"] == "op_coverage.torch_profile/1" and prof["device_type"] == hal_backend.device_type
    assert set(prof["probe"]) == {op for op, _ in OPS}  # nothing dropped
    st = {op: r["status"] for op, r in prof["probe"].items()}
    assert st["addmm"] == st["add.Tensor"] == st["embedding_dense_backward"] == "native"
    assert st["native_dropout"] == "native" and "random op" in prof["probe"]["native_dropout"]["detail"]
    assert st["empty.memory_format"] == "native"
    assert "int64" in prof["probe"]["add.Tensor"]["detail"]  # every dtype of the trace is run
    assert prof["not_probed"]["no_such_op.Tensor"].startswith("torch ") and "has no aten::no_such_op" in \
        prof["not_probed"]["no_such_op.Tensor"]
    assert "CPU rejected" in prof["not_probed"]["_scaled_dot_product_flash_attention"]
    if hal_backend.device_type == "emu":  # the emulator computes lgamma on the host
        assert st["lgamma"] == "fallback" and "lgamma" in prof["unimplemented"]["always_cpu"]
        assert prof["unimplemented"]["default"] == "cpu_fallback"
        assert "aten::{op}" in prof["unimplemented"]["warning_message"]
    else:
        assert st["lgamma"] == "native" and "lgamma" in prof["ops"]
    assert sorted(prof["ops"]) == prof["ops"] and "addmm" in prof["ops"] and "no_such_op.Tensor" not in prof["ops"]
    assert sum(prof["counts"].values()) == len(OPS)


def test_probe_cli_writes_a_profile_op_coverage_reads(hal_backend, trace_file, tmp_path, capsys):
    out = tmp_path / "dev.json"
    assert main(["probe", "--trace", str(trace_file), "--out", str(out), "--name", "mydev"]) == 0
    text = capsys.readouterr().out
    assert "not_probed" in text and "not probed" in text and "written to" in text
    p = TorchProfile.from_file(out)
    assert p.name == "mydev" and p.partial
    assert p.judge("addmm").status == "native"
    assert p.judge("matmul").status == "composite"  # same judging rules as the bundled profiles


def test_bad_trace_is_one_clear_error(hal_backend, tmp_path, capsys):
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"ops": []}))
    assert main(["probe", "--trace", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "op_coverage.torch_trace/1" in err
    assert main(["probe", "--trace", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_an_op_that_raises_on_the_device_is_failing():
    r = probe_trace_op("add.Tensor", ["float32"], torch.device("meta"))  # results cannot leave 'meta'
    assert r["status"] == "failing" and r["detail"]


def test_the_device_error_text_becomes_the_profile_template():
    exc = NotImplementedError("Could not run 'aten::lgamma' with arguments from the 'musa' backend. This {x}")
    assert _error_template("lgamma", exc) == \
        "Could not run 'aten::{op}' with arguments from the 'musa' backend. This (x)"
    assert _error_template("lgamma", RuntimeError("aten::lgamma")) is None
