"""gym's -v2 MuJoCo tasks as MuJoCo 1.5 simulated them (envs.mujoco15). Known answers: the capsule
masses and inertias by the cylinder formula MuJoCo < 2.1.2 used, Humanoid's control cost on the
clamped control and its impact cost on the observation's contact forces, and each task read as its
own by the protocol and the release loader."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlgauntlet.envs.presets import make_env, mujoco_task
from rlgauntlet.errors import UserError

DENSITY = 1000.0  # MuJoCo's default geom density (humanoid.xml sets none)


def _old_capsule_mass(length: float, radius: float, density: float = DENSITY) -> float:
    """MuJoCo < 2.1.2: a cylinder of the capsule's radius, its length plus one radius."""
    return density * math.pi * radius**2 * (length + radius)


def _sphere_mass(radius: float) -> float:
    return DENSITY * 4 / 3 * math.pi * radius**3


@pytest.fixture(scope="module")
def env():
    env = make_env("HumanoidMuJoCo15-v4")
    yield env
    env.close()


def test_capsules_weigh_as_mujoco_150_did(env):
    """The torso (two capsules and a sphere) and the right shin (one capsule) by hand: 8.322 and
    2.632, where Humanoid-v4's exact capsules weigh 8.907 and 2.756; the shin's principal inertias
    are a solid cylinder's, m·r²/2 about its axis and m·(3r² + h²)/12 across, h = L + r."""
    import mujoco

    model = env.unwrapped.model
    torso = _old_capsule_mass(0.14, 0.07) + _sphere_mass(0.09) + _old_capsule_mass(0.12, 0.06)
    shin = _old_capsule_mass(0.3, 0.049)
    torso_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
    shin_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "right_shin")
    assert model.body_mass[torso_id] == pytest.approx(torso, rel=1e-9)
    assert model.body_mass[torso_id] == pytest.approx(8.322, abs=5e-4)
    assert model.body_mass[shin_id] == pytest.approx(shin, rel=1e-9)
    h, r = 0.3 + 0.049, 0.049
    expected = sorted([shin * r**2 / 2, shin * (3 * r**2 + h**2) / 12, shin * (3 * r**2 + h**2) / 12])
    np.testing.assert_allclose(sorted(model.body_inertia[shin_id]), expected, rtol=1e-9)
    v4 = make_env("Humanoid-v4").unwrapped.model
    assert v4.body_mass[torso_id] == pytest.approx(8.907, abs=5e-4)  # the exact capsules: what changed
    # the derived constants follow the masses (mj_setConst): the subtree mass of the root is the total
    assert model.body_subtreemass[1] == pytest.approx(model.body_mass[1:].sum(), rel=1e-9)


@pytest.mark.parametrize("env_id, body, capsule, base_id, headline", [
    ("HopperMuJoCo15-v4", "torso", (0.4, 0.05, DENSITY), "Hopper-v4", "0.075"),  # fromto z 1.45 → 1.05, size .05
    ("Walker2dMuJoCo15-v4", "torso", (0.4, 0.05, DENSITY), "Walker2d-v4", "0.05"),
    # a hip segment: fromto (0, 0, 0) → (0.2, 0.2, 0), size 0.08, the model's default density 5
    ("AntMuJoCo15-v4", "aux_1", (math.hypot(0.2, 0.2), 0.08, 5.0), "AntContactForces-v4", "0.15"),
])
def test_every_task_weighs_its_capsules_as_mujoco_150_did(env_id, body, capsule, base_id, headline):
    """One single-capsule body per task: its mass by the cylinder formula, against the exact
    capsule's in Gymnasium's own task; the same spaces, the task's protocol budget (ε headline and
    director steps) and the task's name for a release's check."""
    import mujoco

    from rlgauntlet.gauntlet.protocols import PROTOCOLS

    length, radius, density = capsule
    env, base = make_env(env_id), make_env(base_id)
    model, exact = env.unwrapped.model, base.unwrapped.model
    index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
    assert model.body_mass[index] == pytest.approx(_old_capsule_mass(length, radius, density), rel=1e-9)
    exact_mass = density * math.pi * radius**2 * (length + 4 * radius / 3)
    assert exact.body_mass[index] == pytest.approx(exact_mass, rel=1e-9)
    assert env.observation_space.shape == base.observation_space.shape
    assert env.action_space == base.action_space
    mujoco_v5 = PROTOCOLS["mujoco"]
    assert mujoco_v5.for_env(env_id).headline_eps == headline
    assert mujoco_v5.director_steps_of("standard", env_id) == mujoco_v5.director_steps_of("standard", base_id)
    assert mujoco_task(env_id) == mujoco_task(base_id) == env_id.split("MuJoCo15")[0]


