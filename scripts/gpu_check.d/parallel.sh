#!/usr/bin/env bash
# FSDP2 + a sharded (DCP) checkpoint through hal on one CUDA device (called by scripts/gpu_check.sh).
# World size 1: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so the 2- to 8-rank
# cases of tests/parallel/ and tests/dist/test_checkpoint_reshard.py cannot run on a single GPU;
# here one rank (cpu:gloo,cuda:nccl) trains fully_shard-ed blocks, saves asynchronously through
# dcp.async_save, and a fresh process resumes from the step (losses compared, consolidate checked).
# The Python part runs anywhere: HAL_BACKEND=cpu python scripts/gpu_check.d/fsdp_dcp.py
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
export HAL_BACKEND=${HAL_BACKEND:-cuda}
echo "### FSDP2 + DCP save, resume in a fresh process, on $HAL_BACKEND (world size 1)"
"$PY" scripts/gpu_check.d/fsdp_dcp.py --json
