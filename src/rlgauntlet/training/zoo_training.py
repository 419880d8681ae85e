"""The ``rlgauntlet train`` job as a library call: train a zoo preset (an ensemble's members
too), resumably, in its run folder, and put the result into the zoo.

Example:
    >>> from rlgauntlet.training.zoo_training import plan_training, train   # doctest: +SKIP
    >>> result = train("cartpole-ppo", register=False)             # doctest: +SKIP
    >>> result["checkpoints"]                                       # doctest: +SKIP
    ['runs/cartpole-ppo/checkpoint']
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from rlgauntlet.common.outputs import check_run_dir
from rlgauntlet.errors import UserError


@dataclass(frozen=True)
class TrainingPlan:
    """What a training run will do, decided (and checked) before any step is taken."""

    preset: str
    run_dir: Path
    zoo_name: str | None  # the zoo entry it will write (None: not registered)
    command: str  # the command that reproduces it, recorded in the zoo manifest
    ensemble: bool


def plan_training(preset: str, run_dir: str | Path | None = None, register: bool = True, seed: int | None = None,
                  init_from: str | None = None, threat: str | None = None, zoo_name: str | None = None,
                  steps: int | None = None, stop_at_target: bool = True) -> TrainingPlan:
    """Check the options and decide the run folder (default ``runs/PRESET[-seedS][-ZOONAME]``)
    and the zoo entry, before anything is trained. An agent trained with another seed, from
    another agent or under a threat is not the preset's zoo agent: it needs its own ``zoo_name``.
    The recorded command carries every option that changes the result (a budget too)."""
    from rlgauntlet.training.recipes import get_preset
    from rlgauntlet.zoo import check_new_zoo_name

    from rlgauntlet.training.recipes import ATLA_PRESETS

    recipe = get_preset(preset)
    if seed is not None:
        from rlgauntlet.common.seeding import check_seeds

        check_seeds([seed], option="--seed")
    if preset in ATLA_PRESETS and (init_from is not None or threat is not None):
        raise UserError(f"{preset} trains its agent against its own adversary from the preset's start; drop "
                        "--init-from and --threat")
    if zoo_name is not None:
        check_new_zoo_name(zoo_name)
    changed = [f"--{k} {v}" for k, v in (("seed", seed), ("init-from", init_from), ("threat", threat)) if v is not None]
    if changed and register and zoo_name is None:
        raise UserError(f"an agent trained with {' '.join(changed)} is not the preset's zoo agent; "
                        "give --zoo-name NAME for its zoo entry, or --no-register")
    ensemble = recipe.members > 1
    if ensemble and (init_from is not None or threat is not None):
        raise UserError("an ensemble preset trains its members from scratch; drop --init-from and --threat")
    if init_from is not None:  # the agent to start from is found and read as data before any folder is made
        from rlgauntlet.training.kit import agent_files
        from rlgauntlet.victims.sb3_files import read_sb3_zip

        read_sb3_zip(agent_files(init_from)[0])
    suffix = "".join(f"-{k}" for k in (f"seed{seed}" if seed is not None else None, zoo_name) if k)
    folder = check_run_dir(Path(run_dir) if run_dir is not None else Path("runs") / f"{preset}{suffix}")
    budget = [f"--steps {steps}"] if steps is not None else []
    budget += ["--no-stop-at-target"] if not stop_at_target and recipe.stop_at_target else []
    command = " ".join(["rlgauntlet train --preset", preset, *changed, *budget]
                       + ([f"--zoo-name {zoo_name}"] if zoo_name else []))
    return TrainingPlan(preset, folder, (zoo_name or preset) if register else None, command, ensemble)


def train(preset: str, run_dir: str | Path | None = None, *, register: bool = True, seed: int | None = None,
          init_from: str | None = None, threat: str | None = None, zoo_name: str | None = None,
          device: str = "cpu", steps: int | None = None, threads: int = 1, stop_at_target: bool = True,
          allow_pickle: bool = False, log: Callable[[str], None] = print, show_progress: bool = False,
          plan: TrainingPlan | None = None) -> dict:
    """Train (or resume) preset ``preset`` and, with ``register``, put it into the zoo with its
    20-episode clean return. Returns ``{"run_dir", "checkpoints", "zoo_entry"}`` (the entry is
    None when not registered)."""
    plan = plan or plan_training(preset, run_dir, register, seed, init_from, threat, zoo_name, steps, stop_at_target)
    options = dict(device=device, total_timesteps=steps, threads=threads, stop_at_target=stop_at_target, log=log,
                   show_progress=show_progress, seed=seed, init_from=init_from, threat=threat,
                   allow_pickle=allow_pickle)
    created = not Path(plan.run_dir).exists()
    try:
        return _train(plan, preset, zoo_name, seed, steps, device, threads, log, show_progress, options)
    except UserError:  # refused once the work began (an agent that does not fit): leave no empty folder behind
        if created and Path(plan.run_dir).is_dir() and not any(Path(plan.run_dir).iterdir()):
            Path(plan.run_dir).rmdir()
        raise


def _train(plan: TrainingPlan, preset: str, zoo_name: str | None, seed: int | None, steps: int | None, device: str,
           threads: int, log: Callable[[str], None], show_progress: bool, options: dict) -> dict:
    """The training :func:`train` planned: an ensemble, ATLA alternation or one SB3 run."""
    from rlgauntlet.training.defences.atla import run_agent, train_atla
    from rlgauntlet.training.recipes import ATLA_PRESETS
    from rlgauntlet.training.register import member_solves, register_zoo_agent, register_zoo_ensemble
    from rlgauntlet.training.sb3_train import train_ensemble, train_preset

    entry = None
    if plan.ensemble:
        del options["init_from"], options["threat"]
        checkpoints, rejected = train_ensemble(preset, plan.run_dir, solves=lambda ckpt: member_solves(preset, ckpt),
                                               **options)
        if plan.zoo_name is not None:
            entry = register_zoo_ensemble(preset, checkpoints, command=plan.command, zoo_name=zoo_name,
                                          rejected=rejected)
    elif preset in ATLA_PRESETS:  # the agent and its adversary in alternation; the agent is what the zoo gets
        train_atla(preset, plan.run_dir, total_agent_steps=steps, seed=seed, device=device, log=log,
                   show_progress=show_progress, threads=threads)
        checkpoints = [run_agent(preset, plan.run_dir, for_zoo=plan.zoo_name is not None)]
        if plan.zoo_name is not None:
            entry = register_zoo_agent(preset, checkpoints[0], zoo_name=zoo_name, command=plan.command)
    else:
        checkpoints = [train_preset(preset, plan.run_dir, **options)]
        if plan.zoo_name is not None:
            entry = register_zoo_agent(preset, checkpoints[0], zoo_name=zoo_name, command=plan.command)
    return {"run_dir": str(plan.run_dir), "checkpoints": [str(c) for c in checkpoints], "zoo_entry": entry,
            "zoo_name": plan.zoo_name}


def seed_run_dir(preset: str, seed: int, runs: str | Path = "runs") -> Path:
    """Where seed ``seed`` of ``preset`` trains: ``runs/PRESET`` for the preset's own seed (the run
    ``rlgauntlet train --preset PRESET`` resumes), ``runs/PRESET-seedS`` for another (the one
    ``--seed S`` resumes)."""
    from rlgauntlet.training.recipes import get_preset

    own = get_preset(preset).seed
    return Path(runs) / (preset if seed == own else f"{preset}-seed{seed}")


@dataclass(frozen=True)
class SeedTask:
    """One seed of a preset to train in a worker process (everything the worker needs)."""

    preset: str
    seed: int
    run_dir: str
    device: str
    steps: int | None
    threads: int
    stop_at_target: bool


def _train_seed(task: SeedTask) -> dict:
    from rlgauntlet.training.recipes import get_preset

    own = get_preset(task.preset).seed
    result = train(task.preset, task.run_dir, register=False, seed=None if task.seed == own else task.seed,
                   device=task.device, steps=task.steps, threads=task.threads, stop_at_target=task.stop_at_target,
                   log=lambda line: print(f"[seed {task.seed}] {line}", flush=True))
    return {"seed": task.seed, "run_dir": result["run_dir"], "checkpoint": result["checkpoints"][0]}


def train_seeds(preset: str, seeds: Sequence[int], runs: str | Path = "runs", executor: str = "local",
                workers: int = 1, address: str | None = None, device: str = "cpu", steps: int | None = None,
                threads: int = 1, stop_at_target: bool = True,
                on_done: Callable[[dict], None] | None = None) -> list[dict]:
    """Train (or resume) seeds ``seeds`` of ``preset`` as independent runs, side by side on
    ``executor`` (``local`` worker processes, or ``ray``), each in :func:`seed_run_dir`. None
    is registered in the zoo: which seed represents a method is chosen afterwards (for the
    Hopper defences, by robustness: benchmarks/robust_hopper.py). Returns each seed's
    ``{"seed", "run_dir", "checkpoint"}`` in seed order."""
    from rlgauntlet.common.executors import check_executor, make_executor

    from rlgauntlet.common.seeding import check_seeds

    seeds = check_seeds(seeds)
    check_executor(executor, workers, address)
    tasks = []
    for seed in seeds:
        folder = seed_run_dir(preset, seed, runs)
        plan_training(preset, folder, register=False, seed=seed, steps=steps, stop_at_target=stop_at_target)
        tasks.append(SeedTask(preset, seed, str(folder), device, steps, threads, stop_at_target))
    done: dict[int, dict] = {}

    def finished(task: SeedTask, result: dict) -> None:
        done[task.seed] = result
        if on_done is not None:
            on_done(result)

    with make_executor(executor, workers, address) as pool:
        pool.run(_train_seed, tasks, finished)
    return [done[seed] for seed in seeds]
