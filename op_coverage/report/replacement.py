"""One line of text for the planner's plan of an op on a target (table, Markdown, CSV share it)."""
from __future__ import annotations


def replacement_text(plan: dict | None) -> str:
    """``"replaceable via a > b (5 nodes: Add, Mul)"``, ``"blocked by Exp"``, or ``""`` when there is no plan."""
    if not plan:
        return ""
    if plan.get("status") == "replaceable":
        approx = "" if plan.get("exact", True) else ", approximate"
        return (f"replaceable via {' > '.join(plan['via'])} ({plan['nodes']} nodes{approx}: "
                f"{', '.join(plan['leaves'])})")
    if plan.get("status") == "blocked":
        return f"no replacement: blocked by {', '.join(plan['blocked_by'])}"
    return f"planner error: {plan.get('reason', '')}"
