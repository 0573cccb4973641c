"""The LLM-stack recipes (tests/llmstack/*.json) on one CUDA device through `hal run`, each against its
reference on the CPU (called by scripts/gpu_check.d/llmstack.sh): DeepSpeed ZeRO-3 and the HF Trainer with
a ZeRO-3 config against DeepSpeed's own CPU run (DS_ACCELERATOR=cpu), torchtitan's llama3 debug model
against the same run through hal run on cpu (torchtitan has no plain CPU run).

One rank: NCCL refuses two ranks on one GPU, and torchtitan applies FSDP2 only at a data-parallel shard
degree above 1, so on one device torchtitan trains its single-process recipe (titan_fsdp2 needs two GPUs).
CUDA's float32 kernels differ from the CPU's in rounding, so the losses are compared within 1e-3 (the CPU
references compare exactly).  Prints one JSON line per recipe.

    python scripts/gpu_check.d/llmstack.py [RECIPE ...]
    HAL_BACKEND=emu python scripts/gpu_check.d/llmstack.py    # a dry run of the same comparisons here
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "llmstack"))
import check_llmstack as ls  # noqa: E402

RECIPES = sys.argv[1:] or ["ds_zero3_torch_adam", "ds_zero3_init", "hf_trainer_zero3", "titan_single"]
RTOL = 1e-3
MODE = os.environ.get("HAL_BACKEND", "cuda")
ok = True
for name in RECIPES:
    entry = dict(ls.entries()[name], nproc_per_node=1, plain_nproc_per_node=1)
    if name.startswith("hf_"):  # one rank takes the whole global batch, as its plain reference does
        entry["args"] = entry["plain_args"]
    missing = ls.missing_requirement(entry)
    if missing:
        print(json.dumps({"recipe": name, "ok": False, "problems": [f"{missing} is not installed"]}))
        ok = False
        continue
    reference = "plain" if entry["plain"] else "cpu"
    got, ref = ls.run(entry, MODE), ls.run(entry, reference)
    diff = ls.corpus.max_rel_diff(got["losses"], ref["losses"]) if got["losses"] and ref["losses"] else None
    passed = not got["problems"] and not ref["problems"] and diff is not None and diff <= RTOL
    ok &= passed
    print(json.dumps({"recipe": name, "ok": passed, MODE: got["losses"], f"{reference}_reference": ref["losses"],
                      "max_rel_diff": diff, "seconds": [got["seconds"], ref["seconds"]],
                      "problems": got["problems"] + ref["problems"], "stderr_tail": got["stderr_tail"][-8:]}),
          flush=True)
sys.exit(0 if ok else 1)
