"""The zoo: reference agents trained by this project, with a checksummed manifest.

``zoo/manifest.json`` maps a name to its env, algorithm, training preset, file and sha256,
the exact training command and seed, and the clean return measured over 20 episodes.
Files are checked against their sha256 before they are loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlgauntlet.errors import UserError


def zoo_dir() -> Path:
    """The zoo folder: ``$RLGAUNTLET_ZOO`` or ``zoo/`` at the root of the source checkout."""
    env = os.environ.get("RLGAUNTLET_ZOO")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "zoo"


def load_manifest(directory: Path | None = None) -> dict[str, dict]:
    path = (directory or zoo_dir()) / "manifest.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def write_manifest(manifest: dict[str, dict], directory: Path | None = None) -> None:
    path = (directory or zoo_dir()) / "manifest.json"
    path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")


def zoo_entry(name: str) -> dict:
    """The manifest entry of ``name``; a :class:`UserError` lists the known names otherwise."""
    manifest = load_manifest()
    if name not in manifest:
        known = ", ".join(sorted(manifest)) or "none yet"
        raise UserError(f"no zoo agent named {name!r}; known: {known} (see `rlgauntlet zoo list`)")
    return manifest[name]


def zoo_file(entry: dict, key: str = "file") -> Path:
    """Path of a zoo file, verified against the sha256 in the manifest."""
    from rlgauntlet.victims.sb3 import sha256_file

    info = entry if key == "file" else entry[key]
    path = zoo_dir() / info["file"]
    if not path.exists():
        raise UserError(f"zoo file {path} is missing; restore it from the repository (git checkout zoo/)")
    digest = sha256_file(path)
    if digest != info["sha256"]:
        raise UserError(
            f"zoo file {path} does not match its manifest sha256 ({digest[:12]} != {info['sha256'][:12]}); "
            "restore it from the repository or retrain it with its recorded command"
        )
    return path
