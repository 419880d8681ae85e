"""Perturbed examples for image agents: a clean frame beside the same frame under each natural
observation threat, as the agent sees it (its network input, last stacked frame).

The frame is the state after ``warmup`` steps of the agent's own clean play from the reset of
episode 0 (env seed = the run's seed), so that a game is under way; the threat is applied with
episode 0's random stream. This needs the agent and the env, so it runs only where the agent
can be loaded (zoo agents, or an agent file still at its recorded path); otherwise the report
says why no example is shown.

Example:
    >>> natural_examples(group, ["rotation:degrees=3"])                  # doctest: +SKIP
    [{'spec': 'rotation:degrees=3', 'clean': 'data:image/png;base64,...', 'perturbed': ...}]
"""

from __future__ import annotations


import numpy as np

from rlgauntlet.report.data import AgentRuns
from rlgauntlet.report.figures import png_uri_of_array


def _agent_spec(agent: dict) -> str | None:
    """The agent of a run's record when it can be loaded here: a zoo agent, or an SB3 file still at
    its recorded path."""
    from rlgauntlet.victims.agent_ref import agent_of_description, parse_agent

    spec = agent_of_description(agent)
    if spec is None:
        return None
    ref = parse_agent(spec)
    if ref.source == "zoo" or (ref.source == "sb3" and ref.path.is_file()):
        return spec
    return None


def _frame(x) -> np.ndarray:
    """The last channel of a (1, C, H, W) input in [0, 1] as a uint8 (H, W) image."""
    image = x[0, -1].detach().cpu().numpy() if x.ndim == 4 else x[0].detach().cpu().numpy()
    return (np.clip(image, 0.0, 1.0) * 255).round().astype(np.uint8)


def natural_examples(group: AgentRuns, specs: list[str], warmup: int = 60) -> list[dict]:
    """``[{"spec", "clean", "perturbed"}]`` (PNG data URIs), or one ``{"note"}`` saying why none."""
    from rlgauntlet.common.seeding import BatchRNG, episode_generator
    from rlgauntlet.errors import UserError
    from rlgauntlet.experiments.agents import AgentSpec, open_job
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.threats.base import perturb_once

    spec = _agent_spec(group.agent)
    if spec is None:
        return [{"note": "the agent file is not at its recorded path; no example frames"}]
    seed = int(group.clean.meta.get("seed", 0)) if group.clean else 0
    try:
        with open_job(AgentSpec(agent=spec, preset=group.preset), group.env) as job:
            victim, env = job.victim, job.env_fn()
            try:
                obs, _ = env.reset(seed=seed)
                for _ in range(warmup):
                    obs, _, terminated, truncated, _ = env.step(victim.act(obs[None])[0])
                    if terminated or truncated:
                        obs, _ = env.reset(seed=seed)
            finally:
                env.close()
    except UserError as exc:
        return [{"note": f"no example frames: {exc}"}]
    x = victim.preprocess(obs[None])
    out = []
    for text in specs:
        threat = parse_threat(text)
        rng = BatchRNG([episode_generator(seed, 0, "threat")])
        if threat.place != "observation" or threat.new_state() is not None:
            continue  # action and world threats, and those with memory (delays, frozen frames), act only in an episode
        perturbed = perturb_once(threat, x.clone(), victim, rng)
        out.append({"spec": text, "clean": png_uri_of_array(_frame(x)), "perturbed": png_uri_of_array(_frame(perturbed))})
    return out
