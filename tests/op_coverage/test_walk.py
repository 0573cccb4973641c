"""The one walk over an ONNX model's graphs: paths, parents and the order of visit."""
import onnx
import pytest
from onnx import TensorProto, helper

from op_coverage.onnx import walk
from op_coverage.onnx.inventory import all_nodes, build_inventory
from op_coverage.onnx.load import load_for_scan

N = helper.make_node
F = TensorProto.FLOAT


def vi(name, elem=F, shape=(4,)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def graph(name, nodes, outputs, inputs=()):
    return helper.make_graph(nodes, name, list(inputs), outputs)


def If(cond, out, name, then_branch, else_branch):
    """An If whose attributes are in this order (helper.make_node would sort them by name)."""
    n = N("If", [cond], [out], name=name)
    n.attribute.extend([helper.make_attribute("then_branch", then_branch),
                        helper.make_attribute("else_branch", else_branch)])
    return n


def nested() -> onnx.ModelProto:
    """If (then: an unnamed Loop whose body holds an If) · a node with a GRAPHS attribute · a local
    function whose body holds an If."""
    inner_if = If("c", "io", "inner_if",
                 then_branch=graph("t2", [N("Neg", ["x"], ["t2o"], name="deep_neg")], [vi("t2o")]),
                 else_branch=graph("e2", [N("Abs", ["x"], ["e2o"], name="deep_abs")], [vi("e2o")]))
    body = graph("body", [N("Identity", ["cond_in"], ["c"], name="body_id"), inner_if],
                 [vi("c", TensorProto.BOOL, ()), vi("io")],
                 [vi("i", TensorProto.INT64, ()), vi("cond_in", TensorProto.BOOL, ())])
    then_g = graph("then", [N("Loop", ["trip", ""], ["lo"], body=body), N("Relu", ["lo"], ["to"], name="then_relu")],
                   [vi("to")])
    else_g = graph("else", [N("Neg", ["x"], ["eo"], name="else_neg")], [vi("eo")])
    multi = N("Multi", ["x"], ["mo"], name="multi", domain="custom")
    bodies = onnx.AttributeProto(name="bodies", type=onnx.AttributeProto.GRAPHS)
    bodies.graphs.extend([graph("b0", [N("Sin", ["x"], ["b0o"], name="b0_sin")], [vi("b0o")]),
                          graph("b1", [N("Cos", ["x"], ["b1o"], name="b1_cos")], [vi("b1o")])])
    multi.attribute.append(bodies)
    main = graph("main", [If("flag", "branch", "top_if", then_branch=then_g, else_branch=else_g),
                          multi, N("Twice", ["branch"], ["y"], domain="local")],
                 [vi("y")], [vi("flag", TensorProto.BOOL, ()), vi("x"), vi("trip", TensorProto.INT64, ())])
    f_if = If("p", "B", "f_if",
             then_branch=graph("ft", [N("Sqrt", ["A"], ["fto"], name="f_sqrt")], [vi("fto")]),
             else_branch=graph("fe", [N("Exp", ["A"], ["feo"], name="f_exp")], [vi("feo")]))
    fn = helper.make_function("local", "Twice", ["A"], ["B"], [N("ReduceMax", ["A"], ["p"], name="f_max"), f_if],
                              opset_imports=[helper.make_opsetid("", 18)])
    m = helper.make_model(main, functions=[fn], opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid("local", 1), helper.make_opsetid("custom", 1)])
    m.ir_version = 9
    return m


GRAPH_PATHS = [
    "main",
    "main/top_if.then_branch",
    "main/top_if.then_branch/Loop_0.body",   # an unnamed node: <op_type>_<index in its graph>
    "main/top_if.then_branch/Loop_0.body/inner_if.then_branch",
    "main/top_if.then_branch/Loop_0.body/inner_if.else_branch",
    "main/top_if.else_branch",
    "main/multi.bodies[0]",
    "main/multi.bodies[1]",
    "function:local.Twice",
    "function:local.Twice/f_if.then_branch",
    "function:local.Twice/f_if.else_branch",
]

