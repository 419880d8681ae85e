"""Resolving an agent name (``zoo:NAME``, ``sb3:PATH.zip``, ...: :mod:`rlgauntlet.victims.agent_ref`)
to a loaded :class:`~rlgauntlet.victims.base.Victim`, with the loading options each source
accepts (VecNormalize statistics, TorchScript's output kind and input space, precision, device,
pickled code) and the refusals where an option does not belong to the source.

Example:
    >>> victim = load_victim("zoo:cartpole-dqn")
    >>> victim.kind, victim.is_discrete
    ('q', True)
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from rlgauntlet.errors import UserError
from rlgauntlet.victims.agent_ref import parse_agent
from rlgauntlet.victims.base import KINDS, Victim
from rlgauntlet.victims.sb3 import load_sb3
from rlgauntlet.victims.torch_module import load_torchscript

__all__ = ["load_victim"]


def _vecnormalize_for(path: Path, given: str | Path | None) -> str | Path | None:
    """The VecNormalize statistics to load with the SB3 agent file ``path``: ``given``; ``none``
    for none at all; refused when none is given but statistics lie beside the agent, as
    ``vecnormalize.pkl`` (SB3's convention, our checkpoints') or ``NAME.vecnormalize.pkl`` (what
    ``zoo export`` writes beside ``NAME.zip``): an agent trained on normalised observations and
    fed raw ones still acts, and its numbers would be silently wrong."""
    if given is not None:
        return None if str(given).lower() == "none" else given
    if not path.is_file():
        return None  # missing, or a folder: load_sb3 says which
    for beside in (path.parent / "vecnormalize.pkl", path.with_name(f"{path.stem}.vecnormalize.pkl")):
        if beside.is_file():
            raise UserError(f"{path} has VecNormalize statistics beside it ({beside}); pass --vecnormalize {beside} "
                            "(or --vecnormalize none if the agent saw raw observations)")
    return None


def load_victim(
    agent: str,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    device: str = "cpu",
    kind: str | None = None,
    vecnormalize: str | Path | None = None,
    input_space: str | None = None,
    precision: str = "auto",
    allow_pickle: bool = False,
) -> Victim:
    """Load a victim from an agent name (any of :data:`~rlgauntlet.victims.agent_ref.AGENT_FORMS`).

    TorchScript agents need ``kind`` and the env spaces (they do not store them), and
    ``input_space`` (pixel01, normalized, raw) when their input is not an image. SB3 files are
    read as data; ``allow_pickle`` unpickles them as SB3 does (it runs code stored in the file).
    """
    if input_space is not None and input_space not in ("pixel01", "normalized", "raw"):
        raise UserError(f"unknown input space {input_space!r}; choose pixel01, normalized or raw")
    ref = parse_agent(agent)
    source, rest = ref.source, ref.rest
    if source in ("zoo", "sb3", "pg", "sadqn", "published"):
        given = [name for name, value in (("--kind", kind), ("--input-space", input_space)) if value is not None]
        if given:
            raise UserError(f"{' and '.join(given)} describe TorchScript agents; an SB3, zoo, pg or sadqn agent declares its "
                            f"own output and input: drop {' and '.join(given)}")
    if source == "pg":
        from rlgauntlet.victims.pg_release import load_pg

        if vecnormalize is not None:
            raise UserError("a pg: agent carries its own state filter; drop --vecnormalize")
        return load_pg(rest, observation_space, action_space, device=device, precision=precision)
    if source == "sadqn":
        from rlgauntlet.victims.sa_dqn import load_sa_dqn

        if vecnormalize is not None:
            raise UserError("an sadqn: agent sees pixels scaled to [0, 1], never normalised observations; drop "
                            "--vecnormalize")
        return load_sa_dqn(rest, observation_space, action_space, device=device, precision=precision)
    if source == "published":
        from rlgauntlet.published import local_file, release

        if vecnormalize is not None:
            raise UserError("a published agent carries its own input processing; drop --vecnormalize")
        entry = release(rest)
        if entry.get("format") == "sa_dqn":
            from rlgauntlet.victims.sa_dqn import load_sa_dqn as load
        else:
            from rlgauntlet.victims.pg_release import load_pg as load
        victim = load(local_file(entry), observation_space, action_space, device=device, precision=precision)
        victim.description = {**victim.description, "name": rest, "published": entry["repository"],
                              "method": entry["method"], "mapped_env": entry["env"]}
        if entry.get("format") == "sa_dqn":  # the file names no game: the catalogue does
            victim.trained_for = (entry["env"].rpartition("/")[2].split("-v")[0],)
        return victim
    if source == "zoo":
        from rlgauntlet.zoo import zoo_entry, zoo_file

        if vecnormalize is not None:
            raise UserError("zoo agents carry their own VecNormalize statistics; drop --vecnormalize")
        entry = zoo_entry(rest)
        if "members" in entry:
            return _zoo_ensemble(rest, entry, device, precision)
        vn = zoo_file(entry, "vecnormalize") if "vecnormalize" in entry else None
        victim = load_sb3(zoo_file(entry), entry["algorithm"], device=device, vecnormalize=vn, precision=precision)
        victim.description = {**victim.description, "source": "zoo", "name": rest, "path": f"zoo/{entry['file']}"}
        if "vecnormalize" in victim.description:
            victim.description["vecnormalize"]["path"] = f"zoo/{entry['vecnormalize']['file']}"
        return victim
    if source == "sb3":
        path, algo = ref.path_text, ref.algorithm
        vecnormalize = _vecnormalize_for(Path(path), vecnormalize)
        return load_sb3(path, algo, device=device, vecnormalize=vecnormalize, precision=precision,
                        allow_pickle=allow_pickle)
    if source == "torchscript":
        if kind is None:
            raise UserError(f"a TorchScript agent needs --kind ({', '.join(KINDS)}): what its output means")
        return load_torchscript(rest, kind, observation_space, action_space, device=device,
                                input_space=input_space, precision=precision)
    raise AssertionError(f"parse_agent accepted a source load_victim does not know: {source}")


def _zoo_ensemble(name: str, entry: dict, device: str, precision: str) -> Victim:
    """A zoo ensemble: its members (each checked against its sha256) as one victim."""
    from rlgauntlet.victims.uncertainty import EnsembleVictim
    from rlgauntlet.zoo import zoo_files

    members = [load_sb3(path, entry["algorithm"], device=device, precision=precision) for path in zoo_files(entry)]
    description = {"source": "zoo", "name": name, "algorithm": entry["algorithm"], "uncertainty": {
        "method": "ensemble", "members": len(members)},
        "members": [{"path": f"zoo/{m['file']}", "sha256": m["sha256"], "seed": m.get("seed")} for m in entry["members"]]}
    return EnsembleVictim(members, description)
