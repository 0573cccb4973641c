"""``hal ops``: the kernel table a user sees, as text and as JSON."""
import json

from hal.cli import main


def test_hal_ops_json_lists_every_op_with_its_kernel(clean_registry, capsys):
    assert main(["ops", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["schema"] == "hal.ops/1" and rep["backend"] == "cpu"
    ops = {o["op"]: o for o in rep["ops"]}
    assert {"rms_norm", "rotary_embedding", "swiglu", "softmax", "fused_adamw_", "nms", "roi_align"} <= set(ops)
    if rep["native_available"]:
        assert ops["rms_norm"]["fused_kernel"] == "hal.ops.host:rms_norm"


def test_hal_ops_for_a_vendor_backend_shows_its_declared_functions(clean_registry, capsys):
    assert main(["ops", "--backend", "ascend"]) == 0
    out = capsys.readouterr().out
    assert "torch_npu.npu_rms_norm" in out and "torch_npu.npu_rotary_mul" in out
    assert "backend ascend (device type npu" in out


def test_hal_ops_unknown_backend_is_one_clear_error(clean_registry, capsys):
    assert main(["ops", "--backend", "nope"]) == 3
    err = capsys.readouterr().err
    assert "backend 'nope' is not declared by any plugin; choose one of:" in err and "Traceback" not in err
