"""The catalogue of the field's published robust agents: the SA-PPO / ATLA / PA-ATLA / WocaR MuJoCo
releases, in the policy_gradients format (``pg:PATH.model``, read as data by
:mod:`rlgauntlet.victims.pg_release`), and SA-DQN's Atari Q-networks (``"format": "sa_dqn"``,
read by :mod:`rlgauntlet.victims.sa_dqn` on SA-DQN's own frames, ``SADQN/GAME-v0``).

``releases.json`` lists every known release file: its name here (``METHOD-ENV``, e.g.
``sa-ppo-hopper``), the repository and path, the sha256 of the released file, the method and the
label results give it (``PPO (released)``), the policy (mlp or lstm), the gym task it was trained
on and the Gymnasium task it runs on here (for the MuJoCo releases, that gym task as MuJoCo 1.5 simulated it: :mod:`rlgauntlet.envs.mujoco15`), the
paper's ε for that env, the authors' attacker released beside it (path and sha256), and the
README's natural and strongest-attack returns where the README prints them. A file is identified by
its sha256, or, where the file itself could not be read when it was catalogued (git's snapshot
kept only its repository's tree), by the git blob id that tree records (``git_blob``).

The weights are never part of rlgauntlet (the repositories carry no license): ``published:NAME``
resolves to the user's local clone, found under ``$RLGAUNTLET_RELEASES`` (a folder holding one
clone per repository, by its name: ``ATLA_robust_RL/``, ``paad_adv_rl/``), default
``~/rlgauntlet-releases``. A missing clone is one line giving the ``git clone`` to run; a file
whose sha256 differs from the catalogue's is refused. This module reads the catalogue only.

May import: common, errors (no adapter: ``victims`` turns a resolved file into an agent).

Example:
    >>> entry = release("sa-ppo-hopper")
    >>> entry["env"], entry["eps"], entry["readme"]["natural"]
    ('HopperMuJoCo15-v4', 0.075, 3704.5)
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from rlgauntlet.errors import UserError

CATALOGUE = Path(__file__).with_name("releases.json")
#: the published board's results shipped with the package, one file per protocol version
#: (``{protocol}-v{version}.json``): numbers only, never weights (see :func:`shipped_results`)
SHIPPED = Path(__file__).with_name("results")
#: the shipped results' format (a file of another format is refused by name)
SHIPPED_FORMAT = 1
DEFAULT_ROOT = Path("~/rlgauntlet-releases")


@lru_cache(maxsize=1)
def catalogue() -> dict:
    """The catalogue as data (``releases.json``)."""
    return json.loads(CATALOGUE.read_text())


def method_label(name: str) -> str | None:
    """What results call the method of the release ``name`` when no method is given: its catalogue
    label (``PPO (released)``, as the boards name it); None for a name the catalogue lacks.

    Example:
        >>> method_label("sa-ppo-hopper"), method_label("no-such-release")
        ('SA-PPO (released)', None)
    """
    return next((e.get("label") for e in catalogue()["releases"] if e["name"] == name), None)


def releases() -> list[dict]:
    """Every known release, in the catalogue's order."""
    return list(catalogue()["releases"])


def release(name: str) -> dict:
    """The release called ``name``, or a :class:`UserError` listing the names."""
    for entry in catalogue()["releases"]:
        if entry["name"] == name:
            return entry
    names = ", ".join(e["name"] for e in catalogue()["releases"])
    raise UserError(f"published:{name} is not in the catalogue; `rlgauntlet published list` shows them ({names})")


def releases_root() -> Path:
    """Where the clones are: ``$RLGAUNTLET_RELEASES``, else ``~/rlgauntlet-releases``."""
    return Path(os.environ.get("RLGAUNTLET_RELEASES") or DEFAULT_ROOT).expanduser()


def clone_command(repository: str, root: Path | None = None) -> str:
    """The ``git clone`` that puts ``repository`` where :func:`local_file` looks for it."""
    url = catalogue()["repositories"][repository]
    return f"git clone {url} {(root or releases_root()) / repository.split('/')[1]}"


def commit_of(repository: str) -> str | None:
    """The commit of ``repository`` whose files the catalogue's sha256 describe."""
    return catalogue().get("commits", {}).get(repository)


def local_problem(entry: dict, which: str = "agent", root: Path | None = None) -> tuple[str, str] | None:
    """Why the user's local copy of ``entry``'s file (``which="attacker"``: the authors' attacker)
    under ``root`` (default :func:`releases_root`) cannot be used, as (short reason, the whole
    one-line message with its fix), or None when it can."""
    from rlgauntlet.common.hashing import git_blob_id, sha256_file

    root = Path(root) if root is not None else releases_root()
    where = (f"RLGAUNTLET_RELEASES={os.environ['RLGAUNTLET_RELEASES']}" if os.environ.get("RLGAUNTLET_RELEASES")
             else f"{root} (the default clones folder)")
    if root.exists() and not root.is_dir():
        return "clones folder is a file", (f"{where} is a file, not a folder; point RLGAUNTLET_RELEASES at the folder "
                                           "holding your clones (ATLA_robust_RL/, paad_adv_rl/)")
    repository = entry["repository"]
    clone = root / repository.split("/")[1]
    item = entry if which == "agent" else entry.get("attacker")
    if item is None:
        return "no attacker", f"published:{entry['name']} has no attacker released beside it"
    if clone.exists() and not clone.is_dir():
        return "clone path is a file", (f"{clone} is a file, not a clone of {repository}; move it away, then run "
                                        f"`{clone_command(repository, root)}`")
    if not clone.is_dir():
        return "no clone", (f"published:{entry['name']} needs a local clone of {repository}: run "
                            f"`{clone_command(repository, root)}` (or set RLGAUNTLET_RELEASES to the folder holding "
                            "your clones)")
    path = clone / item["path"]
    commit = commit_of(repository)
    restore = (f"`git -C {clone} checkout {commit} -- {item['path']}` restores the released file"
               if commit else f"`git -C {clone} checkout -- {item['path']}` restores it")
    if not path.is_file():
        return "file missing", f"{path} is missing from your clone of {repository}; {restore}"
    if item.get("sha256"):
        kind, want, found = "sha256", item["sha256"], sha256_file(path)
    else:  # a release only its repository's tree describes (the file was not readable here)
        kind, want, found = "git blob id", item["git_blob"], git_blob_id(path)
    if found != want:
        return "another version", (f"{path} has {kind} {found[:12]}…, the catalogue's release has {want[:12]}…: "
                                   f"another version of the file, or edited; {restore} (discarding local edits to it)")
    return None