def test_halfcheetah_keeps_its_total_mass():
    """HalfCheetah's model sets its total mass (14, ``settotalmass``): the old inertials are scaled to
    it as MuJoCo 1.5 scaled them, so the total stays and the torso's share changes."""
    model = make_env("HalfCheetahMuJoCo15-v4").unwrapped.model
    today = make_env("HalfCheetah-v4").unwrapped.model
    assert model.body_mass.sum() == pytest.approx(14.0, rel=1e-9) == today.body_mass.sum()
    assert model.body_mass[1] > today.body_mass[1] + 0.05  # the torso's capsule lost less than the limbs'


def test_the_control_cost_is_charged_on_the_clamped_control(env):
    """Actions of 1 on all 17 actuators (range ±0.4): 0.1·17·0.4² = 0.272 (Humanoid-v4 charges 1.7);
    inside the range the cost is v4's: 0.1·17·0.2² = 0.068."""
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.ones(17))
    assert info["reward_quadctrl"] == pytest.approx(-0.272, rel=1e-9)
    _, _, _, _, info = env.step(np.full(17, -0.2))
    assert info["reward_quadctrl"] == pytest.approx(-0.068, rel=1e-9)
    v4 = make_env("Humanoid-v4")
    v4.reset(seed=0)
    assert v4.step(np.ones(17))[4]["reward_quadctrl"] == pytest.approx(-1.7, rel=1e-9)


def test_the_impact_cost_is_gym_v2s_on_the_observed_contact_forces(env):
    """Once the feet touch the floor: reward_impact = −min(0.5e-6·Σ cfrc_ext², 10) with cfrc_ext
    the observation's last 84 numbers, and the reward is the sum of its four parts."""
    env.reset(seed=1)
    touched = False
    for _ in range(40):
        obs, reward, terminated, _, info = env.step(np.zeros(17))
        forces = obs[-84:]
        expected = min(0.5e-6 * float(np.sum(forces**2)), 10.0)
        assert info["reward_impact"] == pytest.approx(-expected, rel=1e-9, abs=1e-12)
        parts = info["reward_linvel"] + info["reward_quadctrl"] + info["reward_alive"] + info["reward_impact"]
        assert reward == pytest.approx(parts, rel=1e-9)
        touched |= expected > 1e-6
        if terminated:
            break
    assert touched, "the humanoid never touched the floor: the contact forces are not computed"


def test_positions_and_velocities_are_humanoid_v4s_at_reset(env):
    """Only the inertial part of the observation differs: the same seed gives v4's qpos/qvel (45
    numbers), and cinert (from 45) holds the old masses."""
    obs, _ = env.reset(seed=3)
    v4_obs, _ = make_env("Humanoid-v4").reset(seed=3)
    np.testing.assert_allclose(obs[:45], v4_obs[:45], rtol=0, atol=1e-12)
    assert obs.shape == (376,) and not np.allclose(obs[45:185], v4_obs[45:185])
    assert mujoco_task("HumanoidMuJoCo15-v4") == "Humanoid"


def test_a_humanoid_release_runs_on_it(tmp_path, monkeypatch):
    """A policy_gradients file whose env is gym's HumanoidEnv loads on HumanoidMuJoCo15-v4 (its task)."""
    import test_pg_release as pg  # the tests folder is on the path (pytest's rootdir-relative imports)

    from rlgauntlet.experiments.agents import load_for_env

    monkeypatch.setattr(pg, "OBS", 376)
    monkeypatch.setattr(pg, "ACT", 17)
    monkeypatch.setitem(pg.GYM_TASKS, "humanoid", "HumanoidEnv")
    content, meta = pg._release(5, task="humanoid")
    path = tmp_path / "model-humanoid.model"
    pg._write(path, content, meta, legacy=False)
    victim, _ = load_for_env(f"pg:{path}", "HumanoidMuJoCo15-v4")
    assert victim.trained_for == ("Humanoid",)
    with pytest.raises(UserError, match="trained on Humanoid"):  # and not on another task of its sizes
        load_for_env(f"pg:{path}", "HumanoidStandup-v4")
