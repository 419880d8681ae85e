"""Learned one-step dynamics ``f(s, a) -> s'`` for model-based attacks (Weng et al., ICLR 2020).

The attacker collects transitions ``(s, a, s')`` from the victim (its deterministic policy)
and from a uniform random policy, ``samples / 2`` of each (the paper's ``S_agent ∪ S_random``),
and fits a feed-forward network by mean squared error. Our choices where the paper is silent
(docs/decisions.md, "Model-based attacks"): ReLU, the network predicts the normalised state
*change* from normalised inputs (``s' = s + d_std·net((s−μ_s)/σ_s, (a−μ_a)/σ_a) + d_mean``),
Adam with learning rate 1e-3, batches of 512; every tenth episode is held out as the test
set. Everything lives in the env's raw observation units (flattened dm_control dicts).

A run folder holds ``data.npz`` (the transitions), ``checkpoint.pt`` (weights and optimizer,
after every epoch), ``model.pt`` (the final weights) and ``manifest.json`` (env, victim hash,
samples, test one-step MSE and k-step errors for k = 1, 5, 10). Started again on the same
folder with the same settings, training resumes.

Example:
    >>> from rlgauntlet.experiments.agents import load_for_env          # doctest: +SKIP
    >>> from rlgauntlet.envs import make_env                            # doctest: +SKIP
    >>> victim, _ = load_for_env("zoo:pendulum-td3", "Pendulum-v1")     # doctest: +SKIP
    >>> learn_dynamics(victim, "Pendulum-v1", lambda: make_env("Pendulum-v1"), 20_000, "runs/dyn")  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.threats.model_based.model import MANIFEST, MODEL_FILE, DynamicsModel, file_sha256

K_STEPS = (1, 5, 10)
TEST_EVERY = 10  # episode k is a test episode when k % TEST_EVERY == TEST_EVERY - 1
BATCH = 512
LEARNING_RATE = 1e-3
RANDOM_SEED_OFFSET = 1_000_000  # the random policy's episodes use seeds seed + 1e6 + k


# -- data ---------------------------------------------------------------------------------------
def collect(env_fn: Callable, victim, samples: int, seed: int, n_envs: int = 4,
            on_step: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """``samples // 2`` transitions from the victim (deterministic) and as many from a uniform
    random policy (``random_action``), whole episodes from seeds ``seed + k`` (random policy:
    ``seed + 10⁶ + k``), cut at the sample count.

    Returns arrays ``s`` (N, obs_dim), ``a`` (N, act_dim), ``s_next``, ``episode`` (global
    episode id: agent k → 2k, random k → 2k + 1), ``t`` (step index in the episode), ``source``
    (0 agent, 1 random).
    """
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.threats.spec import parse_threat

    parts = []
    for source, threat, base_seed in ((0, None, seed), (1, parse_threat("random_action"), seed + RANDOM_SEED_OFFSET)):
        want = samples // 2 if source == 0 else samples - samples // 2
        rows: list[tuple] = []
        steps: dict[int, int] = {}

        def keep(episode, obs, action, next_obs, source=source, rows=rows, steps=steps):
            t = steps.get(episode, 0)
            steps[episode] = t + 1
            rows.append((obs, np.atleast_1d(action), next_obs, 2 * episode + source, t))

        def enough(_x, rows=rows, want=want) -> bool:
            return len(rows) >= want

        evaluate_episodes(env_fn, victim, threat, itertools.count(), base_seed, n_envs=n_envs,
                          on_transition=keep, on_inputs=enough, on_step=on_step)
        parts.extend(rows[:want])
    s, a, s_next, episode, t = zip(*parts)
    return {"s": np.asarray(s, np.float64), "a": np.asarray(a, np.float64), "s_next": np.asarray(s_next, np.float64),
            "episode": np.asarray(episode, np.int64), "t": np.asarray(t, np.int64),
            "source": np.asarray(episode, np.int64) % 2}


def test_mask(data: dict[str, np.ndarray]) -> np.ndarray:
    """Transitions of held-out episodes (every tenth episode of each policy)."""
    return (data["episode"] // 2) % TEST_EVERY == TEST_EVERY - 1


# -- metrics ------------------------------------------------------------------------------------
@torch.no_grad()
def k_step_errors(model: DynamicsModel, data: dict[str, np.ndarray], ks=K_STEPS, max_starts: int = 2000) -> dict:
    """Open-loop error of the model over k steps on held-out episodes.

    From every start (s_t, t) whose episode lasts to t + k (at most ``max_starts``, evenly
    spread), the model is rolled out k steps with the recorded actions and compared with
    s_{t+k}: ``mse`` (mean squared error per coordinate) and ``relative`` (mean of
    ‖ŝ − s‖₂ / ‖s‖₂).
    """
    test = np.flatnonzero(test_mask(data))
    out = {}
    index = {(int(e), int(t)): i for i, e, t in zip(test, data["episode"][test], data["t"][test])}
    for k in ks:
        starts = [i for i in test if all((int(data["episode"][i]), int(data["t"][i]) + j) in index for j in range(k))]
        if not starts:
            out[str(k)] = None
            continue
        starts = np.asarray(starts)[np.linspace(0, len(starts) - 1, min(max_starts, len(starts))).astype(int)]
        s = torch.as_tensor(data["s"][starts])
        for j in range(k):
            rows = [index[(int(data["episode"][i]), int(data["t"][i]) + j)] for i in starts]
            s = model(s, torch.as_tensor(data["a"][rows]))
        truth = torch.as_tensor(data["s_next"][rows])
        err = s - truth
        out[str(k)] = {"mse": float((err ** 2).mean()),
                       "relative": float((err.norm(dim=1) / truth.norm(dim=1).clamp_min(1e-12)).mean()),
                       "starts": int(len(starts))}
    return out


# -- training -----------------------------------------------------------------------------------
def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_dynamics(data: dict[str, np.ndarray], run_dir: Path, config: dict, epochs: int, seed: int,
                   on_epoch: Callable[[int, float], None] | None = None) -> DynamicsModel:
    """Fit (or resume fitting) the model on the training episodes of ``data``; checkpoint
    after every epoch. ``config`` holds ``obs_dim``, ``act_dim``, ``hidden``, ``layers``."""
    torch.manual_seed(seed)
    model = DynamicsModel(config["obs_dim"], config["act_dim"], config["hidden"], config["layers"])
    train = ~test_mask(data)
    s, a, s_next = (torch.as_tensor(data[k][train], dtype=torch.float32) for k in ("s", "a", "s_next"))
    model.set_normalisation(data["s"][train], data["a"][train], data["s_next"][train])
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    start = 0
    ckpt_path = run_dir / "checkpoint.pt"
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start = int(ckpt["epoch"])
    target = (s_next - s - model.d_mean) / model.d_std
    for epoch in range(start, epochs):
        # each epoch's order comes from its own seed, so a resumed run trains as an unbroken one
        order = torch.randperm(len(s), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        total = 0.0
        for batch in order.split(BATCH):
            loss = ((model.normalised_delta(s[batch], a[batch]) - target[batch]) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        _atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                     ckpt_path)
        if on_epoch is not None:
            on_epoch(epoch + 1, total / len(s))
    return model


def dynamics_config(env_id: str, victim, samples: int, seed: int, hidden: int, layers: int, epochs: int,
                    obs_dim: int, act_dim: int, layout: dict) -> dict:
    """What defines a dynamics model (compared on resume, kept in its manifest)."""
    return {"kind": "dynamics", "env": env_id, "victim": {k: victim.description.get(k) for k in ("name", "path", "sha256")},
            "samples": int(samples), "seed": int(seed), "hidden": int(hidden), "layers": int(layers),
            "epochs": int(epochs), "obs_dim": int(obs_dim), "act_dim": int(act_dim), "observation_layout": layout,
            "batch": BATCH, "learning_rate": LEARNING_RATE, "predicts": "normalised state change"}


def learn_dynamics(victim, env_id: str, env_fn: Callable, samples: int, run_dir: str | Path, seed: int = 0,
                   hidden: int = 1000, layers: int = 4, epochs: int = 30, n_envs: int = 4,
                   log: Callable[[str], None] = print) -> dict:
    """Collect, train and measure a dynamics model in ``run_dir``; return its manifest.

    Resumes from ``run_dir``'s data and checkpoint when they were made with the same settings;
    a folder made with other settings is a :class:`UserError` (never overwritten).
    """
    from rlgauntlet.envs.presets import observation_layout

    import gymnasium as gym

    if not isinstance(victim.action_space, gym.spaces.Box):
        raise UserError("a dynamics model for model-based attacks needs a continuous-action agent (Box actions)")
    if samples < 2 * TEST_EVERY * 10:
        raise UserError(f"--samples {samples} is too few to train and test a model; give at least {2 * TEST_EVERY * 10}")
    probe = env_fn()
    try:
        if not isinstance(probe.observation_space, gym.spaces.Box) or len(probe.observation_space.shape) != 1:
            raise UserError(f"{env_id} does not give a flat observation vector; model-based attacks need one")
        obs_dim = int(probe.observation_space.shape[0])
        layout = observation_layout(probe)
    finally:
        probe.close()
    act_dim = int(np.prod(victim.action_space.shape))
    config = dynamics_config(env_id, victim, samples, seed, hidden, layers, epochs, obs_dim, act_dim, layout)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.json"
    if config_path.exists():
        old = json.loads(config_path.read_text())
        if {k: v for k, v in old.items() if k != "epochs"} != {k: v for k, v in config.items() if k != "epochs"}:
            changed = sorted(k for k in config if old.get(k) != config[k])
            raise UserError(f"{run_dir} holds a dynamics model made with other settings ({', '.join(changed)}); "
                            "give a new --run-dir")
    elif any(run_dir.iterdir()):
        raise UserError(f"{run_dir} is not empty and holds no dynamics run; give a new or empty --run-dir")
    data_path = run_dir / "data.npz"
    started = time.perf_counter()
    if data_path.exists():
        data = dict(np.load(data_path))
        config_path.write_text(json.dumps(config, indent=1))  # the same settings, the epochs of this run
        log(f"resumed: {len(data['s'])} transitions from {data_path}")
    else:
        log(f"collecting {samples} transitions on {env_id} (half agent, half uniform random)")
        data = collect(env_fn, victim, samples, seed, n_envs=n_envs)
        if not test_mask(data).any() or test_mask(data).all():
            raise UserError(f"--samples {samples} holds fewer than {TEST_EVERY} episodes of each policy on {env_id}, so "
                            f"no episode is left out to test the model; give more samples")
        # the settings are written once the data are good: a refused run leaves nothing behind that
        # would block the retry its message suggests (more --samples)
        config_path.write_text(json.dumps(config, indent=1))
        tmp = run_dir / "data.tmp.npz"
        np.savez(tmp, **data)
        os.replace(tmp, data_path)
    collect_seconds = time.perf_counter() - started
    model = train_dynamics(data, run_dir, config, epochs, seed,
                           on_epoch=lambda e, loss: log(f"epoch {e}/{epochs}: train loss {loss:.3g} (normalised)"))
    model_path = run_dir / MODEL_FILE
    _atomic_save(model.state_dict(), model_path)
    errors = k_step_errors(model, data)
    manifest = {**config, "model_file": MODEL_FILE, "model_sha256": file_sha256(model_path),
                "transitions": {"agent": int((data["source"] == 0).sum()), "random": int((data["source"] == 1).sum()),
                                "test": int(test_mask(data).sum())},
                "test_one_step_mse": errors["1"]["mse"] if errors.get("1") else None,
                "k_step_error": errors, "seconds": round(time.perf_counter() - started, 1),
                "collect_seconds": round(collect_seconds, 1)}
    tmp = run_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, run_dir / MANIFEST)
    return manifest
