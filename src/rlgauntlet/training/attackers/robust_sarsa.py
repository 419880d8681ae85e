"""Robust Sarsa: learn Q^π of a fixed continuous-control victim, smoothed for attacking it.

Zhang et al. 2020a ("Robust Deep RL against Adversarial Perturbations on State Observations",
§3.5 and the official SA-PPO code) attack a policy π through a learned action-value function
Q^π(s, a): the Robust Sarsa (RS) attack is MinQ with that Q (see
:mod:`rlgauntlet.threats.learned.robust_sarsa`). Q is trained by Sarsa on transitions of the
victim itself, and made smooth with a robustness regulariser: over the ℓ∞ ball of radius
``sarsa_eps`` around the joint input (x, a), the interval bounds [lb, ub] of Q (IBP, our
``bounds.ibp``) are pulled toward Q(x, a):

    L = SmoothL1(Q(x, a), r̃ + γ (1 − terminated) Q(x', a')) + reg · mean(max(ub − Q, Q − lb)²)

with ``sarsa_eps`` at 0 for the first third of the iterations, ramped linearly over the second
and held over the last (the official schedule), and the learning rate annealed to 0 over the
last third. Each iteration collects ``T`` transitions with the victim sampling its actions
(its Gaussian noise explores the actions Q must rank), then runs ``epochs`` passes of
``minibatches`` minibatches. x is the victim's network input (normalised for VecNormalize
agents); rewards are scaled by a constant fixed from the first batch, r̃ = r / std(r) (the
attack only compares Q values, so the scale does not matter, but a fixed learning rate needs
returns of order 1-100; the official code trains on normalised rewards for the same reason).

Q is a tanh MLP 64-64 on [x, a], as the official ``ValueDenseNet``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from rlgauntlet.bounds.ibp import ibp
from rlgauntlet.common.outputs import write_text_atomic
from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.envs.presets import make_train_vec_env
from rlgauntlet.errors import UserError
from rlgauntlet.threats.learned.robust_sarsa import Q_FILE, q_network
from rlgauntlet.victims.base import Victim

def _schedule(iteration: int, iterations: int, final: float) -> float:
    """0 for the first third, a linear ramp over the second, ``final`` over the last third."""
    third = max(1, iterations // 3)
    return final * min(1.0, max(0.0, (iteration - third) / third))


def _lr_factor(iteration: int, iterations: int) -> float:
    decrease = iterations * 2 // 3
    return 1.0 if iteration < decrease else max(0.0, (iterations - iteration) / max(1, iterations - decrease))


def train_robust_sarsa(victim: Victim, config: dict, run_dir: str | Path, iterations: int = 50, T: int = 2048,
                       n_envs: int = 4, epochs: int = 10, minibatches: int = 32, lr: float = 2.5e-4,
                       gamma: float = 0.99, log: Callable[[str], None] = print) -> dict:
    """Train Q^π for ``victim`` on ``config["env"]`` with ``config["sarsa_eps"]`` and
    ``config["sarsa_reg"]``; write ``q.pt`` (state dict) in ``run_dir`` and return the training
    record (TD loss per iteration, reward scale, wall time)."""
    if victim.is_discrete:
        raise UserError("robust-sarsa is for continuous-action agents (Q is learned on [x, a]); for discrete agents "
                        "use minq, maxdiff or paad")
    if victim.recurrent:
        raise UserError("robust-sarsa learns Q of a policy of the state alone, and this agent is recurrent (LSTM): "
                        "its action also depends on its memory; use paad, sarl or maxdiff")
    seed = int(config["seed"])
    torch.manual_seed(seed)
    venv = make_train_vec_env(config["env"], n_envs, seed)
    rng = BatchRNG([episode_generator(seed, i, "policy") for i in range(n_envs)])
    obs = venv.reset()
    x = victim.preprocess(obs).to(torch.float32)
    act_dim = int(np.prod(victim.action_space.shape))
    q = q_network(x.shape[1] + act_dim)
    optimizer = torch.optim.Adam(q.parameters(), lr=lr, eps=1e-5)
    steps_per_env = max(2, T // n_envs)
    history, reward_scale, started, cpu_started = [], None, time.perf_counter(), time.process_time()

    def act(inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = victim.forward(inputs.to(victim.dtype))
            return victim.actions(out, deterministic=False, noise=rng.normal(victim.action_space.shape)).to(torch.float32)

    a = act(x)
    for it in range(iterations):
        xs, acts, rewards, terms, truncs = [], [], [], [], []
        for _ in range(steps_per_env + 1):
            xs.append(x)
            acts.append(a)
            obs, r, dones, infos = venv.step(a.numpy())
            truncated = np.array([bool(i.get("TimeLimit.truncated", False)) for i in infos])
            rewards.append(torch.as_tensor(r, dtype=torch.float32))
            terms.append(torch.as_tensor(dones & ~truncated, dtype=torch.float32))
            truncs.append(torch.as_tensor(truncated))
            x = victim.preprocess(obs).to(torch.float32)
            a = act(x)
        # transition t of env i: (x_t, a_t, r_t, x_{t+1}, a_{t+1}); a step whose episode ended
        # (the VecEnv reset it) has no successor in the buffer: a terminated one bootstraps with
        # 0, a truncated one (time limit) is left out
        X, A, R, D, C = (torch.stack(v) for v in (xs, acts, rewards, terms, truncs))  # (S+1, n, ...)
        if reward_scale is None:
            reward_scale = float(R.std().clamp_min(1e-8))
        cur = torch.cat([X[:-1], A[:-1]], dim=-1).reshape(-1, X.shape[-1] + act_dim)
        nxt = torch.cat([X[1:], A[1:]], dim=-1).reshape(-1, X.shape[-1] + act_dim)
        rew = (R[:-1] / reward_scale).reshape(-1)
        term = D[:-1].reshape(-1)
        valid = ~C[:-1].reshape(-1)
        eps_now = _schedule(it, iterations, float(config["sarsa_eps"]))
        for group in optimizer.param_groups:
            group["lr"] = lr * _lr_factor(it, iterations)
        idx_all = torch.nonzero(valid).flatten()
        td_total, reg_total, batches = 0.0, 0.0, 0
        for _ in range(epochs):
            perm = idx_all[torch.randperm(len(idx_all))]
            for chunk in torch.tensor_split(perm, minibatches):
                if len(chunk) == 0:
                    continue
                inputs = cur[chunk]
                value = q(inputs).squeeze(-1)
                with torch.no_grad():
                    target = rew[chunk] + gamma * (1.0 - term[chunk]) * q(nxt[chunk]).squeeze(-1)
                td = F.smooth_l1_loss(value, target)
                loss = td
                if eps_now > 0 and config["sarsa_reg"] > 0:
                    lower, upper = ibp(q, inputs, eps_now)
                    gap = torch.maximum(upper.squeeze(-1) - value, value - lower.squeeze(-1))
                    reg = config["sarsa_reg"] * (gap * gap).mean()
                    loss = td + reg
                    reg_total += reg.item()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                td_total += float(td.detach())
                batches += 1
        history.append({"iteration": it + 1, "td_loss": td_total / max(1, batches), "reg_loss": reg_total / max(1, batches),
                        "sarsa_eps": eps_now, "mean_reward": float(R.mean())})
        if (it + 1) % max(1, iterations // 10) == 0 or it + 1 == iterations:
            log(f"[robust-sarsa] iteration {it + 1}/{iterations}: TD loss {history[-1]['td_loss']:.4g}, "
                f"regulariser {history[-1]['reg_loss']:.4g} (eps {eps_now:.3g})")
    venv.close()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(q.state_dict(), run_dir / Q_FILE)
    record = {"iterations": iterations, "transitions": iterations * steps_per_env * n_envs, "reward_scale": reward_scale,
              "gamma": gamma, "lr": lr, "hidden": [64, 64], "input_dim": int(x.shape[1] + act_dim),
              "train_seconds": round(time.perf_counter() - started, 1),
              "train_cpu_seconds": round(time.process_time() - cpu_started, 1), "history": history}
    write_text_atomic(run_dir / "training.json", json.dumps(record, indent=2))
    return record

