"""One line of text for the planner's plan of an op on a target (table, Markdown, CSV share it)."""
from __future__ import annotations


def replacement_text(plan: dict | None) -> str:
    """``"replaceable via a > b (5 nodes: Add, Mul)"``, ``"blocked by Exp"``, or ``""`` when there is no plan."""
    if not plan:
        return ""
    if "kind" in plan:  # a torch op's plan (hal.op_support.torch_plan.OpPlan)
        return torch_plan_text(plan)
    if plan.get("status") == "replaceable":
        approx = "" if plan.get("exact", True) else ", approximate"
        return (f"replaceable via {' > '.join(plan['via'])} ({plan['nodes']} nodes{approx}: "
                f"{', '.join(plan['leaves'])})")
    if plan.get("status") == "blocked":
        return f"no replacement: blocked by {', '.join(plan['blocked_by'])}"
    return f"planner error: {plan.get('reason', '')}"


def torch_plan_text(plan: dict) -> str:
    """``"replace with torch's decomposition (exact: mul, sum.dim_IntList)"``, a hal.ops fused op, the
    CPU fallback with the bytes it moves, or what blocks every route."""
    kind = plan["kind"]
    pieces = ", ".join(plan.get("pieces") or [])
    if kind == "decomposition":
        how = "exact" if plan.get("exact") else "approximate"
        return f"replace with torch's decomposition ({how}: {pieces})" + (
            "; hal.fallback installs it")
    if kind == "fused_op":
        return f"replace with {pieces} (hal.ops)"
    if kind == "cpu_fallback":
        moved = (f"{plan['bytes_per_call']} bytes per call" if plan.get("bytes_per_call")
                 else f"{plan['bytes_per_element']} bytes per element" if plan.get("bytes_per_element") else "")
        return "CPU fallback" + (f": moves {moved} between device and host" if moved else "") + (
            f" ({plan['detail']})" if plan.get("detail") else "")
    if kind == "none":
        blocked = ", ".join(plan.get("blocking") or [])
        return "no replacement" + (f": blocked by {blocked}" if blocked else "") + (
            f" ({plan['detail']})" if plan.get("detail") else "")
    return plan.get("detail", "")
