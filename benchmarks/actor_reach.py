"""How far an ε-bounded perturbation can move an agent's action: PA-AD's actor against a ceiling.

For each agent, 100 states of a clean greedy episode (every 4th of the first 400 steps, env seed 0)
and one random direction per state (seed 0): the action-mean change ‖μ(x̃) − μ(x)‖₂ and its cosine
with the direction that PA-AD's FGSM actor reaches (the gauntlet's directors act through it), and
the largest change that 100 signed-gradient steps (step ε/10, from a uniform random start in the
ball) find. A smooth agent (a small ceiling) can only be beaten by a director that compounds
small changes over an episode, whatever the actor. A recurrent (LSTM) agent acts at each of those
states from its memory of the clean episode so far: the perturbation moves only the current input,
the one-step reach (a director also moves the memory, step by step).

    RLGAUNTLET_RELEASES=… python benchmarks/actor_reach.py --agents published:ppo-ant published:sa-ppo-ant \
        --env AntMuJoCo15-v4 --eps 0.15

Writes benchmarks/results/actor_reach.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import open_job
from rlgauntlet.threats.learned.actor import AttackActor, policy_vector

OUT = Path(__file__).parent / "results" / "actor_reach.json"


def clean_states(job, steps: int = 400, every: int = 4) -> tuple[torch.Tensor, list | None]:
    """Victim inputs (N, D) along a greedy episode from env seed 0 (reset with seed t+1 on an end),
    and a recurrent victim's memory before each of them (None for a memoryless one)."""
    victim, env = job.victim, job.env_fn()
    obs, _ = env.reset(seed=0)
    inputs, memories = [], []
    state = victim.initial_state() if victim.recurrent else None
    with torch.no_grad():
        for t in range(steps):
            x = victim.preprocess(obs[None])
            inputs.append(x)
            if victim.recurrent:
                memories.append(state)
                victim.use_state([state])
            obs, _, terminated, truncated, _ = env.step(victim.actions(victim.forward(x)).numpy()[0])
            if victim.recurrent:
                state = victim.advance_state(x)[0]
            if terminated or truncated:
                obs, _ = env.reset(seed=t + 1)
                state = victim.initial_state() if victim.recurrent else None
    env.close()
    return torch.cat(inputs)[::every], (memories[::every] if victim.recurrent else None)


def largest_change(victim, x: torch.Tensor, clean: torch.Tensor, eps: float, steps: int = 100) -> torch.Tensor:
    """Per row, the largest ‖μ(x + δ) − μ(x)‖₂ seen by signed-gradient ascent in the ℓ∞ ball."""
    generator = torch.Generator().manual_seed(0)
    delta = (torch.rand(x.shape, generator=generator) * 2 - 1) * eps
    best = torch.zeros(x.shape[0])
    for _ in range(steps):
        delta.requires_grad_(True)
        change = (victim.forward(x + delta).central_action() - clean).norm(dim=-1)
        best = torch.maximum(best, change.detach())
        (grad,) = torch.autograd.grad(change.sum(), delta)
        delta = (delta.detach() + eps / 10 * grad.sign()).clamp(-eps, eps)
    return best


def reach(agent: str, env_id: str, eps: float) -> dict:
    with open_job(agent, env_id) as job:
        victim = job.victim
        x, memories = clean_states(job)
        if memories is not None:  # every forward below reads these, one per row
            victim.use_state(memories)
        directions = torch.randn(x.shape[0], victim.action_space.shape[0], generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            clean = policy_vector(victim.forward(x))
        rng = BatchRNG([torch.Generator().manual_seed(k) for k in range(x.shape[0])])
        perturbed = AttackActor("directional", eps).perturb(x, victim, directions, rng)
        with torch.no_grad():
            change = policy_vector(victim.forward(perturbed)) - clean
        ceiling = largest_change(victim, x, clean, eps)
        return {"agent": agent, "env": env_id, "eps": eps, "states": int(x.shape[0]), "recurrent": victim.recurrent,
                "clean_action_norm": float(clean.norm(dim=-1).mean()),
                "fgsm_change": float(change.norm(dim=-1).mean()),
                "fgsm_cosine": float(torch.nn.functional.cosine_similarity(change, directions, dim=-1).mean()),
                "ceiling_change_mean": float(ceiling.mean()), "ceiling_change_max": float(ceiling.max())}


def merged(path: Path, rows: list[dict]) -> list[dict]:
    """The rows already in ``path`` with these added, a row of the same agent, env and ε replaced
    (a run for some agents keeps the others' measurements)."""
    def key(row: dict) -> tuple:
        return row["agent"], row["env"], row["eps"]

    try:
        kept = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        kept = []
    new = {key(row) for row in rows}
    return [row for row in kept if isinstance(row, dict) and key(row) not in new] + rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", required=True)
    parser.add_argument("--env", required=True)
    parser.add_argument("--eps", type=float, required=True)
    args = parser.parse_args()
    try:
        rows = [reach(agent, args.env, args.eps) for agent in args.agents]
    except UserError as error:  # a bad agent or env: one line, no traceback
        print(f"actor_reach: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for row in rows:
        print(f"{row['agent']}: FGSM |Δμ| {row['fgsm_change']:.3f} (cos {row['fgsm_cosine']:.2f}), "
              f"ceiling {row['ceiling_change_mean']:.3f} (max {row['ceiling_change_max']:.3f}), "
              f"|μ| {row['clean_action_norm']:.2f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"generator": "benchmarks/actor_reach.py", "rows": merged(OUT, rows)}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
