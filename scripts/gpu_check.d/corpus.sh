#!/usr/bin/env bash
# The corpus of CUDA-written training scripts on a lent GPU: each script as written (plain
# python: its CUDA path) and through `HAL_BACKEND=cuda hal run` (the shim must change
# nothing there), deterministic losses compared.  Called by scripts/gpu_check.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
dest=${OUT:-docs/validation}
day=$(date -u +%Y-%m-%d)
mkdir -p "$dest"
echo "### tests/corpus through hal run on cuda, compared with the scripts run as written"
"$PY" tests/corpus/check_plain_cpu.py --runs 1 --hal cuda --compare --json > "$dest/corpus-cuda-$day.json"
echo "(exit code $?)"
"$PY" - "$dest/corpus-cuda-$day.json" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["results"] if isinstance(rows, dict) else rows
for r in rows:
    print(f"{r['script']:28s} {'ok' if r['ok'] else 'FAIL'} {'; '.join(r['problems'])[:160]}")
print(f"{sum(r['ok'] for r in rows)}/{len(rows)} scripts ok on cuda")
PYEOF
