"""gym's MuJoCo -v2 tasks as MuJoCo 1.5 simulated them, on today's MuJoCo: the tasks the field's
released agents (ATLA, SA-PPO, PA-ATLA, WocaR, RADIAL: gym ``*-v2`` on mujoco-py) were trained and
scored on. Each is Gymnasium's ``-v4`` of the task (gym's v2/v3 on the new bindings, Ant with its
contact forces observed as v2's) with what MuJoCo changed under it undone:

1. **Capsule masses and inertias**, every task. MuJoCo before 2.1.2 (every version mujoco-py ran)
   computed a capsule geom's mass and inertia (``inertiafromgeom``) as a cylinder: the capsule's
   middle section extended at each end by half its radius, so ``m = ρ·π·r²·(L + r)`` instead of
   the exact capsule's ``ρ·π·r²·(L + 4r/3)``. Hopper's torso weighed 3.534 where today's weighs
   3.665; Humanoid's 8.322 where today's weighs 8.907 (the masses the Humanoid agents' state
   filters hold). The model's body inertials here are those of the same model file compiled by
   MuJoCo with every capsule replaced by that cylinder; the collision geometry stays the capsules.
2. **Humanoid's control cost.** gym's Humanoid-v2, alone of these tasks, charged ``0.1·Σ ctrl²`` on
   ``data.ctrl`` after the step, which MuJoCo before 2.2.1 clamped in place to the actuators'
   ``ctrlrange`` (±0.4); the others charge the action as given, as Gymnasium still does.
3. **Humanoid's impact cost** ``min(0.5e-6·Σ cfrc_ext², 10)``, which Gymnasium's v4 dropped (the
   contact forces themselves are observed in both: Gymnasium computes them after every step).

Measured on the released agents (docs/decisions.md, 2026-11-30): the Humanoid agents' returns come
within 1% of their README; PPO Hopper's from 1948 ± 179 to 3393 ± 3 (README 3167).

Example:
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
from gymnasium.envs.mujoco.ant_v4 import AntEnv
from gymnasium.envs.mujoco.half_cheetah_v4 import HalfCheetahEnv
from gymnasium.envs.mujoco.hopper_v4 import HopperEnv
from gymnasium.envs.mujoco.humanoid_v4 import HumanoidEnv
from gymnasium.envs.mujoco.walker2d_v4 import Walker2dEnv

#: the word these tasks' ids carry after the task's name (``HopperMuJoCo15-v4``)
MUJOCO15 = "MuJoCo15"
#: gym Humanoid-v2's impact cost: weight on Σ cfrc_ext², and its cap per step
IMPACT_COST_WEIGHT = 0.5e-6
IMPACT_COST_MAX = 10.0


def cylinder_inertials(model_path: str):
    """``model_path`` compiled with every capsule geom as MuJoCo < 2.1.2 weighed it: a cylinder of
    the capsule's radius whose length is the capsule's middle section plus one radius (half a
    radius at each end). Returns the compiled ``mujoco.MjModel`` (its body inertials are the ones
    wanted; its geometry is not)."""
    import warnings

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
    with warnings.catch_warnings():  # HalfCheetah's settotalmass: deprecated, still applied (as in Gymnasium's)
        warnings.filterwarnings("ignore", message="compiler attribute 'settotalmass' is deprecated")
        return spec.compile()


class MuJoCo15Inertials:
    """Mixin for a Gymnasium ``MujocoEnv``: after the env is built, its bodies' masses, inertias
    and inertial frames become :func:`cylinder_inertials`' of its own model file, and the
    constants MuJoCo derives from them are recomputed (``mj_setConst``)."""

    def __init__(self, **kwargs) -> None:
        import mujoco

        super().__init__(**kwargs)
        old = cylinder_inertials(self.fullpath)
        if old.nbody != self.model.nbody:  # the same file: a mismatch means the compiler split bodies
            raise RuntimeError(f"{self.fullpath}: {old.nbody} bodies compiled with cylinders, {self.model.nbody} without")
        for name in ("body_mass", "body_inertia", "body_ipos", "body_iquat"):
            getattr(self.model, name)[:] = getattr(old, name)
        mujoco.mj_setConst(self.model, self.data)


class HopperMuJoCo15Env(MuJoCo15Inertials, HopperEnv):
    """gym's Hopper-v2 as MuJoCo 1.5 simulated it: Gymnasium's Hopper-v4 with the old inertials."""


class Walker2dMuJoCo15Env(MuJoCo15Inertials, Walker2dEnv):
    """gym's Walker2d-v2 as MuJoCo 1.5 simulated it: Gymnasium's Walker2d-v4 (v2's foot frictions)
    with the old inertials."""


class HalfCheetahMuJoCo15Env(MuJoCo15Inertials, HalfCheetahEnv):
    """gym's HalfCheetah-v2 as MuJoCo 1.5 simulated it: Gymnasium's HalfCheetah-v4 with the old
    inertials (scaled to the model's total mass, as its ``settotalmass`` did then)."""


class AntMuJoCo15Env(MuJoCo15Inertials, AntEnv):
    """gym's Ant-v2 as MuJoCo 1.5 simulated it: Gymnasium's Ant-v4 observing its contact forces
    (111 numbers, as v2) with the old inertials."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**{"use_contact_forces": True, **kwargs})


class HumanoidMuJoCo15Env(MuJoCo15Inertials, HumanoidEnv):
    """gym's Humanoid-v2 as MuJoCo 1.5 simulated and scored it: Gymnasium's Humanoid-v4 with the old
    inertials, the control cost on the clamped control and v2's impact cost. Observation (376,) and
    action (17,) as v4; ``info`` adds ``reward_impact`` (≤ 0)."""

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


#: id -> env class, registered by ``envs.presets`` (1000 steps an episode, as gym's -v2)
MUJOCO15_ENVS = {f"{cls.__name__.removesuffix('MuJoCo15Env')}{MUJOCO15}-v4": cls
                 for cls in (HopperMuJoCo15Env, Walker2dMuJoCo15Env, HalfCheetahMuJoCo15Env, AntMuJoCo15Env,
                             HumanoidMuJoCo15Env)}
