"""False-robustness checks: does an agent only *look* robust because the gradient attacks fail on it?

The AutoAttack lesson (Croce & Hein 2020; Athalye et al. 2018) for RL. Each white-box attack is
judged on its own per-step objective, measured on clean states the agent visits, never on the
return (a myopic attack can rightly lose to noise in return: on the zoo CartPole DQN at ε 0.1
Random leaves 118 and PGD-10 281, while PGD changes more actions):

* MinBest: the action-change rate (greedy action on x̃ differs from the one on x), 0 or 1 per state;
* MaxDiff: KL(π(·|x̃) ‖ π(·|x)) (squared action deviation for deterministic policies);
* MinQ: the Q drop Q(x, a(x)) − Q(x, a(x̃)), in the agent's Q units.

Four checks, each a warning with its numbers when it holds (``WARNING_CHECKS``):

``worse_than_random``
    the attack's mean objective is below that of a random sign perturbation of the same ε
    (``random``: every coordinate moved by ±ε), by more than two standard errors of the paired
    per-state difference;
``no_gain_from_iterations``
    five times the steps and three more runs from random starts do not raise the objective (gain within two
    standard errors of zero) while random noise still does better than the strengthened attack
    (by two standard errors): the gradient steps carry no information the ball does not offer
    blindly;
``vanishing_gradient``
    the gradient of the attack's loss at its first iterate is zero or below
    ``GRADIENT_FLOOR`` (max-abs, loss units per input unit) on more than half the states;
``stochastic_forward``
    the policy's output changes between two calls on the same input (dropout or noise left on at
    evaluation): every gradient attack here uses one sample per step, without averaging over the
    policy's randomness (expectation over transformation), so it understates the attack.

Example:
    >>> from rlgauntlet.experiments.agents import load_for_env          # doctest: +SKIP
    >>> victim, preset = load_for_env("zoo:cartpole-dqn", "CartPole-v1")  # doctest: +SKIP
    >>> result = check_false_robustness(victim, lambda: make_env("CartPole-v1", preset),
    ...                                 [("0.1", 0.1)])                     # doctest: +SKIP
    >>> result["warnings"]                                                # doctest: +SKIP
    []
"""

from __future__ import annotations

import math
from typing import Callable

import gymnasium as gym
import torch

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.threats import THREATS, parse_threat
from rlgauntlet.victims.base import PolicyOutput, Victim

#: the gradient of an attack's loss counts as vanished at or below this max-abs value
GRADIENT_FLOOR = 1e-12
#: a check holds when its difference exceeds this many standard errors
Z = 2.0
#: the policy's output may change by this much between two calls on one input (float rounding)
#: before the forward pass counts as stochastic
WOBBLE_FLOOR = 1e-6
#: the vanishing-gradient warning holds when the gradient vanished on more than this share of states
VANISHED_SHARE = 0.5
WARNING_CHECKS = ("worse_than_random", "no_gain_from_iterations", "vanishing_gradient", "stochastic_forward")

#: objective -> (its attack at the protocol's settings, the strengthened attack), budget added
ATTACKS = {
    "minbest": ("pgd:steps=10", "pgd:steps=50,restarts=4"),
    "maxdiff": ("pgd:objective=maxdiff", "pgd:objective=maxdiff,steps=50,restarts=3"),
    "minq": ("pgd:objective=minq", "pgd:objective=minq,steps=50,restarts=4"),
}


def objectives_for(victim: Victim) -> list[str]:
    """The objectives of :data:`ATTACKS` whose attacks apply to ``victim``'s kind (the registry's
    ``kinds`` of each attack)."""
    return [name for name in ATTACKS if victim.kind in THREATS[name].kinds]