def local_file(entry: dict, which: str = "agent") -> Path:
    """The user's local copy of ``entry``'s agent file (``which="attacker"``: the authors'
    attacker released beside it), checked against the catalogue's sha256."""
    problem = local_problem(entry, which)
    if problem is not None:
        raise UserError(problem[1])
    item = entry if which == "agent" else entry["attacker"]
    return releases_root() / entry["repository"].split("/")[1] / item["path"]


def fetch_plan(root: Path | None = None) -> list[dict]:
    """What ``rlgauntlet published fetch`` does for each repository of the catalogue, in its
    order: ``repository``, ``url``, ``folder`` (under ``root``, default :func:`releases_root`), the
    catalogue's ``commit``, ``state`` (``cloned``: the folder exists and is left as it is;
    ``missing``: to clone; ``in the way``: a file or a folder that is not a git clone sits where
    the clone goes) and the ``commands`` that make a missing clone (``git clone`` of the
    repository, then ``git checkout`` of the catalogue's commit, whose files its sha256 describe).

    Example:
        >>> [row["repository"] for row in fetch_plan(Path("clones"))][:2]
        ['huanzhang12/ATLA_robust_RL', 'umd-huang-lab/paad_adv_rl']
    """
    root = Path(root) if root is not None else releases_root()
    rows = []
    for repository, url in catalogue()["repositories"].items():
        folder = root / repository.split("/")[1]
        commit = commit_of(repository)
        if folder.is_dir() and (folder / ".git").exists():
            state = "cloned"
        elif folder.exists():
            state = "in the way"
        else:
            state = "missing"
        commands = [["git", "clone", "--quiet", url, str(folder)]]
        if commit:
            commands.append(["git", "-c", "advice.detachedHead=false", "-C", str(folder), "checkout", "--quiet", commit])
        rows.append({"repository": repository, "url": url, "folder": str(folder), "commit": commit, "state": state,
                     "commands": commands})
    return rows


def fetch(root: Path | None = None, run=None) -> list[dict]:
    """Clone every repository of the catalogue that ``root`` lacks (:func:`fetch_plan`), at the
    catalogue's commit, then check every release file's sha256 (:func:`local_problem`). A clone
    that exists is never touched (it is the user's); something else where a clone goes is refused
    before anything runs. ``run`` runs one command (default ``subprocess.run``, checked). Returns
    one row per release: ``name``, ``repository``, ``ok`` and, where not, ``problem``."""
    import subprocess

    plan = fetch_plan(root)
    blocked = [row for row in plan if row["state"] == "in the way"]
    if blocked:
        raise UserError(f"{blocked[0]['folder']} is in the way of the clone of {blocked[0]['repository']}: it is not a "
                        "git clone; move it away, or set RLGAUNTLET_RELEASES to another folder")
    run = run or (lambda command: subprocess.run(command, check=True, capture_output=True, text=True))
    for row in plan:
        if row["state"] != "missing":
            continue
        Path(row["folder"]).parent.mkdir(parents=True, exist_ok=True)
        for command in row["commands"]:
            try:
                run(command)
            except (subprocess.CalledProcessError, OSError) as exc:
                detail = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()
                raise UserError(f"`{' '.join(command)}` failed ({detail[-1] if detail else type(exc).__name__}); the "
                                f"clone of {row['repository']} is not complete: remove {row['folder']} and run "
                                "`rlgauntlet published fetch --run` again") from None
    checked = []
    for entry in releases():
        problem = local_problem(entry, root=root)
        checked.append({"name": entry["name"], "repository": entry["repository"], "ok": problem is None,
                        **({"problem": problem[1]} if problem else {})})
    return checked


def shipped_versions() -> list[tuple[str, int]]:
    """The (protocol, version) pairs whose published-board results ship with this package."""
    found = []
    for path in sorted(SHIPPED.glob("*-v*.json")):
        name, _, version = path.stem.rpartition("-v")
        if name and version.isdigit():
            found.append((name, int(version)))
    return found


def shipped_results(protocol: str, version: int) -> dict | None:
    """The published board's results under ``protocol`` v``version`` as shipped (``entries``: one
    per agent, with its identity, its scores and the leaderboard's metrics; ``board``: the boards
    it was computed from; ``rlgauntlet_version``), or None when none ship for that version."""
    path = SHIPPED / f"{protocol}-v{version}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if data.get("format") != SHIPPED_FORMAT or data.get("protocol") != protocol or data.get("version") != version:
        raise UserError(f"{path.name}, shipped with this rlgauntlet, is not the results of {protocol} v{version} in "
                        f"format {SHIPPED_FORMAT}; reinstall rlgauntlet")
    return data
