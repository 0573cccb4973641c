"""Section 5, stability: a failure rehearsed on the reference and on each target, and the reference's
checkpoint opened on each target.

The rehearsal is ``hal run --nproc-per-node N --max-restarts 1 --checkpoint DIR`` with
``HAL_CHECKPOINT_KILL_AT``: the script, unmodified, is checkpointed from outside every ``every`` steps;
rank 0 dies (SIGKILL) at the end of a step between two saves; torchrun restarts the group, which goes
on from the newest checkpoint and redoes the lost steps.  Its losses after the resume are held against
the uninterrupted run's on the same backend: bitwise, as hal promises for a resume on the same backend
at the same world size -- unless the script does not repeat itself bitwise on the reference either,
then within the loss tolerance.  The time from the failure to the first step completed after the
restart is the recovery time.  Portability: the reference's first checkpoint, copied, is resumed on
each target, whose following losses must agree with the reference's within the loss tolerance.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from hal_accept.numerics import compare
from hal_accept.options import AcceptOptions, Target
from hal_accept.runs import Run, hal_run, read_records
from hal_accept.verdicts import FAIL, NOT_CHECKED, PASS, section



def plan(steps: int) -> Optional[Tuple[int, int]]:
    """``(every, kill_at)`` for runs of ``steps`` optimizer steps: a save every ``steps // 3`` steps (at least
    2), and rank 0 killed between the first save and the second, so that steps are lost and redone, with a
    step after them; None under 4 steps."""
    every = max(2, steps // 3)
    kill_at = every + max(1, (every + 1) // 2)
    return (every, kill_at) if kill_at < steps else None


def _label(kind: str, target: Target) -> str:
    return f"{kind}-{target.name.replace(':', '_')}"


def _checkpoint_lines(run: Run) -> List[str]:
    return [line.strip() for line in run.output_tail.splitlines() if line.strip().startswith("hal.checkpoint:")]


def _losses_by_step(rank_records: List[dict]) -> Dict[int, Optional[float]]:
    return {r["step"]: r["scalars"].get("loss") for r in rank_records}


def rehearse(options: AcceptOptions, target: Target, uninterrupted: Run, every: int, kill_at: int) -> dict:
    """The rehearsed failure on ``target``; its losses after the resume against ``uninterrupted``'s."""
    from hal.checkpoint import read_events

    label = _label("stability", target)
    ckdir = Path(options.workdir) / label / "checkpoints"
    shutil.rmtree(ckdir, ignore_errors=True)
    run = hal_run(options, target, label, checkpoint=ckdir, checkpoint_every=every, kill_at=kill_at)
    events = read_events(ckdir)
    killed = next((e for e in events if e["event"] == "killed"), None)
    resume = next((e for e in events if e["event"] == "resume" and e.get("attempt", 0) >= 1), None)
    own = next((e for e in events if e["event"] == "script_checkpointer"), None)
    entry = {"backend": target.name, "command": " ".join(run.command), "env": run.env, "exit_code": run.exit_code,
             "checkpoint_every": every, "killed_at_step": kill_at, "killed": killed is not None,
             "restarted": resume is not None, "resumed_from_step": resume["step"] if resume else None,
             "checkpoints_by": "script" if own else "hal", "log": _checkpoint_lines(run)}
    if own:
        entry["script_checkpoints"] = {"dir": own["dir"], "every": own["every"]}
    if run.exit_code != 0 or killed is None or resume is None:
        if run.exit_code:
            why = f"the run failed after the restart (exit code {run.exit_code})"
        elif killed is None:
            why = "no rank was killed (the script took fewer steps?)"
        elif own:
            why = (f"the script checkpoints itself (every {own['every']} steps into {own['dir']}) and had saved "
                   f"nothing before step {kill_at}: it started over")
        else:
            why = "the group was not restarted and resumed"
        entry.update(ok=False, why=why, output_tail=run.output_tail)
        return entry
    entry["steps_redone"] = kill_at - resume["step"]
    written = read_records(Path(options.workdir) / label, by_step=False)
    after = [[r for r in rank if r["time_unix"] > resume["time_unix"]] for rank in written]
    rows, exact, within = [], True, True
    for rank, records in enumerate(after):
        before = _losses_by_step(uninterrupted.records[rank]) if rank < len(uninterrupted.records) else {}
        resumed = [r["scalars"].get("loss") for r in records]
        cmp = compare([before.get(r["step"]) for r in records], resumed, options.loss_rtol, options.loss_atol,
                      first_step=resume["step"] + 1)
        within &= cmp["agree"]
        for row in cmp["steps"]:
            same = row["target"] is not None and row["target"] == row["reference"]
            exact &= same
            rows.append({"rank": rank, "step": row["step"], "resumed": row["target"],
                         "uninterrupted": row["reference"], "abs_diff": row["abs_diff"], "bitwise": same})
    ranks0 = after[0] if after else []
    steps_after = [r["step"] for r in ranks0]
    complete = steps_after == list(range(resume["step"] + 1, options.steps + 1))
    entry.update(
        steps_after_resume=steps_after, complete=complete, bitwise=exact and complete and bool(rows),
        max_abs_diff=max((row["abs_diff"] for row in rows if row["abs_diff"] is not None), default=None),
        rows=rows,
        resumed_loss=[r["scalars"].get("loss") for r in ranks0],
        recovery_s=(ranks0[0]["time_unix"] - killed["time_unix"]) if ranks0 else None,
        regained_s=next((r["time_unix"] - killed["time_unix"] for r in ranks0 if r["step"] == kill_at), None),
        within_tolerance=complete and within)
    entry["ok"] = entry["within_tolerance"]
    if not entry["ok"]:
        entry["why"] = (f"the losses after the resume differ from the uninterrupted run's (largest difference "
                        f"{entry['max_abs_diff']})" if complete else
                        f"the resumed run recorded steps {steps_after}, not {resume['step'] + 1} to {options.steps}")
    return entry


