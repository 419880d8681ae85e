"""Rewrite the zoo's agent files in the form evaluation needs (one-off migration, kept as the
record of how it was done): SB3 zips lose their optimizer state, target networks and training
state; VecNormalize pickles become plain numbers (JSON). The manifest's sha256 follows the new
files and each entry keeps the trained file's sha256 as ``source_sha256``. Every agent is
checked to give the same network outputs before and after, bit for bit on this machine (same
weights, same code path: bit-exactness is the property).

    python tools/slim_zoo.py            # converts zoo/ in place
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from rlgauntlet.victims.sb3 import load_sb3, sha256_file
from rlgauntlet.victims.sb3_files import write_agent_zip, write_vecnormalize_json
from rlgauntlet.zoo import _write_member_list, load_manifest, write_manifest, zoo_dir


def _same_outputs(old: Path, new: Path, algo: str, old_vn: Path | None, new_vn: Path | None) -> None:
    a = load_sb3(old, algo, vecnormalize=old_vn)
    b = load_sb3(new, algo, vecnormalize=new_vn)
    space = a.policy.observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(16)])
    xa, xb = a.preprocess(obs), b.preprocess(obs)
    assert torch.equal(xa, xb), f"{new.name}: preprocessing differs"
    with torch.no_grad():
        fa, fb = a.forward(xa), b.forward(xb)
    for field in ("q", "logits", "mean", "std", "action"):
        va, vb = getattr(fa, field, None), getattr(fb, field, None)
        if va is not None:
            assert torch.equal(va, vb), f"{new.name}: {field} differs"
    sa, sb = a.policy.state_dict(), b.policy.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa if "_target." not in k), new.name


def main() -> None:
    zoo = zoo_dir().resolve()
    backup = Path(tempfile.mkdtemp(prefix="zoo-before-"))
    for f in zoo.iterdir():
        shutil.copy2(f, backup / f.name)
    manifest = load_manifest()
    for name, entry in manifest.items():
        vn_old = vn_new = None
        if "vecnormalize" in entry and entry["vecnormalize"]["file"].endswith(".pkl"):
            vn_old = backup / entry["vecnormalize"]["file"]
            vn_new = zoo / f"{name}.vecnormalize.json"
            write_vecnormalize_json(vn_old, vn_new)
            (zoo / entry["vecnormalize"]["file"]).unlink()
            entry["vecnormalize"] = {"file": vn_new.name, "sha256": sha256_file(vn_new),
                                     "source_sha256": entry["vecnormalize"]["sha256"]}
        infos = entry["members"] if "members" in entry else [entry]
        for info in infos:
            if "source_sha256" in info:
                continue
            old, new = backup / info["file"], zoo / info["file"]
            write_agent_zip(old, new)
            _same_outputs(old, new, entry["algorithm"], vn_old, vn_new)
            info.update(source_sha256=info["sha256"], sha256=sha256_file(new))
        if "members" in entry:
            _write_member_list(zoo, name, entry)
        print(f"{name}: done", file=sys.stderr)
    write_manifest(manifest)
    print(json.dumps({"backup": str(backup)}))


if __name__ == "__main__":
    main()
