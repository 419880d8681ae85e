"""rlgauntlet-zoo: the reference agents of rlgauntlet as data (weights-only agent files, their
VecNormalize statistics as plain numbers, and ``manifest.json`` with each agent's training
command, seed, sha256 and clean return). No code runs from here: rlgauntlet's ``zoo`` module
finds this folder and verifies every file against its sha256 before it is loaded.

Installed as ``pip install 'rlgauntlet[zoo]'`` (or ``pip install ./zoo`` from the repository),
apart from the code, as Gymnasium keeps its ROMs and torchvision its weights.
"""

from pathlib import Path

#: the folder holding manifest.json and the agent files
ZOO_DIR = Path(__file__).resolve().parent
