"""A PGD-10 evaluation written the way the papers' code runs it: one env at a time, the SB3
model loaded as it is (parameters not frozen, float32, torch's default threads), a fresh
autograd graph with parameter gradients on every iteration. The baseline of
benchmarks/contention.py's end-to-end comparison; it prints the episodes' returns and lengths
as JSON.

Run: python benchmarks/paper_style_pgd.py --agent cartpole-dqn --env CartPole-v1 --eps 0.1 --episodes 8 --cap 200
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import torch
import torch.nn.functional as F

from rlgauntlet.envs import make_env
from rlgauntlet.zoo import zoo_dir, zoo_entry


def scores(model, x: torch.Tensor) -> torch.Tensor:
    """Q-values (DQN) or logits (PPO) through the model's own modules, pixels scaled as SB3 does."""
    policy = model.policy
    if hasattr(policy, "q_net"):
        return policy.q_net(x)
    features = policy.extract_features(x, policy.pi_features_extractor)
    return policy.action_net(policy.mlp_extractor.forward_actor(features))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="cartpole-dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--cap", type=int, default=200)
    args = parser.parse_args()
    import stable_baselines3 as sb3

    entry = zoo_entry(args.agent)
    model = getattr(sb3, entry["algorithm"].upper()).load(zoo_dir() / entry["file"], device="cpu")
    env = gym.wrappers.TimeLimit(make_env(args.env), args.cap)
    image = len(env.observation_space.shape) == 3
    eps, step = args.eps * (255.0 if image else 1.0), 2.5 * args.eps * (255.0 if image else 1.0) / 10
    out = []
    for k in range(args.episodes):
        obs, _ = env.reset(seed=k)
        total, length, done = 0.0, 0, False
        while not done:
            x = torch.as_tensor(obs[None], dtype=torch.float32)
            if image:
                x = x.permute(0, 3, 1, 2)  # SB3 scales pixels by 1/255 inside extract_features
            target = scores(model, x).argmax(dim=1)
            x_adv = x.clone()
            for _ in range(10):
                x_adv.requires_grad_(True)
                loss = F.cross_entropy(scores(model, x_adv), target)
                model.policy.zero_grad()
                loss.backward()
                x_adv = x_adv.detach() + step * x_adv.grad.sign()
                x_adv = torch.min(torch.max(x_adv, x - eps), x + eps)
                if image:
                    x_adv = x_adv.clamp(0, 255)
            with torch.no_grad():
                action = int(scores(model, x_adv).argmax(dim=1))
            obs, reward, terminated, truncated, info = env.step(action)
            total, length = float(info.get("raw_return", total + reward)), length + 1
            done = truncated or (terminated and info.get("real_done", True))
            if terminated and not done:
                obs, _ = env.reset()
        out.append([k, total, length])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
