"""DeepSpeed ZeRO-3 (tests/llmstack/deepspeed.json) on one CUDA device through `hal run`, against DeepSpeed's
own CPU run of the same recipe at one rank (called by scripts/gpu_check.d/llmstack.sh).

One rank: NCCL refuses two ranks on one GPU.  CUDA's float32 kernels differ from the CPU's in rounding, so
the losses are compared within 1e-3 (the CPU references compare exactly).  Prints one JSON line per recipe.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "llmstack"))
import check_llmstack as ls  # noqa: E402

RECIPES = sys.argv[1:] or ["ds_zero3_torch_adam", "ds_zero3_init", "hf_trainer_zero3"]
RTOL = 1e-3
MODE = os.environ.get("HAL_BACKEND", "cuda")  # HAL_BACKEND=emu python scripts/gpu_check.d/llmstack.py: a dry run here
ok = True
for name in RECIPES:
    entry = dict(ls.entries()[name], nproc_per_node=1, plain_nproc_per_node=1)
    if name.startswith("hf_"):  # one rank takes the whole global batch, as its plain reference does
        entry["args"] = entry["plain_args"]
    got, ref = ls.run(entry, MODE), ls.run(entry, "plain")
    diff = ls.corpus.max_rel_diff(got["losses"], ref["losses"]) if got["losses"] and ref["losses"] else None
    passed = not got["problems"] and not ref["problems"] and diff is not None and diff <= RTOL
    ok &= passed
    print(json.dumps({"recipe": name, "ok": passed, MODE: got["losses"], "cpu_plain": ref["losses"],
                      "max_rel_diff": diff, "seconds": [got["seconds"], ref["seconds"]],
                      "problems": got["problems"] + ref["problems"], "stderr_tail": got["stderr_tail"][-8:]}))
sys.exit(0 if ok else 1)
