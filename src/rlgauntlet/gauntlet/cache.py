"""The gauntlet's cache beside its store: one folder per agent (by the sha256 of its file) and
env, holding the learned attackers trained against it and the cached certification and checks,
so that a re-run, another level's run or another board reuses them.

Layout: ``STORE_FOLDER/gauntlet-cache/<first 16 hex of the agent's sha256>/<env>/`` holding
``<method>-eps<ε>[-<setting>][-<select>]-seed<s>-<protocol>-v<version>-<steps>steps/`` (one
attacker) and ``<what>-<protocol>-v<version>-seed<s>-<episodes>ep.json`` (certified, checks).

Example:
    >>> agent_cache(Path("runs/g.sqlite"), "ab" * 32, "CartPole-v1").as_posix()
    'runs/gauntlet-cache/abababababababab/CartPole-v1'
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from rlgauntlet.errors import UserError

#: the folder beside the store that holds trained attackers and cached results
CACHE_FOLDER = "gauntlet-cache"
#: what a cached certification or checks file is, in its mark (common.outputs)
CACHE_KIND = "gauntlet cache"


def safe_name(text: str) -> str:
    """``text`` as a file-name part (anything but letters, digits, ``._-`` becomes ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def agent_cache(store: Path, sha: str, env: str) -> Path:
    """The folder of one agent's (by sha256) trained attackers and cached results on ``env``,
    beside ``store``: ``gauntlet-cache/<first 16 hex of the sha256>/<env>/``."""
    return Path(store).parent / CACHE_FOLDER / sha[:16] / safe_name(env)


def attacker_folder(cache: Path, method: str, eps: str | None, setting: str, select: str, seed: int,
                    protocol: str, version: int, steps: int, recurrent: bool = False) -> Path:
    """The folder of one learned attacker in an agent's ``cache``: every choice that makes it
    another attacker is in its name (a Robust Sarsa Q function, ``eps`` None, serves every ε;
    an LSTM director is ``-lstm``)."""
    where = "q" if eps is None else f"eps{safe_name(eps)}"
    how = "".join(f"-{x}" for x in (setting, select) if x not in ("default", "last")) + ("-lstm" if recurrent else "")
    return cache / f"{method}-{where}{how}-seed{seed}-{protocol}-v{version}-{steps}steps"


def continue_shorter(folder: Path, source: Path, eps: float | None = None) -> bool:
    """Start the untrained director ``folder`` from ``source``, the same director trained to fewer
    steps (a longer budget's first stage, :attr:`~rlgauntlet.gauntlet.plan.AttackerTask.first_stage`):
    its checkpoint and best director are copied (``source`` stays as it was) and the progress says
    ``continued_from``; the training then resumes as an interrupted one does. Returns False, and
    copies nothing, where ``folder`` has started already.

    ``eps``: the budget ``folder``'s director goes on at, where ``source`` trained at another (a
    curriculum director's first stage): the progress's config takes it, ``continued_from`` keeps
    the first stage's, and the best director is not copied: it is tracked again from the first
    checkpoint at ``eps`` (its training returns at another budget are not comparable).

    Example:
        >>> continue_shorter(Path("nowhere/long"), Path("nowhere/short"))
        Traceback (most recent call last):
        ...
        rlgauntlet.errors.UserError: nowhere/short holds no trained director to go on from; remove nowhere/short (it is trained again) and run again
    """
    import shutil

    from rlgauntlet.training.attackers.attack_train import BEST
    from rlgauntlet.training.checkpoints import has_checkpoint
    from rlgauntlet.training.run_state import RUN_STATE

    if has_checkpoint(folder / "checkpoint") or (folder / "manifest.json").exists():
        return False
    try:
        progress = json.loads((source / "checkpoint" / "progress.json").read_text())
    except (OSError, ValueError):
        progress = None
    if not (isinstance(progress, dict) and progress.get("finished") and isinstance(progress.get("history"), list)
            and progress["history"] and has_checkpoint(source / "checkpoint")):
        raise UserError(f"{source} holds no trained director to go on from; remove {source} (it is trained "
                        "again) and run again")
    steps = int(progress["history"][-1]["steps"])
    config = progress.get("config") if isinstance(progress.get("config"), dict) else {}
    other_eps = eps is not None and config.get("eps") != float(eps)
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    # the protocol goes on from the first stage's weights with its envs and streams started afresh from
    # the seed, as every shipped continued director did: the first stage's run state is not carried over
    shutil.copytree(source / "checkpoint", tmp / "checkpoint", ignore=shutil.ignore_patterns(RUN_STATE))
    if (source / BEST).is_dir() and not other_eps:
        shutil.copytree(source / BEST, tmp / BEST)
    for done in ("finished", "applied", "input_shape", "input_bounds"):  # what the end of that run wrote
        progress.pop(done, None)
    progress["continued_from"] = {"folder": source.name, "steps": steps}
    progress["continuation_pending"] = True  # its first start is the continuation, not a resume
    if other_eps:
        progress["continued_from"]["eps"] = config.get("eps")
        progress["config"] = {**config, "eps": float(eps)}
        progress["best_tracked_from"] = steps
    (tmp / "checkpoint" / "progress.json").write_text(json.dumps(progress, indent=2))
    folder.mkdir(parents=True, exist_ok=True)
    for part in (tmp / BEST, tmp / "checkpoint"):  # the checkpoint last: once it is there, the run resumes
        if part.exists():
            part.rename(folder / part.name)
    shutil.rmtree(tmp)
    return True


def trained_seconds(store: Path, env: str) -> dict[str, list[float]]:
    """The training seconds of every attacker already trained on ``env`` in ``store``'s cache, by
    its folder's name: the same name against another agent is the same attacker (method, ε,
    settings, seed, protocol version and steps), so its seconds estimate an untrained one's.

    Example:
        >>> trained_seconds(Path("nowhere/g.sqlite"), "Hopper-v5")
        {}
    """
    seconds: dict[str, list[float]] = {}
    for manifest in sorted((Path(store).parent / CACHE_FOLDER).glob(f"*/{safe_name(env)}/*/manifest.json")):
        try:
            written = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue  # a manifest being written, or not ours: no measurement
        value = written.get("train_seconds") if isinstance(written, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            seconds.setdefault(manifest.parent.name, []).append(float(value))
    return seconds


def cache_file(plan: Any, what: str) -> Path:
    """Where the ``what`` (certified, checks) result of ``plan`` (a
    :class:`~rlgauntlet.gauntlet.plan.GauntletPlan`, which imports this module) is cached, beside its
    attackers: one file per protocol version, first seed and episode count."""
    p = plan.protocol
    return agent_cache(plan.store, plan.sha, plan.env) / \
        f"{what}-{p.name}-v{p.version}-seed{plan.seeds[0]}-{plan.settings.episodes}ep.json"


def cached(path: Path, compute: Callable[[], dict]) -> dict:
    """``compute()``, or what an earlier call wrote to ``path`` (a cache file of ours: marked; an
    earlier version's unmarked kind is read too). Any other file there is never replaced."""
    from rlgauntlet.common.outputs import JSON_KIND_KEY, output_kind, write_json

    if path.exists():
        kind = output_kind(path)
        if kind not in (CACHE_KIND, ""):
            raise UserError(f"{path} is in the gauntlet's cache folder but is not a cache file rlgauntlet wrote; it "
                            f"was left untouched: move it away, or give another --store")
        data = json.loads(path.read_text())
        return {k: v for k, v in data.items() if k not in ("generator", JSON_KIND_KEY)}
    data = compute()
    write_json(path, data, kind=CACHE_KIND)
    return data
