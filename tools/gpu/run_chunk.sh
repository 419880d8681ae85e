#!/usr/bin/env bash
# The command one chunk runs on the accelerator machine (see docs/gpu.md):
#   bash tools/gpu/run_chunk.sh JOB [MINUTES]     (with .whl carried; files go to $OUT)
set -euo pipefail
job=${1:?give a job: radial-pong or paad-pong}
minutes=${2:-8}
site=$(mktemp -d)  # the carried wheels, installed for this command only
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
export PYTHONPATH="$site:$PWD/src" PYTHONUNBUFFERED=1 RLGAUNTLET_THREADS=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 tools/gpu/chunk.py "$job" --minutes "$minutes" --out "${OUT:?}" --device cuda --subproc-envs 2>&1 \
  | tee "$OUT/chunk.log"
