#!/usr/bin/env bash
# Make the working tree small enough to travel to a lent machine (64 MiB with the wheels; see
# docs/gpu.md): remove from the WORKING TREE ONLY the tracked files no chunk reads (the report
# example, plots). Git keeps them; restore them after the call with
#   bash tools/gpu/slim.sh --restore
# Refuses while any of them has changes that are not committed, so nothing is lost.
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t files < <(git ls-files -- 'docs/*.html' 'docs/*.png' 'docs/results/*.png' 'benchmarks/results/*.png')
if [ "${1:-}" = "--restore" ]; then
  git checkout -- "${files[@]}"
  echo "restored ${#files[@]} files"
  exit 0
fi
if [ -n "$(git status --porcelain -- "${files[@]}")" ]; then
  echo "slim.sh: some of these files have uncommitted changes; commit them first" >&2
  exit 2
fi
rm -f -- "${files[@]}"
travelling=$(git ls-files -co --exclude-standard | while read -r f; do if [ -f "$f" ]; then stat -c %s "$f"; fi; done \
  | awk '{s += $1} END {print s + 0}')
wheels=$(du -sb .whl 2>/dev/null | cut -f1); wheels=${wheels:-0}
echo "removed ${#files[@]} files from the working tree; it travels at $(( (travelling + wheels) / 1000000 )) MB with the wheels (limit 67 MB)"