def portability(options: AcceptOptions, target: Target, reference_checkpoints: Path, reference: Run,
                uninterrupted: Run) -> dict:
    """The reference's first checkpoint (its first save: hal's, or the script's own when it checkpoints itself)
    resumed on ``target``: its losses from there on against the reference's uninterrupted ones, within the loss
    tolerance -- judged where the target's own ``uninterrupted`` run agrees with the reference (else section 3
    has said so already: the checkpoint must open, and the losses are shown)."""
    from hal.checkpoint import read_events, scan

    label = _label("portability", target)
    ckdir = Path(options.workdir) / label / "checkpoints"
    shutil.rmtree(ckdir, ignore_errors=True)
    first = min((c for c in scan(reference_checkpoints) if c.complete), key=lambda c: c.step, default=None)
    if first is None:
        return {"backend": target.name, "checkpoint": None, "step": None, "ok": False,
                "why": f"the reference's rehearsal left no complete checkpoint in {reference_checkpoints}"}
    step = first.step
    entry = {"backend": target.name, "checkpoint": str(first.path), "step": step}
    shutil.copytree(first.path, ckdir / first.path.name)
    run = hal_run(options, target, label, checkpoint=ckdir, checkpoint_every=options.steps + 1)
    resumed = [e for e in read_events(ckdir) if e["event"] == "resume"]
    entry.update(command=" ".join(run.command), env=run.env, exit_code=run.exit_code, log=_checkpoint_lines(run),
                 opened=bool(resumed) and resumed[0]["step"] == step)
    if not run.ok or not entry["opened"]:
        entry.update(ok=False, why=("the target run failed (exit code %d)" % run.exit_code) if not run.ok else
                     "the target did not resume from the reference's checkpoint", output_tail=run.output_tail)
        return entry
    cmp = compare(reference.losses()[step:], run.losses(), options.loss_rtol, options.loss_atol, first_step=step + 1)
    entry.update(comparison=cmp, ok=cmp["agree"], losses_judged=True)
    if not compare(reference.losses(), uninterrupted.losses(), options.loss_rtol, options.loss_atol)["agree"]:
        entry.update(ok=True, losses_judged=False,
                     note="opened; the losses are not judged here: the target's own run already differs from the "
                          "reference's (section 3)")
    return entry


def stability_section(options: AcceptOptions, runs: Dict[str, Run], progress: Callable[[str], None]) -> dict:
    """Section 5: the rehearsal on the reference and each target, and the portability of the reference's
    checkpoint to each target."""
    steps = plan(options.steps)
    if steps is None:
        return section(NOT_CHECKED, f"--steps {options.steps}: a rehearsal needs at least 4 steps (a save, a lost "
                                    "step, the failure, a step after the restart)")
    every, kill_at = steps
    rehearsals = {}
    for name, target in [("reference", options.reference), *((t.name, t) for t in options.targets)]:
        progress(f"stability: {target.name}: rank 0 killed at step {kill_at}, checkpoints every {every} steps")
        rehearsals[name] = rehearse(options, target, runs[name], every, kill_at)
    ref = rehearsals["reference"]
    strict = bool(ref.get("bitwise"))
    for name, entry in rehearsals.items():
        if entry.get("ok") and name != "reference" and strict and not entry["bitwise"]:
            entry.update(ok=False, why="the resumed losses are not bitwise those of the uninterrupted run, as "
                                       "they are on the reference")
    ported = {}
    ref_ck = Path(options.workdir) / _label("stability", options.reference) / "checkpoints"
    for t in options.targets:
        progress(f"stability: the reference's first checkpoint opened on {t.name}")
        ported[t.name] = portability(options, t, ref_ck, runs["reference"], runs[t.name])
    ok = all(e.get("ok") for e in rehearsals.values()) and all(e["ok"] for e in ported.values())
    recov = [e["recovery_s"] for n, e in rehearsals.items() if n != "reference" and e.get("recovery_s") is not None]
    problems = [f"{n}: {e.get('why')}" for n, e in rehearsals.items() if not e.get("ok")]
    problems += [f"{n}: the reference's checkpoint" + (f" of step {e['step']}" if e["step"] else "") + ": " + (
        e.get("why") or (
        f"the losses after it differ from the reference's from step {e['comparison']['first_divergent_step']}"))
        for n, e in ported.items() if not e["ok"]]
    summary = (f"killed at step {kill_at}, resumed from step {ref.get('resumed_from_step')}: losses after the resume "
               f"{'bitwise equal to' if strict else 'within tolerance of'} the uninterrupted run's; the reference's "
               f"checkpoint resumes on every target" if ok else "; ".join(problems))
    if ok and recov:
        summary += f"; recovery {max(recov):.1f} s"
    if not strict and ref.get("ok"):
        summary += " (the script does not resume bitwise on the reference either: compared within the loss tolerance)"
    return section(PASS if ok else FAIL, summary, checkpoint_every=every, killed_at_step=kill_at,
                   bitwise_expected=strict, rehearsals=rehearsals, portability=ported,
                   evidence=[e["command"] for e in [*rehearsals.values(), *ported.values()] if e.get("command")])
