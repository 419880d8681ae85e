"""Attacks on the MuJoCo and Atari zoo agents (run when those agents are in the zoo)."""

import numpy as np
import pytest

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim
from rlgauntlet.zoo import load_manifest

MANIFEST = load_manifest()


def _mean(agent, env_id, spec, episodes):
    victim = load_victim(agent)
    recs = evaluate_episodes(lambda: make_env(env_id), victim, parse_threat(spec) if spec else None,
                             range(episodes), seed=0, n_envs=episodes)
    return float(np.mean([r.episode_return for r in recs]))


@pytest.mark.skipif("hopper-ppo" not in MANIFEST, reason="zoo hopper-ppo not trained yet")
def test_maxdiff_beats_random_noise_on_hopper_at_paad_budget():
    """PA-AD's Hopper budget, ε = 0.075 on the VecNormalize-normalized observation
    (docs/reproduction.md, 20 episodes: clean 3109, uniform noise 2726, Random 2117, MaxDiff
    1996, MaxDiff with 3 restarts 1057). With the paper's settings MaxDiff goes below
    uniform noise; given three random starts (best KL kept) it goes well below both."""
    victim = load_victim("zoo:hopper-ppo")
    assert victim.budget_space == "normalized"
    noise = _mean("zoo:hopper-ppo", "Hopper-v5", "uniform_noise:eps=0.075", 10)
    random = _mean("zoo:hopper-ppo", "Hopper-v5", "random:eps=0.075", 10)
    maxdiff = _mean("zoo:hopper-ppo", "Hopper-v5", "maxdiff:eps=0.075", 10)
    strong = _mean("zoo:hopper-ppo", "Hopper-v5", "maxdiff:eps=0.075,restarts=3", 10)
    assert maxdiff < 0.9 * noise
    assert strong < 0.5 * noise and strong < 0.6 * random


@pytest.mark.slow
@pytest.mark.skipif("pong-ppo" not in MANIFEST, reason="zoo pong-ppo not trained yet")
def test_minbest_momentum_beats_random_on_pong():
    """PA-AD's A2C Pong budget, ε = 0.0005 on [0, 1] pixels (benchmarks/paad_table1_pong.py)."""
    clean = _mean("zoo:pong-ppo", "PongNoFrameskip-v4", None, 4)
    random = _mean("zoo:pong-ppo", "PongNoFrameskip-v4", "random:eps=0.0005", 4)
    momentum = _mean("zoo:pong-ppo", "PongNoFrameskip-v4", "momentum:eps=0.0005", 4)
    assert random > clean - 5 and momentum < random - 10