def per_step_objective(name: str, victim: Victim, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
    """The objective ``name`` of perturbed inputs ``x_adv`` against clean ``x`` (both (B, ...)):
    (B,), as its attack declares it (``measure`` of the registered attack)."""
    if name not in THREATS:
        raise ValueError(f"unknown objective {name!r}")
    return THREATS[name].measure(victim, x, x_adv)


def collect_states(victim: Victim, env_fn: Callable[[], gym.Env], seed: int, count: int) -> torch.Tensor:
    """``count`` clean network inputs the agent visits (8 episodes side by side from episode seed
    ``seed``, every other step, so that they spread over time): (count, *input_shape)."""
    from rlgauntlet.engine.rollout import evaluate_episodes

    seen: list[torch.Tensor] = []
    total = [0]
    step = [0]

    def keep(x: torch.Tensor) -> bool:
        step[0] += 1
        if step[0] % 2 == 0:
            seen.append(x.detach().clone())
            total[0] += x.shape[0]
        return total[0] >= count

    evaluate_episodes(env_fn, victim, None, range(64), seed, n_envs=8, on_inputs=keep)
    return torch.cat(seen)[:count]


def _mean_se(values: torch.Tensor) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std with ddof 1, over √n) of (n,) values."""
    v = values.double()
    n = v.numel()
    return float(v.mean()), float(v.std(unbiased=True) / math.sqrt(n)) if n > 1 else 0.0


def paired_gaps(f_attack: torch.Tensor, f_strong: torch.Tensor, f_random: torch.Tensor) -> dict[str, tuple[float, float]]:
    """The per-state differences the checks judge, as (mean, standard error) each: the attack
    against random noise, the strengthened attack's gain over the attack, and the strengthened
    attack against random noise (all (n,) objectives on the same states: paired)."""
    return {"attack_vs_random": _mean_se(f_attack - f_random), "gain": _mean_se(f_strong - f_attack),
            "strong_vs_random": _mean_se(f_strong - f_random)}


def significantly_below_zero(mean: float, sem: float) -> bool:
    """Whether a paired difference with this mean and standard error is below zero by more than
    ``Z`` standard errors (and by more than rounding: a difference of exactly 0 never counts)."""
    return mean < -Z * sem and mean < -1e-9


def vanishing_gradient_holds(fraction: float) -> bool:
    """The vanishing-gradient check: the gradient vanished on *more than* half of the states."""
    return fraction > VANISHED_SHARE


#: which draws a check makes (random noise, the attacks' random starts): one generator per state each
_DRAWS = ("check-random", "check-attack", "check-strong", "check-start")


def _rng(seed: int, rows: int, draw: str) -> BatchRNG:
    offset = 1_000_000 * (1 + _DRAWS.index(draw))  # apart from the episode indices of evaluations
    return BatchRNG([episode_generator(seed, offset + k, "threat") for k in range(rows)])


def _gradient_vanishes(attack, victim: Victim, x: torch.Tensor, seed: int) -> torch.Tensor:
    """Per row: whether the attack's loss gradient at its first iterate is below the floor."""
    from rlgauntlet.threats.attacks.base import EpsBall

    ref = attack.reference(x, victim)
    start = attack.start(EpsBall(x, attack.params.eps, attack.params.norm, victim), _rng(seed, len(x), "check-start"))
    _, grad = attack.loss_and_gradient(start, victim, ref)
    return grad.reshape(len(x), -1).abs().amax(dim=1) <= GRADIENT_FLOOR


def _stochastic_forward(victim: Victim, x: torch.Tensor) -> float:
    """The largest change of the policy's output between two calls on the same inputs."""
    with torch.no_grad():
        a, b = victim.forward(x), victim.forward(x)

    def flat(out: PolicyOutput) -> torch.Tensor:
        parts = [t for t in (out.q, out.logits, out.mean, out.log_std, out.action) if t is not None]
        return torch.cat([t.reshape(len(x), -1) for t in parts], dim=1)

    return float((flat(a) - flat(b)).abs().max())


