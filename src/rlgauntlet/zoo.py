"""The zoo: reference agents trained by this project, with a checksummed manifest.

``zoo/manifest.json`` maps a name to its env, algorithm, training preset, file(s) and
sha256, the exact training command and seed, and the clean return measured over 20
episodes. Files are checked against their sha256 before they are loaded.

An entry holds one agent (``file``, optionally ``vecnormalize``) or several files:
``members`` (an ensemble: K independently seeded agents, each ``{"file", "sha256", "seed"}``),
whose ``file`` is then the ensemble's member list (``NAME.ensemble.json``), checksummed like
any agent file and checked against ``members`` when loaded.
An entry trained against another agent (a learned attacker) names it in ``victim``
(``{"name", "sha256"}``), and loading it checks that the zoo still holds that exact victim.

The agents are a distribution of their own, ``rlgauntlet-zoo`` (the ``[zoo]`` extra, built from
the repository's ``zoo/``), as Gymnasium keeps its ROMs and torchvision its weights apart from
the code. :func:`zoo_dir` finds it: ``$RLGAUNTLET_ZOO`` when set, else the installed
``rlgauntlet_zoo`` package, else the ``zoo/`` of a source checkout this module runs from; without
any, a ``zoo:`` spec is one line naming the extra. This module reads the catalogue only: it
imports no agent adapter (storing an agent takes the adapters' writer as an argument).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from rlgauntlet.errors import UserError


def zoo_dir() -> Path:
    """The zoo folder: ``$RLGAUNTLET_ZOO``, the installed ``rlgauntlet-zoo``, or a checkout's ``zoo/``."""
    env = os.environ.get("RLGAUNTLET_ZOO")
    if env:
        folder = Path(env)
        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise UserError(f"RLGAUNTLET_ZOO={env} {what}; point it at a zoo folder (one holding manifest.json), "
                            "or unset it to use the installed zoo (rlgauntlet[zoo])")
        return folder
    try:
        from rlgauntlet_zoo import ZOO_DIR

        return Path(ZOO_DIR)
    except ImportError:
        pass
    checkout = Path(__file__).resolve().parents[2] / "zoo"  # src/rlgauntlet/zoo.py in a source tree
    if (checkout / "manifest.json").is_file():
        return checkout
    raise UserError("the zoo's agents are not installed: pip install 'rlgauntlet[zoo]' (from a checkout: "
                    "pip install ./zoo), or set RLGAUNTLET_ZOO to a zoo folder")


def restore_hint(what: str, folder: Path | None = None) -> str:
    """How to restore ``what`` (a name inside the zoo folder, e.g. ``manifest.json``): from git
    only where the zoo folder is a checkout's ``zoo/``; in the folder ``RLGAUNTLET_ZOO`` names when
    it is set; else by reinstalling the zoo distribution."""
    folder = folder or zoo_dir()
    if os.environ.get("RLGAUNTLET_ZOO"):
        return (f"restore {what} in {folder} (the folder RLGAUNTLET_ZOO names), or unset RLGAUNTLET_ZOO to use "
                "the installed zoo")
    if (folder.parent / ".git").exists():
        return f"restore it from the repository (git -C {folder.parent} checkout zoo/{what})"
    return "reinstall the zoo (pip install --force-reinstall 'rlgauntlet[zoo]', or pip install ./zoo in a checkout)"


def load_manifest(directory: Path | None = None) -> dict[str, dict]:
    path = (directory or zoo_dir()) / "manifest.json"
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"the zoo manifest {path} is not valid JSON ({exc}); "
                        f"{restore_hint('manifest.json', path.parent)}") from None
    if not isinstance(manifest, dict) or not all(isinstance(e, dict) for e in manifest.values()):
        raise UserError(f"the zoo manifest {path} is not a map of agent entries; "
                        f"{restore_hint('manifest.json', path.parent)}")
    return manifest


def write_manifest(manifest: dict[str, dict], directory: Path | None = None) -> None:
    path = (directory or zoo_dir()) / "manifest.json"
    tmp = path.with_name(path.name + ".tmp")  # replaced in one step: a crash never leaves half a manifest
    tmp.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    tmp.replace(path)


