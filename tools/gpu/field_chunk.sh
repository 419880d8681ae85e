#!/usr/bin/env bash
# A chunk of a published board on a lent machine's CPU cores (docs/gpu.md, "A field's chunk"), with
# .whl (built with MUJOCO=1), .releases (the board's release files, tools/gpu/field_releases.py) and
# the board's store folder, where one exists, carried:
#   bash tools/gpu/field_chunk.sh MINUTES BOARD PROTOCOL [STORE]
# (STORE: the store folder, relative to the root; default runs/published-BOARD)
# Runs benchmarks/published_board.py with a worker per core until its directors would start (or for
# MINUTES at most), then stops it with SIGTERM: every stored episode is kept, and the same command
# resumes from them here. The store folder comes back as $OUT/BOARD.tgz.part-* (each under the
# 16 MiB a returned file may have) with their sha256 in $OUT/BOARD.sha256, and the log beside them.
set -uo pipefail
minutes=${1:?give the minutes, the board and the protocol (for example 8 field-halfcheetah mujoco@v8)}
board=${2:?give the board after the minutes}
protocol=${3:?give the protocol after the board}
out=${OUT:?OUT is the folder whose files come back}
[ -d .releases ] || { echo "carry .releases (python tools/gpu/field_releases.py $board)" >&2; exit 2; }
# shellcheck source=tools/gpu/_wheels.sh
. tools/gpu/_wheels.sh
# every package a field imports, before any of the chunk is spent (sb3-contrib: the LSTM directors)
"$python" -c "import gymnasium, mujoco, imageio, stable_baselines3, sb3_contrib, pydantic" \
  || { echo "a package the board needs is missing from .whl: MUJOCO=1 bash tools/gpu/wheels.sh" >&2; exit 2; }
store=${4:-runs/published-$board}  # relative, as here: its directors' folders are named relative to the root
case "$store" in /*|*..*) echo "give the store folder relative to the repository's root, as here: $store" >&2; exit 2;; esac
mkdir -p "$store"
workers=${WORKERS:-$(nproc)}
echo "== $board under $protocol, $workers workers, ${minutes} minutes"
RLGAUNTLET_RELEASES=$PWD/.releases timeout -s TERM -k 60 "${minutes}m" "$python" benchmarks/published_board.py \
  --boards "$board" --protocol "$protocol" --workers "$workers" --out "$store" >"$out/$board.log" 2>&1 &
board_pid=$!
# the chunk ends where the directors would start: a director trained there is another sample than the
# same director trained here (docs/gpu.md), while every evaluation episode is the same to the last digit
while kill -0 "$board_pid" 2>/dev/null; do
  if grep -q "learned attackers" "$out/$board.log"; then kill -TERM "$board_pid"; break; fi
  sleep 5
done
wait "$board_pid"
echo "== published_board.py exited with $?"
tail -n 20 "$out/$board.log"
# and no director folder (named ...-<steps>steps) travels back, should one have started
tar -czf - --exclude="$store/gauntlet-cache/*/*/*steps" "$store" | split -b 15m -d - "$out/$board.tgz.part-"
(cd "$out" && sha256sum "$board".tgz.part-* >"$board.sha256")
ls -l "$out"
