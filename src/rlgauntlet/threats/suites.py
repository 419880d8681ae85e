"""Named threat suites and budget grids: the spec lists behind ``--suite`` and ``--eps-grid``."""

from __future__ import annotations

from rlgauntlet.errors import UserError
from rlgauntlet.threats.spec import parse_params, parse_value
from rlgauntlet.victims.base import Victim

SUITES = ("adversarial", "natural", "certified", "ood-cartpole", "ood-pendulum", "ood-pong", "ood-minatar")

#: Daylight's Pong settings (α,β = [1.7, 40], kernel 3, 3°, [2, 1], perspective norm 3), JPEG
#: quality 10 (the paper gives none), and the common corruptions at severity 3.
NATURAL_IMAGE = (
    "brightness_contrast:alpha=1.7,beta=40",
    "median_blur:kernel=3",
    "rotation:degrees=3",
    "shift:ti=2,tj=1",
    "perspective:norm=3",
    "jpeg:quality=10",
    "gaussian_noise:severity=3",
    "impulse_noise:severity=3",
    "motion_blur:severity=3",
    "pixelate:severity=3",
)
#: vector observations, sizes in the victim's budget space (normalized or raw units)
NATURAL_VECTOR = (
    "gaussian_noise:std=0.1",
    "uniform_noise:eps=0.1",
    "sensor_dropout:rate=0.1",
    "sensor_bias:scale=0.1",
)


#: a slow sensor, for every agent
NATURAL_MEMORY = ("obs_delay:steps=1",)
#: actuator noise, for continuous actions (env action units)
NATURAL_ACTION = ("action_noise:std=0.1",)
#: a default physics shift per env family (the OOD benchmark's ×2 for CartPole's pole; heavier
#: bodies for Pendulum and MuJoCo)
NATURAL_PHYSICS = {
    "CartPole": "physics:param=length,scale=2",
    "Pendulum": "physics:param=m,scale=1.5",
    "mujoco": "physics:param=body_mass,scale=1.5",
}


def default_physics(env_id: str | None) -> str | None:
    """The natural suite's physics shift for ``env_id`` (None where no physics parameter is known)."""
    if env_id is None:
        return None
    from rlgauntlet.envs.presets import resolve_preset

    family = env_id.split("-")[0]
    if family in NATURAL_PHYSICS:
        return NATURAL_PHYSICS[family]
    return NATURAL_PHYSICS["mujoco"] if resolve_preset(env_id) == "mujoco" else None


#: the paper's multipliers of the default value (its Table 1)
CARTPOLE_MULTIPLIERS = tuple(f"1/{k}" for k in range(10, 1, -1)) + tuple(str(k) for k in range(2, 11))
PENDULUM_MULTIPLIERS = ("0.05", "0.1", "0.2", "0.5", "2", "5", "10", "20")
CARTPOLE_PARAMS = ("gravity", "masscart", "masspole", "length", "force_mag")
PENDULUM_PARAMS = ("g", "m", "l", "max_speed", "max_torque")
#: imagecorruptions' severities 1–5 (the paper evaluates 3–5, pixelate 3–4)
PONG_CORRUPTIONS = ("gaussian_noise", "impulse_noise", "motion_blur", "pixelate")

#: the Pong corruptions that mean something on MinAtar's object channels: noise flips cells,
#: pixelate merges them; motion blur smears objects along a direction the channels do not have
MINATAR_CORRUPTIONS = ("gaussian_noise", "impulse_noise", "pixelate")
#: MinAtar's own game-parameter shift: sticky actions (the paper plays at 0.1)
MINATAR_STICKY = ("0", "0.25", "0.5", "0.75")

#: the OOD benchmark's shift grids (paper 002, Table 1): suite -> (env family, specs)
OOD_SUITES = {
    "ood-cartpole": ("CartPole", tuple(f"physics:param={p},scale={m}" for p in CARTPOLE_PARAMS
                                       for m in CARTPOLE_MULTIPLIERS)),
    "ood-pendulum": ("Pendulum", tuple(f"physics:param={p},scale={m}" for p in PENDULUM_PARAMS
                                       for m in PENDULUM_MULTIPLIERS)),
    "ood-pong": ("Pong", tuple(f"{c}:severity={s}" for c in PONG_CORRUPTIONS for s in range(1, 6))),
    "ood-minatar": ("MinAtar", tuple(f"{c}:severity={s}" for c in MINATAR_CORRUPTIONS for s in range(1, 6))
                    + tuple(f"physics:param=sticky_action_prob,value={v}" for v in MINATAR_STICKY)),
}


def ood_suite(name: str, env_id: str | None = None) -> list[str]:
    """The shift specs of suite ``name``; with ``env_id``, checked to be the suite's env."""
    if name not in OOD_SUITES:
        raise UserError(f"unknown OOD suite {name!r}; choose one of: {', '.join(OOD_SUITES)}")
    family, specs = OOD_SUITES[name]
    if env_id is not None and family.lower() not in env_id.lower():
        raise UserError(f"--suite {name} shifts {family}; use it with a {family} env, not {env_id}")
    return list(specs)


