"""Certified figures (RADIAL-RL §4): Greedy Worst-Case Reward (GWC), action certification
rate (ACR), Absolute Worst-Case Reward (AWC), from interval bounds on the victim's outputs.

For an ℓ∞ budget ε (in the victim's budget space) IBP bounds every action score (Q-value or
logit) over the ball around the observation. An action is *feasible* when its upper bound
reaches the largest lower bound: no perturbation in the ball can make any other action the
argmax.

* GWC (Algorithm 2): every step, act with the feasible action of lowest nominal score.
  Episodes are run by the engine like any evaluation (episode k with seed seed + k).
* ACR: along the clean trajectory, the fraction of steps whose chosen action is certified
  (its lower bound above every other action's upper bound). With it, the medians over those
  steps of the score gap (best minus second-best nominal score) and of the certified margin
  (the chosen action's lower bound minus the others' largest upper bound; > 0 is certified),
  which say how far an uncertified agent is from certification.
* AWC (Algorithm 1): depth-first search over every sequence of feasible actions, with env
  snapshots, up to a node budget; the lowest return found. It bounds the worst case only for
  a deterministic policy and env, and only when the search finished.
* Continuous actions have no feasible set: the certified action deviation, the mean half
  width of the action box at ε (in action units) along the clean trajectory, stands in.

Example:
    >>> result = certify("zoo:cartpole-dqn", "CartPole-v1", eps="0.05", episodes=2)   # doctest: +SKIP
    >>> result["rows"][0]["gwc"]["return_mean"]                                      # doctest: +SKIP
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

from rlgauntlet.bounds import ibp
from rlgauntlet.bounds.certification import certified_margin, feasible_actions, score_bounds, score_gap
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env, restore, snapshot
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.threats.spec import parse_value
from rlgauntlet.victims.base import DelegatingVictim, PolicyOutput, Victim


class GreedyWorstCaseVictim(DelegatingVictim):
    """The victim acting with its worst feasible action at ε (GWC's policy, Algorithm 2)."""

    def __init__(self, victim: Victim, eps: float) -> None:
        if not victim.is_discrete:
            raise UserError("GWC needs discrete actions; continuous agents get the certified action deviation")
        super().__init__(victim)
        self.eps = eps
        self.description = {**victim.description, "certified": f"gwc:eps={eps}"}

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        nominal, lower, upper = score_bounds(self.victim, x, self.eps)
        # infeasible actions get a score above every feasible one (finite, as the engine checks)
        above = nominal.abs().max() * 2 + 1
        return PolicyOutput("q", q=torch.where(feasible_actions(lower, upper), nominal, above))

    def actions(self, out: PolicyOutput, deterministic: bool = True, noise=None) -> torch.Tensor:
        return out.q.argmin(dim=-1)


class _CertificationMeter(DelegatingVictim):
    """The victim acting as itself, counting along the way the steps whose action is certified
    and keeping each step's certified margin and score gap (discrete), or summing the action
    box's half width (continuous)."""

    def __init__(self, victim: Victim, eps: float) -> None:
        super().__init__(victim)
        self.eps = eps
        self.steps, self.certified, self.half_width = 0, 0, 0.0
        self.margins: list[torch.Tensor] = []
        self.gaps: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        out = self.victim.forward(x)
        with torch.no_grad():
            lower, upper = ibp(self.victim, x, self.eps)
            self.steps += x.shape[0]
            if self.victim.is_discrete:
                margin = certified_margin(out.scores(), lower, upper)
                self.certified += int((margin > 0).sum())
                self.margins.append(margin.double())
                self.gaps.append(score_gap(out.scores()).double())
            else:
                self.half_width += float(((upper - lower) / 2).mean(dim=-1).sum())
        return out


def absolute_worst_case(victim: Victim, env: gym.Env, seed: int, eps: float, max_nodes: int) -> dict:
    """AWC (Algorithm 1) from the episode seeded ``seed``: depth-first over feasible actions.

    Returns the lowest return found, the nodes (env steps) expanded and whether the search
    finished within ``max_nodes`` (only then is the return the worst case).
    """
    obs, _ = env.reset(seed=seed)
    stack = [(snapshot(env), obs, 0.0)]
    best, nodes, cut = float("inf"), 0, False
    while stack and not cut:
        snap, obs, ret = stack.pop()
        _, lower, upper = score_bounds(victim, victim.preprocess(np.asarray(obs)[None]), eps)
        for action in reversed(feasible_actions(lower, upper)[0].nonzero().flatten().tolist()):
            if nodes >= max_nodes:
                cut = True
                break
            restore(env, snap)
            obs2, reward, terminated, truncated, info = env.step(action)
            nodes += 1
            total = float(info["raw_return"]) if "raw_return" in info else ret + float(reward)
            if terminated or truncated:
                best = min(best, total)
            else:
                stack.append((snapshot(env), obs2, total))
    return {"return": best if best < float("inf") else None, "nodes": nodes, "finished": not cut and not stack}


def _check_finite_bounds(victim: Victim, env_fn: Callable[[], gym.Env], values: list[tuple[str, float]],
                         seed: int) -> None:
    """Refuse, before any episode, a budget whose bounds overflow (ε = 1e308 gives inf − inf)."""
    env = env_fn()
    try:
        obs, _ = env.reset(seed=seed)
    finally:
        env.close()
    x = victim.preprocess(np.asarray(obs)[None])
    with torch.no_grad():
        for text, value in values:
            lower, upper = ibp(victim, x, value)
            if not (torch.isfinite(lower).all() and torch.isfinite(upper).all()):
                raise UserError(f"--eps {text}: the bounds overflow at this budget (not finite); give a budget "
                                f"on the scale of the agent's {victim.budget_space} inputs")


def certify(
    agent: str | Victim, env: str, eps: str | float | None = None, eps_grid: str | None = None, episodes: int = 20,
    seed: int = 0, n_envs: int = 4, store: str | Path | ResultsStore | None = None, awc_max_nodes: int = 0,
    awc_horizon: int | None = None, preset: str | None = None,
    on_row: Callable[[dict], None] | None = None, threads: int | None = None,
) -> dict:
    """Certified figures of an agent at each budget (``eps`` or the budgets of ``eps_grid``).

    Each ε is a ``certification`` run in the store: its episodes are GWC's (discrete agents),
    its metrics ``acr`` (or ``certified_action_deviation``), and with ``awc_max_nodes`` > 0
    ``awc`` (lowest return per episode as trials), ``awc_nodes`` and ``awc_finished``.
    ``awc_horizon`` caps the episodes of the AWC search (and of GWC, so that the two compare).
    ``agent`` is an ``AgentSpec`` (the agent and how to load it), a spec string or a Victim (with
    ``preset``, the env preset, when given directly); ``threads`` the thread policy's count.
    """
    from rlgauntlet.experiments.agents import open_job
    from rlgauntlet.experiments.runs import check_seed, run_evaluation

    if (eps is None) == (eps_grid is None):
        raise UserError("give one of --eps or --eps-grid (budgets in the agent's budget space, e.g. --eps 1/255)")
    budgets = [eps] if eps is not None else [v for v in str(eps_grid).split(",") if v.strip()]
    values = []
    for b in budgets:
        v = parse_value(str(b), f"--eps {b}", "eps")
        if isinstance(v, (bool, str, list)) or not np.isfinite(v) or v < 0:
            raise UserError(f"--eps {b}: give a finite budget ≥ 0, e.g. --eps 1/255")
        values.append((str(b).strip(), float(v)))
    if not values:
        raise UserError(f"--eps-grid {eps_grid!r} holds no budget; give comma-separated budgets, e.g. --eps-grid 0,1/255")
    check_seed(seed, episodes)
    with open_job(agent, env, store, threads, preset) as job:
        victim, env_preset = job.victim, job.preset
        if victim.budget_space is None:
            raise UserError("eps has no unit because the agent's input space is unknown; pass --input-space")
        try:
            victim.layer_chain()
        except NotImplementedError as exc:
            raise UserError(f"this agent cannot be certified: {exc}") from None
        env_info = {"id": env, "preset": env_preset}

        def env_fn() -> gym.Env:
            made = make_env(env, env_preset)
            return gym.wrappers.TimeLimit(made, awc_horizon) if awc_horizon else made

        if awc_max_nodes > 0 and not victim.is_discrete:
            raise UserError("AWC searches over discrete actions; drop --awc-max-nodes for continuous agents")
        _check_finite_bounds(victim, env_fn, values, seed)
        results = job.store  # created only now: a refused certification leaves no store behind
        rows = []
        for text, value in values:
            start = time.perf_counter()
            meter = _CertificationMeter(victim, value)
            clean = evaluate_episodes(env_fn, meter, None, range(episodes), seed, n_envs=n_envs)
            row: dict = {"eps": text, "eps_value": value, "budget_space": victim.budget_space,
                         "nominal": float(np.mean([r.episode_return for r in clean]))}
            if victim.is_discrete:
                summary = run_evaluation(results, env_fn, env_info, GreedyWorstCaseVictim(victim, value), None, episodes,
                                         seed, n_envs=n_envs, resume=True, label=f"gwc:eps={text}", kind="certification")
                run_id = summary["run_id"]
                row["gwc"] = summary  # the evaluation summary of the GWC episodes
                row["acr"] = meter.certified / meter.steps
                # why a step is not certified: its score gap against the bounds' width (median over steps)
                row["score_gap_median"] = float(torch.cat(meter.gaps).median())
                row["certified_margin_median"] = float(torch.cat(meter.margins).median())
                results.add_metric(run_id, "acr", row["acr"], "fraction of clean-trajectory steps")
                results.add_metric(run_id, "score_gap_median", row["score_gap_median"],
                                   "score units (best minus second-best Q-value or logit, clean trajectory)")
                results.add_metric(run_id, "certified_margin_median", row["certified_margin_median"],
                                   "score units (chosen action's lower bound minus the others' largest upper bound)")
                summary["metrics"] = results.metrics(run_id)
            else:
                meta = {"agent": victim.description, "env": env_info, "eps": text, "seed": seed, "episodes": episodes}
                run_id = results.create_run(run_key({**meta, "kind": "certification"}), meta, kind="certification")
                row["certified_action_deviation"] = meter.half_width / meter.steps
                results.add_metric(run_id, "certified_action_deviation", row["certified_action_deviation"],
                                   "action units (mean half width of the action box)")
            if awc_max_nodes > 0:
                searches = [absolute_worst_case(victim, env_fn(), seed + k, value, awc_max_nodes) for k in range(episodes)]
                row["awc"] = {"returns": [s["return"] for s in searches], "nodes": [s["nodes"] for s in searches],
                              "finished": [s["finished"] for s in searches],
                              "valid_bound": "a lower bound on the worst case only where finished, and only because "
                                             "the agent acts deterministically and the env is deterministic given its seed"}
                done = [s["return"] for s in searches if s["finished"] and s["return"] is not None]
                row["awc"]["mean_finished"] = float(np.mean(done)) if done else None  # over finished searches
                row["awc"]["finished_count"] = len(done)
                results.add_metric(run_id, "awc", float(np.mean(done)) if done else None, "return",
                                   trials=[s["return"] if s["return"] is not None else float("nan") for s in searches])
                results.add_metric(run_id, "awc_nodes", float(sum(row["awc"]["nodes"])), "env steps searched")
                results.add_metric(run_id, "awc_finished", float(np.mean(row["awc"]["finished"])), "fraction of episodes")
            row["run_id"], row["wall_seconds"] = run_id, time.perf_counter() - start
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return {"agent": victim.description, "env": env_info, "episodes": episodes, "seed": seed,
            "awc_horizon": awc_horizon, "rows": rows}
