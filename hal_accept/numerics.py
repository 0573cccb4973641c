"""The loss curve of a target against the reference's, step by step, and -- when they differ -- the
operator that makes the difference: halves of the op set the script sent to the device are routed to
the host (``HAL_FALLBACK_HOST``, :func:`hal.fallback.route_to_host`) until one op is left, about
log2(#ops) short runs."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

from hal_accept.options import AcceptOptions, Target
from hal_accept.runs import Run, hal_run


def compare(reference: Sequence[Optional[float]], target: Sequence[Optional[float]], rtol: float,
            atol: float, first_step: int = 1) -> dict:
    """Step by step: ``|target - reference| <= rtol * |reference| + atol``; the lists begin at step
    ``first_step``.  ``first_divergent_step`` is the step of the first that is not (or a step one run lacks),
    None when all agree."""
    rows, first = [], None
    for i in range(max(len(reference), len(target))):
        r = reference[i] if i < len(reference) else None
        t = target[i] if i < len(target) else None
        if r is None or t is None:
            ok, diff = False, None
        else:
            diff = abs(t - r)
            ok = diff <= rtol * abs(r) + atol
        rows.append({"step": first_step + i, "reference": r, "target": t, "abs_diff": diff,
                     "rel_diff": (diff / abs(r)) if diff is not None and r else None, "within": ok})
        if not ok and first is None:
            first = first_step + i
    rel = [row["rel_diff"] for row in rows if row["rel_diff"] is not None]
    return {"rtol": rtol, "atol": atol, "steps": rows, "first_divergent_step": first,
            "max_rel_diff": max(rel) if rel else None, "agree": first is None and bool(rows)}


def _agrees(options: AcceptOptions, run: Run, reference: Sequence[Optional[float]]) -> bool:
    return run.ok and compare(reference, run.losses(), options.loss_rtol, options.loss_atol)["agree"]


def bisect_ops(options: AcceptOptions, target: Target, ops: Sequence[str], reference: Sequence[Optional[float]],
               progress: Callable[[str], None] = lambda s: None) -> dict:
    """The aten op whose device kernel makes ``target``'s loss curve differ from ``reference``.

    First every op on the host: if the curve still differs the cause is not one operator's kernel
    (the data order, the RNG, a collective ...) and the search stops.  Then halves: the half whose
    routing to the host restores the curve holds the op; if neither half does alone, several ops
    contribute together and the search reports the smallest set it kept.  The op found is run once
    more on the host to read its call sites in the script (``host_routed`` of the run report).
    """
    runs: List[dict] = []

    def trial(chosen: Sequence[str]) -> bool:
        label = f"bisect-{target.name.replace(':', '_')}-{len(runs) + 1}"
        run = hal_run(options, target, label, host_ops=chosen)
        good = _agrees(options, run, reference)
        runs.append({"host_ops": list(chosen), "agrees": good, "exit_code": run.exit_code,
                     "loss": run.losses(), "command": " ".join(run.command),
                     "env": {"HAL_FALLBACK_HOST": ",".join(chosen)}, "run": run})
        progress(f"bisect {target.name}: {len(chosen)} op(s) on the host -> "
                 f"{'agrees' if good else 'still differs'}")
        return good

    ops = sorted(ops)
    if not ops:
        return {"status": "no_ops", "why": "the trace recorded no aten op on the device", "runs": []}
    if not trial(ops):
        skipped = (runs[-1]["run"].report or {}).get("host_route_skipped") or {}
        if skipped:
            return {"status": "not_routable", "runs": _public(runs), "skipped": skipped,
                    "why": (f"with every op on the host the loss still differs, but {len(skipped)} op(s) could not "
                            f"be routed there on this torch ({', '.join(sorted(skipped))}): "
                            f"{next(iter(skipped.values()))}")}
        return {"status": "not_an_operator", "runs": _public(runs),
                "why": (f"with all {len(ops)} ops on the host the loss still differs: the difference is not one "
                        f"device kernel (look at the data order, the RNG, the collectives, the dtype)")}
    suspects = ops
    while len(suspects) > 1:
        half = len(suspects) // 2
        first, second = suspects[:half], suspects[half:]
        if trial(first):
            suspects = first
        elif trial(second):
            suspects = second
        else:
            return {"status": "several_ops", "ops": suspects, "runs": _public(runs),
                    "why": f"neither half of these {len(suspects)} ops restores the loss alone: they differ together"}
    culprit = suspects[0]
    last = next((r["run"] for r in reversed(runs) if r["host_ops"] == [culprit]), None)
    if last is None:
        trial([culprit])
        last = runs[-1]["run"]
    sites = {}
    for row in (last.report or {}).get("host_routed", []):
        for site, n in row["sites"].items():
            sites[site] = sites.get(site, 0) + n
    return {"status": "found", "op": culprit, "sites": dict(sorted(sites.items(), key=lambda kv: -kv[1])),
            "runs": _public(runs), "ops_total": len(ops)}


def _public(runs: List[dict]) -> List[dict]:
    return [{k: v for k, v in r.items() if k != "run"} for r in runs]
