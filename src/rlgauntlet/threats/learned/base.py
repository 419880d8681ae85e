"""A trained attacker used as an observation threat (the shared half of ``paad`` and ``sarl``).

An attacker folder, written by ``rlgauntlet attack-train``, holds ``attacker.zip`` (the SB3
director) and ``manifest.json``: the method, variant, ε and its budget space, the env, the
victim's sha256 (and its VecNormalize file's), the actor's settings, the training steps and
seed. At each step the director reads the victim's clean network input ``x`` and acts
deterministically (its mean action); the actor turns that action into ``x̃`` (see
:mod:`rlgauntlet.threats.learned.actor`). The director is fed forward, so the threat has no
per-episode state.

An attacker is trained for one victim, one env and one ε: using it on anything else is an
error naming both values. ``attacker=`` may also name a folder of attacker folders, one per
ε, so that ``--eps-grid`` finds the right one for each budget.
"""

from __future__ import annotations

import json
import math
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat, ThreatParams
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.victims.base import Victim

MANIFEST = "manifest.json"
ATTACKER_FILE = "attacker.zip"


class LearnedParams(ThreatParams):
    attacker: str = Field(description="attacker folder written by `rlgauntlet attack-train` (or a folder of them, one per ε)")
    eps: float = Field(ge=0.0, description="budget; must equal the ε the attacker was trained for")
    transfer: bool = Field(False, description="the attacker was trained against another agent of this env and is "
                           "applied as it is (a transferred member of a board); its env, input shape and budget "
                           "units must still be this agent's")


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read the attacker manifest {path} ({type(exc).__name__}); "
                        "give a folder written by `rlgauntlet attack-train`") from None
    if not isinstance(manifest, dict) or not {"method", "variant", "eps", "victim", "env"} <= manifest.keys():
        raise UserError(f"{path} is not an attacker manifest; give a folder written by `rlgauntlet attack-train`")
    return manifest


def find_attacker(path: str, eps: float, method: str) -> tuple[Path, dict]:
    """The attacker folder for ``eps``: ``path`` itself, or the one of its sub-folders whose
    manifest has this ε. Raises a :class:`UserError` naming what was found otherwise."""
    root = Path(path)
    if not root.is_dir():
        raise UserError(f"attacker={path}: no such folder; give a folder written by `rlgauntlet attack-train`")
    if (root / MANIFEST).exists():
        candidates = [root]
    else:
        candidates = sorted(p.parent for p in root.glob(f"*/{MANIFEST}"))
        if not candidates:
            raise UserError(f"attacker={path} holds no {MANIFEST}; give a folder written by `rlgauntlet attack-train`")
    found = []
    for folder in candidates:
        manifest = read_manifest(folder)
        if manifest["method"] != method:
            raise UserError(f"attacker={folder} holds a {manifest['method']} attacker; use the threat "
                            f"{manifest['method']}:attacker=... for it")
        if math.isclose(float(manifest["eps"]), eps, rel_tol=1e-9, abs_tol=1e-12):
            return folder, manifest
        found.append(f"{float(manifest['eps']):g}")
    raise UserError(f"attacker={path} was trained for eps={', '.join(found)}, not eps={eps:g}; an attacker "
                    "only holds for the budget it was trained with: train one for this eps with "
                    "`rlgauntlet attack-train`")