#: what identifies an entry's agent: never changed after registration (a new agent is a new name)
IDENTITY_FIELDS = frozenset({"env", "algorithm", "preset", "command", "seed", "file", "sha256", "source_sha256",
                             "vecnormalize", "members", "clean_return", "total_timesteps", "trainer"})


def update_zoo_metadata(name: str, fields: dict, directory: Path | None = None) -> dict:
    """Replace descriptive fields of the existing entry ``name`` (a robustness table measured
    again, say), never what identifies its agent (:data:`IDENTITY_FIELDS`). Returns the entry."""
    touched = sorted(set(fields) & IDENTITY_FIELDS)
    if touched:
        raise ValueError(f"{', '.join(touched)} identify the agent of zoo entry {name!r} and are never replaced")
    manifest = load_manifest(directory)
    if name not in manifest:
        raise UserError(f"the zoo has no agent {name!r}")
    manifest[name] = {**manifest[name], **fields}
    write_manifest(manifest, directory)
    return manifest[name]


def check_new_zoo_name(name: str) -> None:
    """Refuse a zoo name that would write outside the zoo or replace an agent it holds: a name
    is lower-case letters, digits and dashes, and new."""
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", name):
        raise UserError(f"--zoo-name {name!r}: use lower-case letters, digits and dashes (e.g. cartpole-ppo-noise)")
    if name in load_manifest():
        raise UserError(f"--zoo-name {name}: the zoo already holds an agent of that name; choose a new name "
                        "(a zoo agent is never replaced)")


def zoo_entry(name: str) -> dict:
    """The manifest entry of ``name``; a :class:`UserError` lists the known names otherwise."""
    manifest = load_manifest()
    if name not in manifest:
        known = ", ".join(sorted(manifest)) or "none yet"
        if not manifest and os.environ.get("RLGAUNTLET_ZOO"):
            known = f"none: RLGAUNTLET_ZOO={os.environ['RLGAUNTLET_ZOO']} holds no manifest.json; unset it to use the installed zoo"
        raise UserError(f"no zoo agent named {name!r}; known: {known} (see `rlgauntlet zoo list`)")
    entry = manifest[name]
    files = [entry] + [entry[k] for k in ("vecnormalize",) if k in entry] + list(entry.get("members", []))
    if not all(isinstance(f, dict) and isinstance(f.get("file"), str) and isinstance(f.get("sha256"), str)
               and "/" not in f["file"] and "\\" not in f["file"]
               for f in files) or not isinstance(entry.get("env"), str):
        raise UserError(f"the zoo manifest's entry {name!r} lacks its env, files or sha256; "
                        f"{restore_hint('manifest.json')}")
    return entry


def _verified(info: dict) -> Path:
    from rlgauntlet.common.hashing import sha256_file

    path = zoo_dir() / info["file"]
    if not path.exists():
        raise UserError(f"zoo file {path} is missing; {restore_hint(info['file'])}")
    digest = sha256_file(path)
    if digest != info["sha256"]:
        raise UserError(
            f"zoo file {path} does not match its manifest sha256 ({digest[:12]} != {info['sha256'][:12]}); "
            "restore it from the repository or retrain it with its recorded command"
        )
    return path


def zoo_file(entry: dict, key: str = "file") -> Path:
    """Path of a zoo file (``file`` or ``vecnormalize``), verified against the sha256 in the manifest."""
    if key == "file" and "members" in entry:
        raise UserError("this zoo entry holds several files (ensemble members); load them with rlgauntlet.zoo.zoo_files")
    return _verified(entry if key == "file" else entry[key])


