#!/usr/bin/env bash
# The command a lent accelerator machine runs (see docs/gpu.md), with .whl carried:
#   bash tools/gpu/run_chunk.sh MINUTES JOB [JOB ...]
# Each job trains one chunk of MINUTES from its committed checkpoint; the jobs run side by side
# (the machine's 16 cores step their envs, the GPU holds their networks). Each job's files
# come back as one $OUT/JOB.tar (at most 8 files may come back), with its log inside and beside it.
set -uo pipefail
minutes=${1:?give the minutes of training per chunk, then the jobs}
shift
[ $# -ge 1 ] || { echo "give at least one job: radial-pong, radial-pong-linear or paad-pong" >&2; exit 2; }
out=${OUT:?OUT is the folder whose files come back}
# shellcheck source=tools/gpu/_wheels.sh
. tools/gpu/_wheels.sh
work=$(mktemp -d)
for job in "$@"; do
  mkdir -p "$work/$job"
  "$python" tools/gpu/chunk.py "$job" --minutes "$minutes" --out "$work/$job" --device "${DEVICE:-cuda}" \
    --subproc-envs >"$work/$job/chunk.log" 2>&1 &
done
wait  # for every job; each one's chunk.json says whether it finished
failed=0
for job in "$@"; do
  [ -f "$work/$job/chunk.json" ] || { failed=1; echo "== $job FAILED"; }
  echo "== $job"; tail -n 15 "$work/$job/chunk.log"
  cp "$work/$job/chunk.log" "$out/$job.log"
  tar -cf "$out/$job.tar" -C "$work/$job" .
done
exit $failed
