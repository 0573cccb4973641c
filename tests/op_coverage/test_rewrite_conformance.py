"""ONNX's own backend node tests as ground truth for every decomposition (function bodies and rules)."""
import pytest

from op_coverage import conformance
from op_coverage.datafiles import read_json
from op_coverage.expand import has_body
from op_coverage.rules import RULES

KNOWN = read_json("conformance_known_failures.json")["cases"]
RULE_OPS = sorted({r.op for r in RULES if r.domain == "ai.onnx"})
BODY_OPS = sorted({s.name for s in __import__("onnx").defs.get_all_schemas() if s.domain == ""
                   and has_body("ai.onnx", s.name)} - set(RULE_OPS))


@pytest.fixture(scope="module")
def results():
    """Every applicable case, run once for the module (about 20 s on 2 cores)."""
    return conformance.run()


#: rule ops whose every ONNX node test is declined, and why (their rules are tested in test_rules.py)
ALL_DECLINED = {"Not": "ONNX's Not tests are opset 1 models, and onnxruntime registers Xor and Equal from opset 7"}


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


def test_every_rule_is_exercised_by_a_node_test_or_an_inline_case(results):
    from test_rules import CASES
    used = {r for c in results if c.status == "passed" for r in c.via} | {CASES[c][2] for c in CASES}
    used.add("erf.as7126")  # test_rules.py::test_erf_error_bound_holds_on_a_dense_grid[plain]
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
