"""Inference on the reference and on each target (``hal accept --model``): greedy generation with a KV cache
at each batch size (concurrency 1-32), time to first token, time per output token, tokens/s, and how many
of the target's generated tokens are the reference's."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from hal_accept.options import AcceptOptions, Target
from hal_accept.runs import call_hal
from hal_accept.verdicts import FAIL, PASS

WORKER = Path(__file__).with_name("inference_worker.py")


def run_inference(options: AcceptOptions, target: Target, label: str) -> dict:
    """``hal run`` of the inference worker on ``target``: its result, or ``error`` with the output's end."""
    folder = Path(options.workdir) / label
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "inference.json"
    if out.exists():
        out.unlink()
    c = call_hal(options, target, ["run", "--quiet", str(WORKER), "--model", str(options.model), "--batches",
                                   ",".join(map(str, options.batches)), "--new-tokens", str(options.new_tokens),
                                   "--out", str(out)])
    result = json.loads(out.read_text()) if c.exit_code == 0 and out.exists() else None
    return {"command": " ".join(c.command), "env": c.env, "exit_code": c.exit_code, "result": result,
            "output_tail": "" if result else c.output_tail}


def _agreement(ref_rows, rows) -> Optional[float]:
    same = total = 0
    for a, b in zip(ref_rows, rows):
        for ra, rb in zip(a["tokens"], b["tokens"]):
            same += sum(x == y for x, y in zip(ra, rb))
            total += max(len(ra), len(rb))
    return same / total if total else None


def inference_section(options: AcceptOptions, progress: Callable[[str], None]) -> dict:
    """The section: per target and batch size TTFT, TPOT, tokens/s and the ratio to the reference, and the
    token agreement; its verdict holds the throughput ratio at every batch size and the disagreement gate."""
    progress(f"inference: reference {options.reference.name}, batch sizes {list(options.batches)}")
    ref = run_inference(options, options.reference, "inference-reference")
    evidence = [ref["command"]]
    if ref["result"] is None:
        return {"verdict": FAIL, "summary": f"the reference's generation failed (exit {ref['exit_code']})",
                "reference": ref, "targets": {}, "evidence": evidence}
    per_target, ok_all = {}, True
    for t in options.targets:
        progress(f"inference: {t.name}")
        got = run_inference(options, t, f"inference-{t.name.replace(':', '_')}")
        evidence.append(f"{' '.join(f'{k}={v}' for k, v in got['env'].items())} {got['command']}")
        if got["result"] is None:
            ok_all = False
            per_target[t.name] = {"run": got, "rows": [], "agreement": None, "within_gate": False}
            continue
        rows = []
        for r, g in zip(ref["result"]["rows"], got["result"]["rows"]):
            ratio = g["tokens_per_s"] / r["tokens_per_s"] if r["tokens_per_s"] else None
            rows.append({"batch": g["batch"], "ttft_s": g["ttft_s"], "tpot_s": g["tpot_s"],
                         "tokens_per_s": g["tokens_per_s"], "reference_tokens_per_s": r["tokens_per_s"],
                         "ratio": ratio})
        agreement = _agreement(ref["result"]["rows"], got["result"]["rows"])
        ok = (all(r["ratio"] is not None and r["ratio"] >= options.min_throughput_ratio for r in rows)
              and agreement is not None and 1 - agreement <= options.max_token_disagreement)
        ok_all &= ok
        per_target[t.name] = {"run": {k: v for k, v in got.items() if k != "result"}, "rows": rows,
                              "agreement": agreement, "within_gate": ok}
    reference_rows = [{k: v for k, v in r.items() if k != "tokens"} for r in ref["result"]["rows"]]
    return {"verdict": PASS if ok_all else FAIL,
            "summary": (f"greedy generation, {options.new_tokens} new tokens at batch sizes {list(options.batches)}: "
                        f"tokens/s >= {options.min_throughput_ratio} x the reference's at every batch size and "
                        f"token disagreement <= {options.max_token_disagreement}"),
            "reference": reference_rows, "targets": per_target, "evidence": evidence}
