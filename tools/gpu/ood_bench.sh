#!/usr/bin/env bash
# The OOD Pong evaluation a lent machine runs (docs/gpu.md), carrying .whl (built with KORNIA=1:
# the shifts are image corruptions) and ood-pong/ (the zoo folder tools/gpu/ood_pong.py writes):
#   bash tools/gpu/ood_bench.sh MINUTES AGENT [AGENT ...]
# Runs paper 002's protocol (--suite ood-pong: the shifts where the agent fails, 5 trials × 10
# games each, against as many nominal games) for each agent of ood-pong/ side by side, storing
# every finished episode in ood-pong/AGENT.sqlite; at MINUTES each run is interrupted (Ctrl-C:
# the store keeps what finished) and the stores come back gzipped as $OUT/AGENT.sqlite.gz,
# with the result JSON of a finished run and each log. Place them back into ood-pong/ (gunzip)
# and the next call resumes where this one stopped (--resume).
set -uo pipefail
minutes=${1:?give the minutes, then the agents (zoo names in ood-pong/)}
shift
[ $# -ge 1 ] || { echo "give at least one agent: pong-ppo-ensemble, pong-ppo-mcdropout or pong-ppo-dropconnect" >&2; exit 2; }
out=${OUT:?OUT is the folder whose files come back}
python=${PYTHON:-python3}
[ -f ood-pong/manifest.json ] || { echo "ood-pong/manifest.json is missing: carry ood-pong (python tools/gpu/ood_pong.py zoo)" >&2; exit 2; }
site=$(mktemp -d)
if [ "${WHEELS:-1}" = 1 ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || exit 2
fi
export PYTHONPATH="$site:$PWD/src" PYTHONUNBUFFERED=1 RLGAUNTLET_THREADS=1 RLGAUNTLET_ZOO="$PWD/ood-pong"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
for agent in "$@"; do
  timeout --signal=INT --kill-after=60 "${minutes}m" "$python" -c 'from rlgauntlet.cli import main; main()' \
    ood bench --agent "zoo:$agent" --env PongNoFrameskip-v4 --suite ood-pong --trials 5 --episodes 10 \
    --n-envs "${N_ENVS:-8}" --device "${DEVICE:-cuda}" --store "ood-pong/$agent.sqlite" --resume \
    --out "$out/$agent.json" >"$out/$agent.log" 2>&1 &
done
wait
for agent in "$@"; do
  echo "== $agent"; tail -n 15 "$out/$agent.log"
  store="ood-pong/$agent.sqlite"
  [ -f "$store" ] || continue
  # a run killed after its grace period may leave episodes in the write-ahead log: fold them in first
  "$python" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("pragma wal_checkpoint(TRUNCATE)"); c.close()' "$store"
  gzip -c "$store" >"$out/$agent.sqlite.gz"
done
exit 0
