"""ONNX's own backend node tests as ground truth for every decomposition (function bodies and rules)."""
import pytest

from rw_helpers import run as rw_run
from op_coverage.plan import node_suite as conformance
from op_coverage.datafiles import read_json
from op_coverage.onnx.functions import has_body
from op_coverage.plan.rules import RULES

KNOWN = read_json("conformance_known_failures.json")["cases"]
RULE_OPS = sorted({r.op for r in RULES if r.domain == "ai.onnx"})
BODY_OPS = sorted({s.name for s in __import__("onnx").defs.get_all_schemas() if s.domain == ""
                   and has_body("ai.onnx", s.name)} - set(RULE_OPS))


@pytest.fixture(scope="module")
def results():
    """Every applicable case, run once for the module (about 20 s on 2 cores)."""
    return conformance.run()


#: rule ops whose every ONNX node test is declined, and why (their rules are tested in test_rules.py)
ALL_DECLINED = {"Not": "ONNX's Not tests are opset 1 models, and onnxruntime registers Xor and Equal from opset 7",
                "Cast": "cast.bool handles casts to or from bool, and ONNX ships no Cast test with bool",
                "Slice": "slice.widen handles bool and 8/16-bit data, and ONNX's Slice tests are float"}


def _check(results, op):
    mine = [r for r in results if r.op == op]
    if not mine:
        pytest.skip(f"onnx {__import__('onnx').__version__} ships no single-op node test for {op}")
    failed = {r.case: r.reason for r in mine if r.status == "failed"}
    unexpected = {c: why for c, why in failed.items() if c not in KNOWN}
    assert not unexpected, unexpected
    return mine


@pytest.mark.parametrize("op", RULE_OPS)
def test_project_rules_pass_onnx_node_tests(results, op):
    mine = _check(results, op)
    if op in ALL_DECLINED:
        assert all(r.status == "declined" for r in mine)
        return
    assert any(r.status == "passed" for r in mine), [(r.case, r.reason) for r in mine]


@pytest.mark.parametrize("op", BODY_OPS)
def test_function_body_expansions_pass_onnx_node_tests(results, op):
    _check(results, op)


@pytest.mark.parametrize("case", sorted(KNOWN))
def test_known_failure_is_still_a_failure(results, case):
    r = next((r for r in results if r.case == case), None)
    assert r is not None, f"{case} is no longer an applicable case; drop it from conformance_known_failures.json"
    if r.status == "failed":
        pytest.xfail(KNOWN[case])
    assert r.status == "passed", r.reason


#: rules a cheaper path hides in the plain run, proven on the op's node tests with that path removed
FORCED = {
    "range.cumsum": ("Range", "Loop"),  # ONNX's body is a Loop
}


@pytest.mark.parametrize("rule", sorted(FORCED))
def test_rule_passes_onnx_node_tests_when_the_cheaper_path_is_missing(rule):
    from op_coverage.targets.lacking import parse_ops, without
    from op_coverage.targets.catalog import load_targets
    op, also = FORCED[rule]
    base = without(load_targets(use_plugins=False).get("ort-cpu"), parse_ops(also))
    mine = [conformance.run_case(c, base) for c in conformance.node_cases()
            if conformance.case_op(c) == ("ai.onnx", op)]
    assert not [(r.case, r.reason) for r in mine if r.status == "failed"]
    assert any(r.status == "passed" and rule in r.via for r in mine), [(r.case, r.status, r.via) for r in mine]


