#!/usr/bin/env bash
# The OOD Pong evaluation a lent machine runs (docs/gpu.md), carrying .whl (built with KORNIA=1:
# the shifts are image corruptions) and ood-pong/ (the zoo folder tools/gpu/ood_pong.py writes):
#   bash tools/gpu/ood_bench.sh MINUTES DETECTOR [DETECTOR ...]      (ensemble, mcdropout, dropconnect)
# Runs paper 002's Table 5 protocol for each detector side by side: benchmarks/ood_tables.py
# --envs pong (scan the grid, then 5 trials × 10 games of each of the paper's configurations
# against as many nominal games), every finished episode stored in ood-pong/DETECTOR.sqlite. At
# MINUTES each run is interrupted (the store keeps what finished) and DETECTOR.tar comes back:
# its store gzipped, its log, and its result JSON and plot once it has finished. Place them with
# `python tools/gpu/ood_pong.py place OUT-FILES` and the next call resumes where this one stopped.
set -uo pipefail
minutes=${1:?give the minutes, then the detectors}
shift
[ $# -ge 1 ] || { echo "give at least one detector: ensemble, mcdropout or dropconnect" >&2; exit 2; }
out=${OUT:?OUT is the folder whose files come back}
[ -f ood-pong/manifest.json ] || { echo "ood-pong/manifest.json is missing: carry ood-pong (python tools/gpu/ood_pong.py zoo)" >&2; exit 2; }
# shellcheck source=tools/gpu/_wheels.sh
. tools/gpu/_wheels.sh
export RLGAUNTLET_ZOO="$PWD/ood-pong"
work=$(mktemp -d)
for detector in "$@"; do
  mkdir -p "$work/$detector"
  timeout --signal=INT --kill-after=60 "${minutes}m" "$python" benchmarks/ood_tables.py --envs pong \
    --detectors "$detector" --store "ood-pong/$detector.sqlite" --results "$work/$detector" \
    --device "${DEVICE:-cuda}" --n-envs "${N_ENVS:-8}" >"$work/$detector/run.log" 2>&1 &
done
wait
for detector in "$@"; do
  echo "== $detector"; tail -n 5 "$work/$detector/run.log"
  store="ood-pong/$detector.sqlite"
  if [ -f "$store" ]; then
    # a run killed after its grace period may leave episodes in the write-ahead log: fold them in first
    "$python" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("pragma wal_checkpoint(TRUNCATE)"); c.close()' "$store"
    gzip -c "$store" >"$work/$detector/store.sqlite.gz"
  fi
  tar -cf "$out/$detector.tar" -C "$work/$detector" .
done
exit 0