def natural_suite(victim: Victim, env_id: str | None = None) -> list[str]:
    """The natural-perturbation suite at its documented default severities: observation
    changes, a one-step observation delay, actuator noise (continuous actions) and a physics
    shift (envs with known physics parameters)."""
    specs = list(NATURAL_IMAGE if victim.budget_space == "pixel01" else NATURAL_VECTOR) + list(NATURAL_MEMORY)
    if not victim.is_discrete:
        specs += list(NATURAL_ACTION)
    physics = default_physics(env_id)
    return specs + ([physics] if physics else [])


def adversarial_suite(victim: Victim) -> list[str]:
    """The PA-AD comparison set (without budget), restricted to what fits the victim:
    Random, MinBest (FGSM and PGD-10), MinBest+Momentum, MinQ (DQN only), MaxDiff."""
    specs = ["random"]
    if victim.is_discrete:
        specs += ["fgsm", "pgd:steps=10", "momentum"]
    if victim.kind == "q":
        specs.append("pgd:objective=minq")
    specs.append("pgd:objective=maxdiff")
    return specs


def suite_specs(name: str, victim: Victim, eps: str | None, grid: bool = False, env_id: str | None = None) -> list[str]:
    """Threat specs of suite ``name`` for ``victim`` on ``env_id`` at budget ``eps`` (left open when ``grid``)."""
    if name not in SUITES:
        raise UserError(f"unknown suite {name!r}; choose one of: {', '.join(SUITES)}")
    if name == "certified":  # not threats: figures from bounds, which the evaluation adds itself
        if eps is None and not grid:
            raise UserError("--suite certified needs a budget: add --eps VALUE (e.g. --eps 1/255) or --eps-grid")
        if victim.recurrent:  # `certify` refuses it too: no interval bounds through a memory
            raise UserError("the certified suite needs interval bounds, and this agent is recurrent (an LSTM: its "
                            "memory carries across steps), so no certification applies to it; drop certified")
        if not victim.is_discrete:
            raise UserError("--suite certified gives GWC for discrete agents; for continuous agents run "
                            "`rlgauntlet certify` (certified action deviation)")
        return []
    if name in OOD_SUITES:
        if grid or eps is not None:
            raise UserError(f"--suite {name} is a fixed grid of shifts; drop --eps / --eps-grid")
        return ood_suite(name, env_id)
    if name == "natural":
        if grid:
            raise UserError("--suite natural has fixed severities; --eps-grid applies to budgeted threats only")
        return natural_suite(victim, env_id)
    if eps is None and not grid:
        raise UserError(f"--suite {name} needs a budget: add --eps VALUE (e.g. --eps 1/255) or --eps-grid")
    specs = adversarial_suite(victim)
    if grid:
        return specs
    return [f"{s}{',' if ':' in s else ':'}eps={eps}" for s in specs]


def expand_eps_grid(specs: list[str], grid: str) -> list[str]:
    """One spec per budget of ``grid`` (``0,1/255,2/255``) for every spec that has no ``eps``."""
    values = [v.strip() for v in grid.split(",") if v.strip()]
    if not values:
        raise UserError("--eps-grid is empty; write e.g. --eps-grid 0,1/255,2/255")
    for v in values:
        if isinstance(parse_value(v, f"--eps-grid {grid}"), (bool, str)):
            raise UserError(f"--eps-grid {grid}: {v!r} is not a number; write e.g. --eps-grid 0,1/255,2/255")
    out = []
    for spec in specs:
        name, _, rest = spec.partition(":")
        if "eps" in parse_params(rest, spec):
            raise UserError(f"threat spec {spec!r} already sets eps; drop it when using --eps-grid")
        out += [f"{name}:{rest + ',' if rest else ''}eps={v}" for v in values]
    return out


def shift_point(spec: str) -> tuple[str, float] | None:
    """Where a spec sits on a shift grid: (``physics:PARAM``, scale) or (corruption, severity);
    None for a spec that is no grid point. Scales may be fractions (``scale=1/4`` → 0.25).

    Example:
        >>> shift_point("physics:param=length,scale=1/4"), shift_point("pixelate:severity=3")
        (('physics:length', 0.25), ('pixelate', 3.0))
    """
    name, _, rest = spec.partition(":")
    try:
        params = parse_params(rest, spec)
    except UserError:
        return None
    if name == "physics" and "scale" in params and "param" in params:
        key, value = f"physics:{params['param']}", params["scale"]
    elif "severity" in params:
        key, value = name, params["severity"]
    else:
        return None
    value = parse_value(value, spec) if isinstance(value, str) else value
    return (key, float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