def test_range_of_constants_matches_onnx_node_tests():
    """range.constant on ONNX's Range cases with start, limit and delta made initializers."""
    import copy

    import numpy as np
    from onnx import numpy_helper

    from op_coverage.targets.lacking import parse_ops, without
    from op_coverage.rewrite import rewrite_model
    from op_coverage.targets.catalog import load_targets
    target = without(load_targets(use_plugins=False).get("ort-cpu"), parse_ops("Range,Loop,CumSum"))
    ran = 0
    for case in conformance.node_cases():
        if conformance.case_op(case) != ("ai.onnx", "Range"):
            continue
        (inputs, (want,)), = case.data_sets
        if np.asarray(want).dtype.name not in conformance.ORT_FEEDABLE:
            continue
        m = copy.deepcopy(case.model)
        m.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), vi.name)
                                   for vi, v in zip(m.graph.input, inputs))
        del m.graph.input[:]
        res = rewrite_model(m, target)
        assert res.plans["Range"]["via"] == ["range.constant"], res.plans
        got = rw_run(res.model, {})[0]
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
        ran += 1
    assert ran >= 3


def test_every_rule_is_exercised_by_a_node_test_or_an_inline_case(results):
    from test_rules import CASES, NARROW_SLICES
    used = {r for c in results if c.status == "passed" for r in c.via} | {CASES[c][2] for c in CASES} | set(FORCED)
    used |= {rule for _, rule in NARROW_SLICES.values()}
    used.add("erf.as7126")  # test_rules.py::test_erf_error_bound_holds_on_a_dense_grid[plain]
    used |= {r for _, rules in SHADOWED.values() for r in rules}  # test_shadowed_comparison_rules_...
    used.add("isnan.not-equal")  # test_rules.py::test_isnan_on_a_target_whose_equal_takes_no_bool
    assert {r.name for r in RULES} <= used, sorted({r.name for r in RULES} - used)


def test_most_applicable_cases_pass(results):
    counts = conformance.summarize(results)
    passed = sum(c["passed"] for c in counts.values())
    failed = sum(c["failed"] for c in counts.values())
    assert failed == len(KNOWN)
    assert passed >= 480, counts  # 499 with onnx 1.23.2 / onnxruntime 1.32.0


def test_conformance_command_prints_counts_and_exits_0_without_failures(run_cli):
    import json
    r = run_cli("conformance", "--op", "Gelu", "--op", "Einsum", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    gelu = doc["per_op"]["Gelu"]
    assert gelu["passed"] >= 1 and gelu["failed"] == 0 and gelu["declined"] == 0
    assert doc["per_op"]["Einsum"]["failed"] == 0
    assert all(c["status"] == "declined" and c["reason"] for c in doc["cases"])  # every decline says why


#: rules that a cheaper rule shadows on ort-cpu minus the op alone: proven on ONNX's node cases with
#: the ops of the cheaper rule removed too (nncase has neither Less nor Greater)
SHADOWED = {"Less": ("Greater", {"less.sign-sub", "less.min-equal"}),
            "Greater": ("Less", {"greater.sign-sub", "greater.min-equal"}),
            "LessOrEqual": ("Less,Greater", {"less.sign-sub", "lessorequal.min-equal"}),
            "GreaterOrEqual": ("Less,Greater", {"greater.sign-sub", "greaterorequal.min-equal"})}


@pytest.mark.parametrize("op", sorted(SHADOWED))
def test_shadowed_comparison_rules_pass_onnx_node_tests(op):
    from op_coverage.targets.lacking import without
    from op_coverage.targets.catalog import load_targets
    also, rules = SHADOWED[op]
    base = without(load_targets(use_plugins=False).get("ort-cpu"), [("ai.onnx", o) for o in also.split(",")])
    mine = [conformance.run_case(c, base) for c in conformance.node_cases() if conformance.case_op(c) == ("ai.onnx", op)]
    if not mine:
        pytest.skip(f"onnx ships no node test for {op}")
    assert [(r.case, r.reason) for r in mine if r.status == "failed"] == []
    passed = [r for r in mine if r.status == "passed"]
    assert rules <= {v for r in passed for v in r.via}, [(r.case, r.via) for r in passed]
    # the declined ones are 16-bit integers, for which onnxruntime's CPU provider has no Min
    assert all("int16" in r.case for r in mine if r.status == "declined"), [(r.case, r.reason) for r in mine]
