"""Folding what is constant in a rewrite: function bodies' CastLike(Constant, X) cost nothing at run time."""
import numpy as np
import onnx
from onnx import TensorProto, helper

from rw_helpers import lacking, model, ops_in, run
from op_coverage.plan.fold import cast_exactly, fold
from op_coverage.rewrite import rewrite_model

HARDSWISH = """
<ir_version: 8, opset_import: ["" : 18]>
g (float[N, 8] x) => (float[N, 8] y) {
    two = Constant <value = float {2.0}> ()
    two_x = CastLike (two, x)
    h = HardSwish (x)
    y = Mul (h, two_x)
}
"""
FEEDS = {"x": np.array([[np.nan, np.inf, -np.inf, -4.0, -3.0, 0.25, 3.0, 1e30]] * 2, np.float32)}


def test_body_casts_of_constants_fold_to_constants():
    m = model(HARDSWISH)
    # without Clip (nor Where, for Clip's body) HardSigmoid goes through its body: CastLike(Constant, x) x4
    target = lacking("HardSwish,HardSigmoid,Clip,Where")
    folded, plain = rewrite_model(m, target), rewrite_model(m, target, fold=False)
    assert sum(n.op_type == "CastLike" for n in plain.model.graph.node) == 5  # 4 in the body, 1 the model's
    assert [n.op_type for n in folded.model.graph.node].count("CastLike") == 1  # the model's own is kept
    assert "Cast" not in ops_in(folded.model)
    assert folded.folded == {"CastLike->Constant": 4, "Constant dropped": 4}
    assert len(folded.model.graph.node) == len(plain.model.graph.node) - 4
    assert folded.added["CastLike"] == 0 and folded.added["Constant"] == 4
    want = run(m, FEEDS)[0]
    for r in (folded, plain):
        onnx.checker.check_model(r.model, full_check=True)
        np.testing.assert_array_equal(run(r.model, FEEDS)[0], want)  # NaN and ±inf included


def test_hard_activations_take_one_clip_when_the_target_has_it():
    res = rewrite_model(model(HARDSWISH), lacking("HardSwish,HardSigmoid"))
    assert res.plans["HardSwish"]["via"] == ["hardswish.onnx-function", "hardsigmoid.clip"]
    assert ops_in(res.model) == {"Constant", "CastLike", "Mul", "Add", "Clip"}
    np.testing.assert_array_equal(run(res.model, FEEDS)[0], run(model(HARDSWISH), FEEDS)[0])


def _nodes():
    return [helper.make_node("CastLike", ["x", "h"], ["y"], name="e/CastLike"),
            helper.make_node("Constant", [], ["c"], name="e/Constant", value_float=2.5),
            helper.make_node("Cast", ["c"], ["ci"], name="e/Cast", to=TensorProto.INT32),
            helper.make_node("Mul", ["ci", "ci"], ["z"], name="e/Mul")]


def test_castlike_of_a_value_becomes_cast_and_a_cast_of_a_constant_a_constant():
    emitted = {n.name for n in _nodes()}
    out, done = fold(_nodes(), emitted, {"x": "float", "h": "float16"}, {}, lambda n: True, {"z"})
    assert [n.op_type for n in out] == ["Cast", "Constant", "Mul"]
    assert helper.get_attribute_value(out[0].attribute[0]) == TensorProto.FLOAT16
    assert onnx.numpy_helper.to_array(out[1].attribute[0].t) == 2  # truncated toward zero, as ONNX's Cast
    assert done == {"CastLike->Cast": 1, "Cast->Constant": 1, "Constant dropped": 1}


def test_nothing_folds_where_the_target_lacks_the_new_node_or_the_node_is_the_models_own():
    out, done = fold(_nodes(), {n.name for n in _nodes()}, {"x": "float", "h": "float16"}, {},
                     lambda n: n.op_type not in ("Cast", "Constant"), {"z"})
    assert [n.op_type for n in out] == ["CastLike", "Constant", "Cast", "Mul"] and not done
    out, done = fold(_nodes(), set(), {"x": "float", "h": "float16"}, {}, lambda n: True, {"z"})
    assert [n.op_type for n in out] == ["CastLike", "Constant", "Cast", "Mul"] and not done


def test_only_casts_numpy_does_as_onnx_are_folded():
    f = np.array([np.nan, 1.0], np.float32)
    assert cast_exactly(f, "int32") is None  # NaN to an integer: unspecified
    assert cast_exactly(np.array([300.0], np.float32), "uint8") is None  # out of range
    assert cast_exactly(np.array([300], np.int64), "int8") is None  # would wrap
    assert cast_exactly(np.array([1.0], np.float32), "bfloat16") is None  # numpy has no bfloat16
    assert cast_exactly(np.zeros(5000, np.float32), "float16") is None  # not a small constant
    assert cast_exactly(np.array([-2.7, 2.7], np.float32), "int32").tolist() == [-2, 2]
    assert cast_exactly(f, "bool").tolist() == [True, True]  # NaN is nonzero: true, as ONNX's Cast
    assert cast_exactly(np.array([0.1], np.float64), "float16").tobytes() == np.float16(0.1).tobytes()