def check_false_robustness(victim: Victim, env_fn: Callable[[], gym.Env], budgets: list[tuple[str, float]],
                           seed: int = 0, states: int = 256) -> dict:
    """Run the four checks at every budget on ``states`` clean states; see the module docstring.

    Args:
        budgets: (text, value) pairs, e.g. ``[("1/255", 0.00392)]``, in the victim's budget space.

    Returns:
        ``{"states", "rows", "warnings"}``: ``rows`` one per (objective, ε) with the mean and
        standard error of the attack, the strengthened attack and random noise, the fraction of
        states whose gradient vanished and the checks that held; ``warnings`` one line each.
    """
    x = collect_states(victim, env_fn, seed, states)
    if victim.recurrent:  # each state judged from the LSTM's initial memory (the episodes' own is not kept)
        victim.use_state([victim.initial_state() for _ in range(len(x))])
    rows, warnings = [], []
    wobble = _stochastic_forward(victim, x)
    if wobble > WOBBLE_FLOOR:
        warnings.append({"check": "stochastic_forward", "message": (
            f"the policy's output changes by up to {wobble:.3g} between two calls on the same input (dropout or "
            "noise left on): the gradient attacks use one sample per step, without averaging over that randomness, "
            "so their numbers understate the attack")})
    for text, eps in budgets:
        noise = parse_threat(f"random:eps={text}").perturb(x, victim, _rng(seed, len(x), "check-random"))
        for name in objectives_for(victim):
            plain_spec, strong_spec = (f"{s},eps={text}" for s in ATTACKS[name])
            attack, strong = parse_threat(plain_spec), parse_threat(strong_spec)
            with torch.enable_grad():
                adv = attack.perturb(x, victim, _rng(seed, len(x), "check-attack"))
                adv_strong = strong.perturb(x, victim, _rng(seed, len(x), "check-strong"))
                vanished = _gradient_vanishes(attack, victim, x, seed)
            f_attack = per_step_objective(name, victim, x, adv)
            f_strong = per_step_objective(name, victim, x, adv_strong)
            f_random = per_step_objective(name, victim, x, noise)
            (m_a, se_a), (m_s, se_s), (m_r, se_r) = (_mean_se(f) for f in (f_attack, f_strong, f_random))
            gaps = paired_gaps(f_attack, f_strong, f_random)
            (gap_random, se_gap_random), (gain, se_gain) = gaps["attack_vs_random"], gaps["gain"]
            strong_vs_random, se_strong_random = gaps["strong_vs_random"]
            held = []
            if significantly_below_zero(gap_random, se_gap_random):
                held.append("worse_than_random")
                warnings.append({"check": "worse_than_random", "objective": name, "eps": text, "message": (
                    f"{plain_spec}: its {name} objective is {m_a:.4g} ± {se_a:.2g} per step, below random sign noise "
                    f"of the same eps ({m_r:.4g} ± {se_r:.2g}) on {len(x)} clean states: the gradient misleads "
                    "the attack (gradient masking?)")})
            if gain <= Z * se_gain + 1e-9 and significantly_below_zero(strong_vs_random, se_strong_random):
                held.append("no_gain_from_iterations")
                warnings.append({"check": "no_gain_from_iterations", "objective": name, "eps": text, "message": (
                    f"{strong_spec}: 5x the steps and restarts move the {name} objective from {m_a:.4g} to only "
                    f"{m_s:.4g}, still below random sign noise ({m_r:.4g}): the iterations find nothing")})
            frac = float(vanished.double().mean())
            if vanishing_gradient_holds(frac):
                held.append("vanishing_gradient")
                warnings.append({"check": "vanishing_gradient", "objective": name, "eps": text, "message": (
                    f"{plain_spec}: the gradient of its loss is zero (max |g| <= {GRADIENT_FLOOR:g}) on "
                    f"{100 * frac:.0f}% of {len(x)} clean states: gradient attacks cannot move this agent, "
                    "which does not make it robust")})
            rows.append({"objective": name, "eps": text, "eps_value": eps, "attack": plain_spec,
                         "strengthened": strong_spec, "attack_mean": m_a, "attack_sem": se_a,
                         "strengthened_mean": m_s, "strengthened_sem": se_s, "random_mean": m_r, "random_sem": se_r,
                         "gradient_vanished_fraction": frac, "held": held})
    return {"states": int(len(x)), "stochastic_forward_max_change": wobble, "gradient_floor": GRADIENT_FLOOR,
            "rows": rows, "warnings": warnings}
