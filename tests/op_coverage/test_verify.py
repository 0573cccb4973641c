"""Verification: outputs that differ only by the order of tied elements pass with a note; others fail."""
import numpy as np
import onnx
from onnx import TensorProto, helper

from op_coverage.rewrite.verify import compare, verify


def _detections(perm=None, bump=0.0):
    """Scores sorted with TopK (ties kept in index order); the 'rewrite' reorders rows by *perm*."""
    x = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [6])
    b = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [6, 4])
    nodes = [helper.make_node("Constant", [], ["k"], value=helper.make_tensor("k", TensorProto.INT64, [1], [6])),
             helper.make_node("TopK", ["scores", "k"], ["s", "i"]),
             helper.make_node("Gather", ["boxes", "i"], ["bx"], axis=0)]
    outs = ["s", "bx", "i"]
    if perm is not None:
        nodes.append(helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", TensorProto.INT64, [6], perm)))
        nodes += [helper.make_node("Gather", [o, "p"], [o + "_p"], axis=0) for o in outs]
        if bump:
            nodes.append(helper.make_node("Constant", [], ["e"], value=helper.make_tensor("e", TensorProto.FLOAT, [], [bump])))
            nodes.append(helper.make_node("Add", ["s_p", "e"], ["s_pb"]))
        outs = [o + "_p" for o in outs]
        if bump:
            outs[0] = "s_pb"
    ys = [helper.make_tensor_value_info(n, t, None) for n, t in zip(outs, [TensorProto.FLOAT, TensorProto.FLOAT,
                                                                             TensorProto.INT64])]
    g = helper.make_graph(nodes, "det", [x, b], ys)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m.SerializeToString()


def test_rows_reordered_among_ties_pass_with_a_note():
    feeds = {"scores": np.array([0.9, 0.5, 0.5, 0.5, 0.1, 0.5], np.float32),
             "boxes": np.arange(24, dtype=np.float32).reshape(6, 4)}
    swap = [0, 3, 2, 1, 4, 5]  # two tied detections change places, and so do their boxes and indices
    v = verify(_detections(), _detections(swap), feeds)
    assert v.ok, [o.to_dict() for o in v.outputs]
    assert [o.note.startswith("differs only by the order of tied elements") for o in v.outputs] == [False, True, True]


def test_reordered_and_changed_values_still_fail():
    feeds = {"scores": np.array([0.9, 0.5, 0.5, 0.5, 0.1, 0.5], np.float32),
             "boxes": np.arange(24, dtype=np.float32).reshape(6, 4)}
    v = verify(_detections(), _detections([0, 3, 2, 1, 4, 5], bump=0.01), feeds)
    assert not v.ok and not v.outputs[0].ok and v.outputs[0].note == ""


def test_compare_multiset_of_rows_and_of_last_axis_slices():
    w = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0]])
    assert compare("rows", w, w[[2, 1, 0]]).ok  # identical rows swapped: equal anyway
    c = compare("rows", w, w[[1, 0, 2]])
    assert c.ok and "rows as a multiset" in c.note
    c = compare("cols", np.array([[5, 5, 1]], np.int64), np.array([[5, 1, 5]], np.int64))
    assert c.ok and "last axis" in c.note
    assert not compare("diff", w, w[[1, 0, 2]] + 1).ok
