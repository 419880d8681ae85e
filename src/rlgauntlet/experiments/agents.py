"""Load an agent for an env: the victim, checked against the env with its preset."""

from __future__ import annotations

from pathlib import Path

from rlgauntlet.envs import make_env, resolve_preset
from rlgauntlet.errors import UserError
from rlgauntlet.victims import Victim, load_victim


def load_for_env(agent: str | Victim, env: str, preset: str | None = None, device: str = "cpu",
                 kind: str | None = None, vecnormalize: str | Path | None = None, input_space: str | None = None,
                 precision: str = "auto", allow_pickle: bool = False) -> tuple[Victim, str]:
    """Load ``agent`` (a spec such as ``zoo:cartpole-ppo``, or a :class:`Victim`) and check that it
    fits ``env`` with its preset: returns (victim, preset name), or raises a :class:`UserError`."""
    import torch

    try:
        torch_device = torch.device(device)
    except (RuntimeError, ValueError):
        raise UserError(f"unknown device {device!r}; use --device cpu or --device cuda") from None
    if torch_device.type not in ("cpu", "cuda"):
        raise UserError(f"device {device!r} is not supported; use --device cpu or --device cuda")
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda but no CUDA device is available; use --device cpu")
    env_preset = resolve_preset(env, preset)
    probe = make_env(env, env_preset)
    try:
        victim = agent if isinstance(agent, Victim) else load_victim(
            agent, probe.observation_space, probe.action_space, device=device, kind=kind,
            vecnormalize=vecnormalize, input_space=input_space, precision=precision, allow_pickle=allow_pickle)
        victim.check_env(probe.observation_space, probe.action_space, env)
    finally:
        probe.close()
    return victim, env_preset
