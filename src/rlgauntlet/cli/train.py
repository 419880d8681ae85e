"""``rlgauntlet train``, ``attack-train`` and ``dynamics-train``: the agents, attackers and models we train."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rlgauntlet.cli.common import (app, console, ALLOW_PICKLE, OTHER_ENV, agent_spec, KEPT, finite_number)
from rlgauntlet.common.outputs import check_run_dir
from rlgauntlet.errors import UserError


@app.command()
def train(
    preset: str = typer.Option(..., help="zoo preset to train. Example: --preset cartpole-ppo"),
    run_dir: Optional[Path] = typer.Option(None, help="checkpoint folder (default runs/PRESET); resumed if it holds one. Example: --run-dir runs/pong"),
    device: str = typer.Option("cpu", help="torch device for training. Example: --device cuda"),
    steps: Optional[int] = typer.Option(None, min=1, help="override the preset's training budget (agent steps). Example: --steps 200000"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads (1 is safe on a busy machine). Example: --threads 2"),
    stop_at_target: bool = typer.Option(True, help="stop when recent training episodes beat the target return. Example: --no-stop-at-target"),
    register: bool = typer.Option(True, help="copy the result into zoo/ and write its manifest entry (20-episode clean return). Example: --no-register"),
    seed: Optional[int] = typer.Option(None, help="override the preset's seed. Example: --seed 3"),
    init_from: Optional[str] = typer.Option(None, "--init-from", help="fine-tune from this agent's weights (zoo:NAME or sb3:PATH.zip). Example: --init-from zoo:cartpole-ppo"),
    threat: Optional[str] = typer.Option(None, help="train under this observation threat, applied after VecNormalize (ε as in evaluation). Example: --threat uniform_noise:eps=0.05"),
    zoo_name: Optional[str] = typer.Option(None, "--zoo-name", help="zoo name of the result (required with --seed, --init-from or --threat). Example: --zoo-name cartpole-ppo-noise"),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="unpickle as SB3 does: a pickled replay buffer of an earlier version, and the --init-from agent's VecNormalize .pkl; runs code stored in them, so only for files you trust. Example: --allow-pickle"),
    seeds: List[int] = typer.Option([], "--seeds", help="train these seeds as independent runs side by side (runs/PRESET for the preset's own seed, runs/PRESET-seedS for others), repeatable; none is registered. Example: --seeds 0 --seeds 1 --seeds 2"),
    workers: int = typer.Option(1, min=1, help="with --seeds: runs at a time (local worker processes, or CPUs of a local Ray head). Example: --workers 2"),
    executor: str = typer.Option("local", help="with --seeds: local (worker processes here) or ray. Example: --executor ray"),
    address: Optional[str] = typer.Option(None, help="with --seeds --executor ray: a running Ray cluster. Example: --address 10.0.0.5:6379"),
) -> None:
    """Train a zoo agent with its fixed recipe (SB3), with resumable checkpoints.

    Example: rlgauntlet train --preset cartpole-ppo
    """
    from rlgauntlet.training.zoo_training import plan_training, train as run_training, train_seeds

    if seeds:
        given = [name for name, value in (("--seed", seed), ("--run-dir", run_dir), ("--zoo-name", zoo_name),
                                          ("--init-from", init_from), ("--threat", threat)) if value is not None]
        if given:
            raise UserError(f"--seeds trains each seed in its own folder from the preset's start; drop {', '.join(given)}")
        from rlgauntlet.common.seeding import check_seeds

        check_seeds(seeds)  # before anything is printed or made
        KEPT["note"] = "each seed's last checkpoint is kept in its run folder; run the same command to resume them"
        console.print(f"training {preset} seeds {', '.join(map(str, seeds))}, {workers} at a time ({executor}); "
                      "none is registered in the zoo")
        results = train_seeds(preset, seeds, executor=executor, workers=workers, address=address, device=device,
                              steps=steps, threads=threads, stop_at_target=stop_at_target,
                              on_done=lambda r: console.print(f"seed {r['seed']} done: {r['checkpoint']}"))
        for r in results:
            console.print(f"seed {r['seed']}: {r['run_dir']}")
        return

    plan = plan_training(preset, run_dir, register, seed, init_from, threat, zoo_name, steps, stop_at_target)
    KEPT["note"] = f"the last checkpoint in {plan.run_dir} is kept; run the same command to resume from it"
    result = run_training(preset, plan=plan, register=register, seed=seed, init_from=init_from, threat=threat,
                          zoo_name=zoo_name, device=device, steps=steps, threads=threads, stop_at_target=stop_at_target,
                          allow_pickle=allow_pickle, log=lambda s: console.print(s), show_progress=console.is_terminal)
    entry = result["zoo_entry"]
    if entry is not None:
        kind = "ensemble" if plan.ensemble else "agent"
        console.print(f"zoo {kind} {result['zoo_name']}: clean return {entry['clean_return']['mean']:.1f} ± "
                      f"{entry['clean_return']['std']:.1f} over 20 episodes")


@app.command("attack-train")
def attack_train(
    method: str = typer.Option(..., help="paad (PA-AD director + gradient actor), sarl (the perturbation learned directly) or robust-sarsa (a smoothed Q function of a continuous-action agent, attacked with MinQ). Example: --method paad"),
    agent: str = typer.Option(..., help="the victim (frozen). Example: --agent zoo:cartpole-dqn"),
    env: str = typer.Option(..., help="Gymnasium id the victim plays. Example: --env CartPole-v1"),
    eps: str = typer.Option(..., help="l-inf budget in the victim's budget space (number or fraction); for robust-sarsa the budget of the final strength check. Example: --eps 0.1"),
    steps: int = typer.Option(..., min=1, help="director training steps (agent steps over all envs); for robust-sarsa the agent transitions Q learns from. Example: --steps 100000"),
    run_dir: Path = typer.Option(..., help="attacker folder (checkpoints, attacker.zip, manifest.json); resumed if it holds a checkpoint. Example: --run-dir runs/paad-cartpole"),
    seed: int = typer.Option(0, help="training seed; also the seed of the final evaluation. Example: --seed 3"),
    variant: Optional[str] = typer.Option(None, help="PA-AD variant: stochastic or deterministic (discrete agents), directional or continuous (continuous agents). Example: --variant deterministic"),
    actor_steps: int = typer.Option(1, min=1, help="PA-AD actor gradient steps (1 = FGSM, the paper's default). Example: --actor-steps 30"),
    lam: float = typer.Option(1.0, min=0.0, callback=finite_number, help="PA-AD lambda of the cosine term. Example: --lam 0.5"),
    loss: str = typer.Option("hinge", help="deterministic PA-AD actor loss: hinge or ce. Example: --loss ce"),
    eval_episodes: int = typer.Option(20, min=1, help="episodes of the final strength evaluation. Example: --eval-episodes 50"),
    vecnormalize: Optional[Path] = typer.Option(None, help="the victim's VecNormalize statistics file. Example: --vecnormalize agent.vecnormalize.pkl"),
    device: str = typer.Option("cpu", help="torch device. Example: --device cuda"),
    threads: Optional[int] = typer.Option(None, min=1, help="torch CPU threads (default: the thread policy). Example: --threads 2"),
    sarsa_eps: float = typer.Option(0.02, min=0.0, callback=finite_number, help="robust-sarsa: radius of the robustness regulariser on [x, a]. Example: --sarsa-eps 0.05"),
    sarsa_reg: float = typer.Option(0.1, min=0.0, callback=finite_number, help="robust-sarsa: weight of the robustness regulariser. Example: --sarsa-reg 1.0"),
    checkpoint_every: Optional[int] = typer.Option(None, min=1, help="director steps between resumable checkpoints (default: a tenth of --steps, at least 10000). Example: --checkpoint-every 20000"),
    setting: str = typer.Option("default", help="the director's PPO settings: default (one per env family), official (MuJoCo: the official code's adversary for that env) or official-attack (MuJoCo: the official attack scan's choice against SA-PPO, slower and reward-normalised; docs/decisions.md). Example: --setting official"),
    select: str = typer.Option("last", help="the director the attacker uses: last (the end of training) or best (the checkpoint whose training episodes left the agent lowest). Example: --select best"),
    recurrent: bool = typer.Option(False, "--recurrent", help="an LSTM director (sb3-contrib RecurrentPPO) that remembers the episode: for agents with a memory of their own. Example: --recurrent"),
    victim_samples: bool = typer.Option(False, "--victim-samples", help="in training the agent samples its actions from its policy, as the official adversary training runs it (evaluation stays deterministic). Example: --victim-samples"),
    allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """Train a learned attacker (PA-AD, SA-RL, Robust Sarsa) against an agent and measure it.

    Example: rlgauntlet attack-train --method paad --agent zoo:cartpole-dqn --env CartPole-v1 --eps 0.1 --steps 50000 --run-dir runs/paad-dqn
    """
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.threats.spec import parse_value

    budget = parse_value(eps, f"eps={eps}", "eps")  # a number or a fraction; the library checks the rest
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise UserError(f"--eps {eps}: give a positive number or fraction, e.g. --eps 0.1 or --eps 1/255")
    check_run_dir(run_dir)
    KEPT["note"] = f"the last checkpoint in {run_dir} is kept; run the same command to resume from it"
    spec = agent_spec(agent, vecnormalize=vecnormalize, device=device, allow_pickle=allow_pickle, other_env=other_env)
    manifest = train_attacker(spec, env, method, budget, steps, run_dir, seed=seed, variant=variant,
                              actor_steps=actor_steps, lam=lam, loss=loss, eval_episodes=eval_episodes, device=device,
                              threads=threads, log=lambda s: console.print(s),
                              show_progress=console.is_terminal, sarsa_eps=sarsa_eps, sarsa_reg=sarsa_reg,
                              checkpoint_every=checkpoint_every, setting=setting,
                              select=select, recurrent=recurrent, victim_samples=victim_samples)
    spec = f"robust_sarsa:q={run_dir},eps={eps}" if method == "robust-sarsa" else f"{method}:attacker={run_dir},eps={eps}"
    console.print(f"wrote {run_dir}; use it with --threat {spec}  (strength: {manifest['strength']['attacked_mean']:.1f})")


@app.command("dynamics-train")
def dynamics_train(
    agent: str = typer.Option(..., help="the victim whose behaviour half the data comes from (continuous actions). Example: --agent zoo:dmc-walker-stand-sac"),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env dm_control/walker-stand-v0"),
    samples: int = typer.Option(..., min=1, help="transitions (s, a, s') to learn from, half from the agent and half from a uniform random policy. Example: --samples 200000"),
    run_dir: Path = typer.Option(..., help="model folder (data.npz, checkpoint.pt, model.pt, manifest.json); resumed if it holds a run with the same settings. Example: --run-dir runs/dyn-walker"),
    epochs: int = typer.Option(30, min=1, help="passes over the training transitions. Example: --epochs 50"),
    hidden: int = typer.Option(1000, min=1, help="units per hidden layer (the paper's 1000). Example: --hidden 256"),
    layers: int = typer.Option(4, min=1, help="hidden layers (the paper's 4). Example: --layers 3"),
    seed: int = typer.Option(0, help="seed of the data episodes (seed + k) and of training. Example: --seed 1"),
    n_envs: int = typer.Option(4, min=1, help="envs stepped side by side while collecting. Example: --n-envs 8"),
    vecnormalize: Optional[Path] = typer.Option(None, help="the agent's VecNormalize statistics file. Example: --vecnormalize agent.vecnormalize.pkl"),
    threads: Optional[int] = typer.Option(None, min=1, help="torch CPU threads (default: the thread policy). Example: --threads 2"),
    allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """Learn the one-step dynamics model f(s, a) -> s' that model_obs / model_action plan with.

    Example: rlgauntlet dynamics-train --agent zoo:dmc-cartpole-balance-sac --env dm_control/cartpole-balance-v0 --samples 100000 --run-dir runs/dyn-cartpole
    """
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.envs import make_env
    from rlgauntlet.training.attackers.dynamics import learn_dynamics

    check_run_dir(run_dir)
    victim, preset = agent_spec(agent, vecnormalize=vecnormalize, allow_pickle=allow_pickle, other_env=other_env).load(env)
    KEPT["note"] = f"the collected data and the last epoch's checkpoint in {run_dir} are kept; run the same command to resume"
    with thread_policy(threads):
        manifest = learn_dynamics(victim, env, lambda: make_env(env, preset), samples, run_dir, seed=seed, hidden=hidden,
                                  layers=layers, epochs=epochs, n_envs=n_envs, log=lambda s: console.print(s))
    errors = ", ".join(f"{k}-step {v['mse']:.3g}" for k, v in manifest["k_step_error"].items() if v)
    console.print(f"wrote {run_dir}: test MSE {errors}; use it with --threat model_obs:model={run_dir},eps=...,target=...")