def zoo_files(entry: dict) -> list[Path]:
    """Every file of an entry (agent, statistics, ensemble members), each verified; the victim an
    attacker was trained against is checked to be the one the zoo holds."""
    infos = ([entry] if "file" in entry else []) + ([entry["vecnormalize"]] if "vecnormalize" in entry else [])
    infos += list(entry.get("members", []))
    paths = [_verified(i) for i in infos]
    if "members" in entry:
        listed = json.loads(paths[0].read_text())["members"]
        if [(m["file"], m["sha256"]) for m in listed] != [(m["file"], m["sha256"]) for m in entry["members"]]:
            raise UserError(f"the member list {paths[0].name} does not match the manifest's members; "
                            f"{restore_hint(paths[0].name)} and the manifest")
        paths = paths[1:]
    if "victim" in entry:
        victim = zoo_entry(entry["victim"]["name"])
        if victim.get("sha256") != entry["victim"]["sha256"]:
            raise UserError(
                f"this zoo entry was trained against {entry['victim']['name']} with sha256 "
                f"{entry['victim']['sha256'][:12]}, but the zoo now holds {str(victim.get('sha256'))[:12]}; "
                "retrain it against the current victim with its recorded command"
            )
    return paths


def _write_member_list(directory: Path, name: str, entry: dict) -> None:
    """Write an ensemble's member list (file, sha256, seed of each) as its ``file``."""
    from rlgauntlet.common.hashing import sha256_file

    target = directory / f"{name}.ensemble.json"
    members = [{"file": m["file"], "sha256": m["sha256"], "seed": m.get("seed")} for m in entry["members"]]
    target.write_text(json.dumps({"name": name, "members": members}, indent=2) + "\n")
    entry.update(file=target.name, sha256=sha256_file(target))


def _store_agent_file(src: Path, target: Path, write_file: Callable[[Path, Path], object]) -> dict:
    """Put one agent file into the zoo with ``write_file(src, target)`` (the trainer passes the
    adapters' writer of the form evaluation needs, ``victims.sb3_files.write_zoo_form``: the
    catalogue itself imports no adapter). Returns its manifest fields; the trained file's own
    sha256 stays on record as ``source_sha256``."""
    from rlgauntlet.common.hashing import sha256_file

    write_file(Path(src), target)
    return {"file": target.name, "sha256": sha256_file(target), "source_sha256": sha256_file(src)}


def _zoo_suffix(src: Path) -> str:
    return ".json" if Path(src).suffix == ".pkl" else Path(src).suffix


def add_zoo_entry(name: str, entry: dict, files: dict[str, Path] | None = None,
                  members: list[tuple[Path, dict]] | None = None, victim: str | None = None, *,
                  write_file: Callable[[Path, Path], object]) -> dict:
    """Put agent files into the zoo and write the manifest entry ``name``.

    Args:
        entry: the entry's fields (env, algorithm, preset, command, seed, clean return, ...).
        files: ``{"file": path}`` and optionally ``{"vecnormalize": path}``, stored as
            ``NAME.zip`` / ``NAME.vecnormalize.json`` (with ``write_file``).
        members: ensemble members ``(path, fields)``, stored as ``NAME.member-K.zip``.
        victim: the zoo agent this one was trained against (its sha256 is recorded).
        write_file: how a file is put into the zoo (the trainers pass
            ``victims.sb3_files.write_zoo_form``, which keeps only what evaluation reads).
    """
    directory = zoo_dir()
    directory.mkdir(parents=True, exist_ok=True)
    entry = dict(entry)
    for key, src in (files or {}).items():
        suffix = _zoo_suffix(src)
        target = directory / (f"{name}{suffix}" if key == "file" else f"{name}.{key}{suffix}")
        info = _store_agent_file(src, target, write_file)
        if key == "file":
            entry.update(info)
        else:
            entry[key] = info
    if members is not None:
        entry["members"] = []
        for k, (src, fields) in enumerate(members):
            target = directory / f"{name}.member-{k}{_zoo_suffix(src)}"
            entry["members"].append({**fields, **_store_agent_file(src, target, write_file)})
        _write_member_list(directory, name, entry)
    if victim is not None:
        entry["victim"] = {"name": victim, "sha256": zoo_entry(victim)["sha256"]}
    manifest = load_manifest()
    manifest[name] = entry
    write_manifest(manifest)
    return entry