def check_trained_for(name: str, manifest: dict, victim: Victim, transfer: bool = False) -> None:
    """Raise a :class:`UserError` unless ``victim`` is the agent (and VecNormalize file) the
    attacker of ``manifest`` was trained against, in the same budget space; with ``transfer``
    (an attacker of another agent, applied as it is) only that its inputs are this agent's:
    the same budget units and input shape."""
    if transfer:
        check_transferable(name, manifest, victim)
        return
    trained = manifest["victim"]
    mine = victim.description.get("sha256")
    if trained.get("sha256") != mine:
        raise UserError(f"{name}: the attacker was trained against the agent with sha256 "
                        f"{str(trained.get('sha256'))[:12]} ({trained.get('agent')}), but this agent's is "
                        f"{str(mine)[:12]}; train an attacker for this agent")
    stats = (victim.description.get("vecnormalize") or {}).get("sha256")
    if trained.get("vecnormalize_sha256") != stats:
        raise UserError(f"{name}: the attacker was trained with VecNormalize statistics "
                        f"{str(trained.get('vecnormalize_sha256'))[:12]}, but this agent has {str(stats)[:12]}; "
                        "give the agent's own VecNormalize file")
    if manifest.get("budget_space") != victim.budget_space:
        raise UserError(f"{name}: the attacker's inputs are in {manifest.get('budget_space')} units but this "
                        f"agent's are {victim.budget_space}; use the --input-space it was trained with")


def check_transferable(name: str, manifest: dict, victim: Victim) -> None:
    """Raise a :class:`UserError` unless the director of ``manifest`` reads inputs of ``victim``'s
    units and shape: a director trained on another agent's normalized inputs would be fed raw
    ones (or another size), a number that means nothing."""
    if manifest.get("budget_space") != victim.budget_space:
        raise UserError(f"{name}: a transferred attacker must read inputs in this agent's units; it was trained on "
                        f"{manifest.get('budget_space')} inputs and this agent's are {victim.budget_space}: "
                        "transfer it only between agents of one input space")
    shape = manifest.get("input_shape")
    if shape is not None:
        mine = tuple(victim.preprocess(victim.observation_space.sample()[None]).shape[1:])
        if tuple(shape) != mine:
            raise UserError(f"{name}: a transferred attacker must read inputs of this agent's shape; it observes "
                            f"{tuple(shape)} and this agent's inputs are {mine}: transfer it only between agents "
                            "of one observation")


def _canonical_sha256(path: Path) -> str | None:
    """The sha256 of a checkpoint's canonical form (:func:`~rlgauntlet.victims.sb3_files.write_canonical_zip`),
    which is what ``attacker.zip`` holds; None where the file is no SB3 zip."""
    import zipfile

    from rlgauntlet.victims.sb3_files import canonical_sha256

    try:
        return canonical_sha256(path)
    except (zipfile.BadZipFile, KeyError, ValueError):
        return None


def director_file(folder: Path, manifest: dict) -> Path:
    """The director's file in attacker ``folder``: ``attacker.zip``, or the latest checkpoint of a
    run still under way (chunks on a lent machine). Where the manifest records the director's
    sha256, the file must match it: a stale ``attacker.zip`` beside a newer checkpoint (an earlier
    run's, not overwritten because the folder came back in parts) would otherwise be used silently."""
    candidates = [path for path in (folder / ATTACKER_FILE, folder / "checkpoint" / "model.zip") if path.exists()]
    if not candidates:
        raise UserError(f"{folder} holds no director ({ATTACKER_FILE} or checkpoint/model.zip); "
                        "train it with `rlgauntlet attack-train`")
    expected = manifest.get("director_sha256")
    if expected is None:  # a manifest from before the director's hash was recorded
        return candidates[0]
    from rlgauntlet.common.hashing import sha256_file

    for path in candidates:  # the director is written in its canonical form (earlier ones as saved)
        if sha256_file(path) == expected or (path.name != ATTACKER_FILE and _canonical_sha256(path) == expected):
            return path
    raise UserError(f"{folder}: no director file matches its manifest (sha256 {expected[:12]}; "
                    f"{', '.join(p.name for p in candidates)} differ): the folder mixes two runs; resume it with "
                    "`rlgauntlet attack-train` to rewrite both, or restore the file the manifest names")


