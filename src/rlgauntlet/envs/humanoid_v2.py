"""Gym's Humanoid-v2 as MuJoCo 1.5 simulated it, on today's MuJoCo: the task the SA-PPO paper's
Humanoid agents were trained and scored on (huanzhang12/SA_PPO, ``Humanoid-v2``, mujoco-py 1.50).

Gymnasium's Humanoid-v4 keeps v2's model file, observation layout (376 numbers) and reward
weights, but three things changed under it, and each one costs the released agents (measured in
docs/decisions.md; with all three undone their clean returns are within 7% of the README):

1. **Body masses and inertias.** MuJoCo before 2.1.2 computed a capsule geom's mass and inertia
   (``inertiafromgeom``) as a cylinder: the capsule's middle section extended at each end by half
   its radius, so ``m = ρ·π·r²·(L + r)`` instead of the exact capsule's ``ρ·π·r²·(L + 4r/3)``
   (the torso weighs 8.322 where Humanoid-v4's weighs 8.907). The masses are in the observation
   (``cinert``), the agents' state filters hold v2's (their spread there is 0), and the dynamics
   follow them. Here the model's body inertials are those of the same model compiled with every
   capsule replaced by that cylinder; the collision geometry stays the capsules.
2. **The control cost.** v2 charged ``0.1·Σ ctrl²`` on ``data.ctrl`` after the step, which MuJoCo
   before 2.2.1 clamped in place to the actuators' ``ctrlrange`` (±0.4): the released agents'
   actions reach ±3, charged unclamped by Humanoid-v4 (−2,900 an episode against about −270).
   The physics was and is the clamped control either way.
3. **The impact cost.** v2 subtracted ``min(0.5e-6·Σ cfrc_ext², 10)`` each step; v4 dropped it.
   (The contact forces themselves are in both observations: Gymnasium computes them after every
   step.)

Everything else is Humanoid-v4's: reset noise, termination outside 1.0 < z < 2.0, the forward
reward on the mass centre (with the masses above, as v2's).

Example:
    >>> import gymnasium as gym
    >>> from rlgauntlet.envs.presets import make_env
    >>> env = make_env("HumanoidMuJoCo15-v4")
    >>> round(float(env.unwrapped.model.body_mass[1]), 3)  # the torso
    8.322
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape
    (376,)
"""

from __future__ import annotations

import numpy as np
from gymnasium.envs.mujoco.humanoid_v4 import HumanoidEnv

#: gym Humanoid-v2's impact cost: weight on Σ cfrc_ext², and its cap per step
IMPACT_COST_WEIGHT = 0.5e-6
IMPACT_COST_MAX = 10.0


def cylinder_inertials(model_path: str):
    """``model_path`` compiled with every capsule geom as MuJoCo < 2.1.2 weighed it: a cylinder of
    the capsule's radius whose length is the capsule's middle section plus one radius (half a
    radius at each end). Returns the compiled ``mujoco.MjModel`` (its body inertials are the ones
    wanted; its geometry is not)."""
    import mujoco

    spec = mujoco.MjSpec.from_file(model_path)
    for geom in spec.geoms:
        if geom.type != mujoco.mjtGeom.mjGEOM_CAPSULE:
            continue
        geom.type = mujoco.mjtGeom.mjGEOM_CYLINDER
        radius = geom.size[0]
        if not np.any(np.isnan(geom.fromto)):
            start, end = np.array(geom.fromto[:3]), np.array(geom.fromto[3:])
            axis = (end - start) / np.linalg.norm(end - start)
            geom.fromto = np.concatenate([start - axis * radius / 2, end + axis * radius / 2])
        else:  # a capsule given by size: (radius, half-length)
            geom.size[1] = geom.size[1] + radius / 2
    return spec.compile()


class HumanoidMuJoCo15Env(HumanoidEnv):
    """Gymnasium's Humanoid-v4 with gym Humanoid-v2's masses, control cost and impact cost as
    MuJoCo 1.5 gave them (see the module docstring). Observation (376,) and action (17,) as v4;
    ``info`` adds ``reward_impact`` (≤ 0)."""

    def __init__(self, **kwargs) -> None:
        import mujoco

        super().__init__(**kwargs)
        old = cylinder_inertials(self.fullpath)
        if old.nbody != self.model.nbody:  # the same file: a mismatch means the compiler split bodies
            raise RuntimeError(f"{self.fullpath}: {old.nbody} bodies compiled with cylinders, {self.model.nbody} without")
        for name in ("body_mass", "body_inertia", "body_ipos", "body_iquat"):
            getattr(self.model, name)[:] = getattr(old, name)
        mujoco.mj_setConst(self.model, self.data)  # the quantities derived from the inertials

    def control_cost(self, action: np.ndarray) -> float:
        """``0.1·Σ ctrl²`` on the control clamped to the actuators' range, as MuJoCo < 2.2.1 left
        ``data.ctrl`` after a step."""
        low, high = self.model.actuator_ctrlrange.T
        return float(self._ctrl_cost_weight * np.sum(np.square(np.clip(self.data.ctrl, low, high))))

    def impact_cost(self) -> float:
        """gym Humanoid-v2's ``min(0.5e-6·Σ cfrc_ext², 10)`` on the contact forces after the step."""
        return float(min(IMPACT_COST_WEIGHT * np.sum(np.square(self.data.cfrc_ext)), IMPACT_COST_MAX))

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        impact = self.impact_cost()
        info["reward_impact"] = -impact
        return observation, reward - impact, terminated, truncated, info
