#!/usr/bin/env bash
# Download the wheels the accelerator machine lacks (it has torch, numpy, scipy, typer, rich,
# PyYAML, matplotlib, scikit-learn, opencv; not gymnasium, ale-py, SB3, kornia, pydantic or MuJoCo)
# into .whl/ (ignored by git), for its Python 3.12 on x86-64, at the versions of this checkout's
# .venv so that both machines run the same code. See docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PACKAGES=(gymnasium ale-py stable-baselines3 pydantic pydantic-core annotated-types typing-inspection
          farama-notifications)
# kornia (7.3 MB with kornia-rs) only where a job applies image threats (OOD Pong's shifts):
# the working tree that travels is limited to 64 MiB
if [ "${KORNIA:-0}" = 1 ]; then PACKAGES+=(kornia kornia-rs); fi
# MuJoCo (27 MB with its dependencies) and sb3-contrib (LSTM directors) only where a job steps MuJoCo tasks (a field's chunk:
# tools/gpu/field_chunk.sh). Not PyOpenGL (3.2 MB): mujoco and Gymnasium import it only to render, which no
# chunk does (checked on a field's chunk, 2026-12-04; docs/gpu.md)
if [ "${MUJOCO:-0}" = 1 ]; then PACKAGES+=(mujoco absl-py etils glfw websockets imageio sb3-contrib); fi
mkdir -p .whl
for name in "${PACKAGES[@]}"; do
  version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
  if [ -z "$version" ]; then echo "$name is not installed in $PY's environment; run make install first" >&2; exit 2; fi
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$name==$version"
done
du -sh .whl