NODE_ORDER = ["top_if", "Loop", "body_id", "inner_if", "deep_neg", "deep_abs", "then_relu", "else_neg",
              "multi", "b0_sin", "b1_cos", "Twice", "f_max", "f_if", "f_sqrt", "f_exp"]


def test_graphs_come_with_their_paths_parents_first():
    assert [s.path for s in walk.graphs(nested())] == GRAPH_PATHS


def test_nodes_come_before_their_bodies_and_in_file_order():
    assert [n.name or n.op_type for _s, _i, n in walk.nodes(nested())] == NODE_ORDER
    assert [n.name or n.op_type for n in all_nodes(nested())] == NODE_ORDER


def test_scope_names_its_parent_node_attribute_and_function():
    m = nested()
    by_path = {s.path: s for s in walk.graphs(m)}
    loop_body = by_path["main/top_if.then_branch/Loop_0.body"]
    assert loop_body.parent is by_path["main/top_if.then_branch"]
    assert (loop_body.node.op_type, loop_body.attribute, loop_body.index) == ("Loop", "body", None)
    assert loop_body.function is None
    assert (by_path["main/multi.bodies[1]"].attribute, by_path["main/multi.bodies[1]"].index) == ("bodies", 1)
    assert by_path["main"].parent is None and by_path["main"].graph is m.graph
    f_then = by_path["function:local.Twice/f_if.then_branch"]
    assert f_then.function is m.functions[0] and f_then.parent is by_path["function:local.Twice"]
    assert by_path["function:local.Twice"].parent is None


def test_index_in_graph_counts_in_the_graph_that_holds_the_node():
    seen = {n.name or n.op_type: (s.path, i) for s, i, n in walk.nodes(nested())}
    assert seen["Loop"] == ("main/top_if.then_branch", 0)
    assert seen["inner_if"] == ("main/top_if.then_branch/Loop_0.body", 1)
    assert seen["Twice"] == ("main", 2)
    assert seen["f_if"] == ("function:local.Twice", 1)


def test_functions_false_stays_in_the_main_graph():
    m = nested()
    assert [s.path for s in walk.graphs(m, functions=False)] == GRAPH_PATHS[:8]
    assert [n.name or n.op_type for n in all_nodes(m, functions=False)] == NODE_ORDER[:12]


def test_a_graph_or_a_function_walks_on_its_own():
    m = nested()
    then_g = m.graph.node[0].attribute[0].g
    assert [s.path for s in walk.graphs(then_g)] == ["main", "main/Loop_0.body", "main/Loop_0.body/inner_if.then_branch",
                                                     "main/Loop_0.body/inner_if.else_branch"]
    assert [s.path for s in walk.graphs(m.functions[0])] == GRAPH_PATHS[8:]
    with pytest.raises(TypeError, match="NodeProto.*pass an onnx ModelProto, GraphProto or FunctionProto"):
        list(walk.graphs(m.graph.node[0]))


def test_subgraphs_one_level_and_has_subgraphs():
    m = nested()
    top_if, multi, twice = m.graph.node
    assert [(a, k, g.name) for a, k, g in walk.subgraphs(top_if)] == [("then_branch", None, "then"),
                                                                     ("else_branch", None, "else")]
    assert [(a, k, g.name) for a, k, g in walk.subgraphs(multi)] == [("bodies", 0, "b0"), ("bodies", 1, "b1")]
    assert list(walk.subgraphs(twice)) == []
    assert walk.has_subgraphs(top_if) and walk.has_subgraphs(multi) and not walk.has_subgraphs(twice)


def test_the_inventory_reports_the_walks_paths(tmp_path):
    m = nested()
    p = tmp_path / "nested.onnx"
    onnx.save(m, p)
    inv = build_inventory(load_for_scan(p))
    walked = [(s.path, n.op_type) for s, _i, n in walk.nodes(m)]
    assert [(n.path, n.op_type) for n in inv.nodes] == walked
    assert inv.functions == {"local.Twice": ["main/Twice_2"]}
