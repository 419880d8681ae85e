#!/usr/bin/env bash
# Make the working tree small enough to travel to a lent machine (64 MiB with what a call carries;
# see docs/gpu.md): remove from the WORKING TREE ONLY the tracked files no chunk reads (the report
# example, plots); with --ood also the zoo and the PA-AD checkpoint, which the OOD Pong evaluation
# (its agents in the carried ood-pong/) does not read; with --field the zoo and every checkpoint, which
# a published board's chunk (tools/gpu/field_chunk.sh, its agents in the carried .releases/) does not read;
# with --field BOARD the same, but the zoo agents and checkpoint files that boards/BOARD.yaml names stay
# (field-hopper's zoo agents and defences: about 1 MB). Git keeps them; restore them all after the call:
#   bash tools/gpu/slim.sh --restore
# Refuses while any of them has changes that are not committed, so nothing is lost. SLIM_DRY_RUN=1 lists
# the files it would remove, one a line, and removes nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t files < <(git ls-files -- 'docs/*.html' 'docs/*.png' 'docs/results/*.png' 'benchmarks/results/*.png')
mapfile -t ood < <(git ls-files -- 'zoo/*' 'checkpoints/paad-pong-ppo-eps0.0005/*')
mapfile -t field < <(git ls-files -- 'zoo/*' 'checkpoints/*')
if [ "${1:-}" = "--restore" ]; then
  git checkout -- "${files[@]}" "${field[@]}"
  echo "restored ${#files[@]} + ${#field[@]} files"
  exit 0
fi
carried=.whl
if [ "${1:-}" = "--ood" ]; then
  files+=("${ood[@]}")
  carried=".whl ood-pong"
elif [ "${1:-}" = "--field" ]; then
  keep=()
  if [ -n "${2:-}" ]; then
    yaml="boards/$2.yaml"
    [ -f "$yaml" ] || { echo "slim.sh: no board $yaml; give a board's name, for example --field field-hopper" >&2; exit 2; }
    # zoo:NAME reads zoo/NAME.* (and the manifest); a checkpoint is named by its file's path
    mapfile -t keep < <({ git ls-files -- zoo/__init__.py zoo/manifest.json
                          grep -o 'zoo:[A-Za-z0-9_.-]*' "$yaml" | cut -d: -f2 | sort -u \
                            | while read -r name; do git ls-files -- "zoo/$name.*"; done
                          grep -o 'checkpoints/[^ ,"}]*' "$yaml"; } | sort -u)
    missing=$(comm -13 <(printf '%s\n' "${field[@]}" | sort) <(printf '%s\n' "${keep[@]}"))
    [ -z "$missing" ] || { echo "slim.sh: $yaml names files git does not track: $missing" >&2; exit 2; }
  fi
  mapfile -t dropped < <(comm -23 <(printf '%s\n' "${field[@]}" | sort) <(printf '%s\n' "${keep[@]}" | sort))
  files+=("${dropped[@]}")
  carried=".whl .releases"
elif [ -n "${1:-}" ]; then
  echo "slim.sh: unknown option ${1}; use --ood, --field [BOARD] or --restore" >&2
  exit 2
fi
if [ -n "${SLIM_DRY_RUN:-}" ]; then
  printf '%s\n' "${files[@]}"
  exit 0
fi
if [ -n "$(git status --porcelain -- "${files[@]}")" ]; then
  echo "slim.sh: some of these files have uncommitted changes; commit them first" >&2
  exit 2
fi
rm -f -- "${files[@]}"
travelling=$(git ls-files -co --exclude-standard | while read -r f; do if [ -f "$f" ]; then stat -c %s "$f"; fi; done \
  | awk '{s += $1} END {print s + 0}')
# shellcheck disable=SC2086
extra=$( (du -scb $carried 2>/dev/null || true) | tail -n 1 | cut -f1); extra=${extra:-0}
echo "removed ${#files[@]} files from the working tree; it travels at $(( (travelling + extra) / 1000000 )) MB with $carried (limit 67 MB)"
