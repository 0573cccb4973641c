#!/usr/bin/env bash
# The framework corpus (tests/frameworks) and the Hugging Face recipes of the LLM-stack corpus (the HF Trainer
# and Accelerate with DeepSpeed, tests/llmstack) against the NEWEST releases of transformers, accelerate, peft
# and lightning, in a virtual environment of their own, through hal run on cpu and emu with each recipe's
# comparisons: drift in a library shows here before the pinned versions of pyproject's frameworks extra move.
# The venv gets the torch of the environment that runs this script (never a newer one: a constraint pins it)
# and DeepSpeed as pyproject's llmstack extra pins it.  Not in CI (it installs the libraries of the day).
# HAL_LATEST_VENV (default .venv-latest) chooses the folder; the versions tested are printed first and
# written with the results to build/frameworks-latest.json.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${HAL_LATEST_VENV:-.venv-latest}
mkdir -p build
TORCH=$("$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])')
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
echo "$TORCH" > build/torch-constraint-latest.txt
"$VENV/bin/python" -m pip install -q "$TORCH"
"$VENV/bin/python" -m pip install -q -e ".[test]" -c build/torch-constraint-latest.txt
"$VENV/bin/python" -m pip install -q -U transformers accelerate peft lightning safetensors -c build/torch-constraint-latest.txt
"$VENV/bin/python" -m pip install -q --no-build-isolation -c build/torch-constraint-latest.txt \
  "$(grep -o '"deepspeed==[^"]*"' pyproject.toml | tr -d '"')"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
print("frameworks-latest:", ", ".join(f"{p} {m.version(p)}" for p in
      ("torch", "transformers", "accelerate", "peft", "lightning", "deepspeed")))
PY
"$VENV/bin/python" -m hal.emu.build
export PATH="$PWD/$VENV/bin:$PATH"
status=0
results=()
for backend in cpu emu; do
  for check in "tests/frameworks/check_frameworks.py" "tests/llmstack/check_llmstack.py hf_trainer_zero3 accelerate_zero2"; do
    out="build/frameworks-latest-$backend-$(basename "${check%% *}" .py).json"
    # shellcheck disable=SC2086
    "$VENV/bin/python" $check --hal "$backend" --compare --json > "$out" || status=1
    results+=("$out")
  done
done
"$VENV/bin/python" - "${results[@]}" <<'PY'
import importlib.metadata as m, json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
summary = {"versions": {p: m.version(p) for p in ("torch", "transformers", "accelerate", "peft", "lightning", "deepspeed")},
           "runs": {p: {"mode": r["mode"], "passed": r["passed"], "ran": r["ran"],
                        "failed": {x["name"]: x["problems"] for x in r["results"] if not x["ok"]}} for p, r in zip(sys.argv[1:], runs)}}
json.dump(summary, open("build/frameworks-latest.json", "w"), indent=1)
for p, r in summary["runs"].items():
    print(f"{p}: {r['passed']}/{r['ran']} passed ({r['mode']})")
    for name, problems in r["failed"].items():
        print(f"  FAIL {name}: {'; '.join(problems)[:400]}")
PY
exit $status