class LearnedAttack(Threat):
    """Base of the trained-attacker threats; subclasses set ``name`` and ``method``."""

    Params = LearnedParams
    file_params = ("attacker",)
    budget_params = ("eps",)
    white_box = True
    method: ClassVar[str]

    @cached_property
    def _loaded(self) -> tuple[Path, dict]:
        return find_attacker(self.params.attacker, self.params.eps, self.method)

    @property
    def manifest(self) -> dict:
        return self._loaded[1]

    @cached_property
    def director(self) -> Victim:
        """The trained director, loaded as data (an SB3 policy acting on the victim's input)."""
        from rlgauntlet.victims.sb3 import load_sb3

        folder, manifest = self._loaded
        space = None
        if "input_shape" in manifest:  # written by attack-train: large boxes are only pickled in the zip
            low, high = manifest.get("input_bounds") or (-np.inf, np.inf)
            space = gym.spaces.Box(low, high, tuple(manifest["input_shape"]), np.float32)
        return load_sb3(self._director_path, precision="float32", observation_space=space)

    @cached_property
    def _director_path(self) -> Path:
        """The director file, found (and checked against the manifest's sha256) once."""
        return director_file(*self._loaded)

    def fingerprint(self) -> dict:
        path = self._director_path  # raises where no file matches the manifest
        recorded = self.manifest.get("director_sha256")
        if recorded is not None:  # director_file found the file with exactly this hash
            return {"director_sha256": recorded}
        from rlgauntlet.common.hashing import sha256_file

        return {"director_sha256": sha256_file(path)}

    @cached_property
    def actor(self) -> AttackActor:
        actor = self.manifest.get("actor", {})
        return AttackActor(self.manifest["variant"], self.params.eps, steps=int(actor.get("steps", 1)),
                           step=actor.get("step"), lam=float(actor.get("lam", 1.0)), loss=actor.get("loss", "hinge"))

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        check_trained_for(self.name, self.manifest, victim, self.params.transfer)

    def check_env(self, env: gym.Env, env_id: str) -> None:
        if self.manifest["env"] != env_id:
            raise UserError(f"{self.name}: the attacker was trained on {self.manifest['env']}, not {env_id}; "
                            "give the env it was trained on")

    def director_actions(self, x: torch.Tensor, memory: Memory | None = None) -> torch.Tensor:
        """The director's deterministic actions for clean inputs ``x`` (B, *input_shape). A
        recurrent director reads each row's memory of its episode from ``memory`` and moves it on
        by this step's input."""
        with torch.no_grad():
            director = self.director
            shape = tuple(director.observation_space.shape)
            if x[0].numel() != math.prod(shape):
                raise UserError(f"{self.name}: the attacker observes inputs of shape {shape}, this agent's are "
                                f"{tuple(x.shape[1:])}; train an attacker for this agent")
            z = x.to(director.device, director.dtype).reshape(x.shape[0], *director.observation_space.shape)
            if not director.recurrent:
                return director.actions(director.forward(z), deterministic=True)
            director.use_state([state["lstm"] for state in memory.states])
            actions = director.actions(director.forward(z), deterministic=True)
            for state, moved in zip(memory.states, director.advance_state(z)):
                state["lstm"] = moved
            return actions

    def new_state(self) -> dict | None:
        """A recurrent director's memory of the episode (its LSTM state at the start); None otherwise."""
        return {"lstm": self.director.initial_state()} if self.director.recurrent else None

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        if self.director.recurrent:
            raise UserError(f"{self.name}: this attacker's director is an LSTM and needs its memory of the episode; "
                            "it runs in the rollout engine only")
        return self.actor.perturb(x, victim, self.director_actions(x), rng)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.director.recurrent:
            return super().apply(x, victim, rng, memory, scheduled)
        actions = self.director_actions(x, memory)  # every step moves the director's memory, acted on or not
        if not scheduled.any():
            return x, scheduled
        with torch.enable_grad():  # the PA-AD actor's gradient step on the victim
            perturbed = self.actor.perturb(x, victim, actions, rng).detach()
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), perturbed, x), scheduled
