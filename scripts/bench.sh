#!/usr/bin/env bash
# Run every benchmark; each prints a ratio against its named baseline.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rc=0
for b in bench/bench_*.py; do
  printf '\n=== %s\n' "$b"
  "$PY" "$b" || rc=1
done
exit $rc
