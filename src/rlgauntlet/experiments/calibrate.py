"""Minimal-severity search: the smallest severity of a threat that reaches a target impact.

The Daylight paper tuned each perturbation's severity by hand; :func:`calibrate` bisects the
threat's severity parameter instead, assuming impact grows with severity. Each probe is an
ordinary evaluation (stored, so a repeated search reuses it). The impact of a probe has a
standard error se = sem(returns) / (Score_max − Score_min); a decision whose 95% interval
(±1.96·se) contains the target is flagged as uncertain, with advice to add episodes.

Example:
    >>> SEARCH_SPACES["rotation"]
    SearchSpace(param='degrees', low=0.0, high=45.0, step='float')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from rlgauntlet.errors import UserError
from rlgauntlet.threats import known_threats, parse_threat
from rlgauntlet.threats.spec import split_items

Z95 = 1.96


@dataclass(frozen=True)
class SearchSpace:
    """Where to search a threat's severity: ``low`` is harmless, ``high`` the strongest tried.

    ``step``: ``float``, ``int`` or ``odd`` (odd integers, e.g. blur kernels). ``high`` may be
    below ``low`` when smaller values are stronger (JPEG quality, pixelate factor).
    """

    param: str
    low: float
    high: float
    step: Literal["float", "int", "odd"] = "float"

    def value(self, t: float) -> float | int:
        v = self.low + t * (self.high - self.low)
        if self.step == "int":
            return int(round(v))
        if self.step == "odd":
            return int(2 * round((v - 1) / 2) + 1)
        return round(v, 6)


SEARCH_SPACES: dict[str, SearchSpace] = {
    "rotation": SearchSpace("degrees", 0.0, 45.0),
    "perspective": SearchSpace("norm", 0.0, 20.0),
    "brightness_contrast": SearchSpace("beta", 0.0, 255.0),
    "shift": SearchSpace("ti", 0, 20, "int"),
    "median_blur": SearchSpace("kernel", 1, 21, "odd"),
    "jpeg": SearchSpace("quality", 100, 1, "int"),
    "gaussian_noise": SearchSpace("std", 0.0, 1.0),
    "uniform_noise": SearchSpace("eps", 0.0, 1.0),
    "impulse_noise": SearchSpace("amount", 0.0, 1.0),
    "pixelate": SearchSpace("factor", 1.0, 0.05),
    "motion_blur": SearchSpace("severity", 1, 5, "int"),
    "sensor_dropout": SearchSpace("rate", 0.0, 1.0),
    "sensor_bias": SearchSpace("scale", 0.0, 1.0),
    "random": SearchSpace("eps", 0.0, 0.5),
    "fgsm": SearchSpace("eps", 0.0, 0.5),
    "pgd": SearchSpace("eps", 0.0, 0.5),
}


@dataclass
class Probe:
    value: float | int
    spec: str
    return_mean: float
    impact: float
    impact_se: float

    def uncertain_about(self, target: float) -> bool:
        """True when the target lies inside this probe's 95% interval: the decision could flip."""
        return abs(self.impact - target) < Z95 * self.impact_se


def _spec(base: str, param: str, value) -> str:
    name, _, rest = base.partition(":")
    items = [i for i in split_items(rest, base) if i and not i.strip().startswith(f"{param}=")]
    return f"{name}:{','.join([*items, f'{param}={value}'])}"


def calibrate(
    base_spec: str,
    target_impact: float,
    evaluate: Callable[[str], dict],
    score_max: float,
    score_min: float,
    space: SearchSpace | None = None,
    iterations: int = 8,
) -> dict:
    """Bisect the severity of ``base_spec`` for the smallest one with impact ≥ ``target_impact``.

    Args:
        base_spec: threat spec without the searched parameter, e.g. ``rotation``.
        evaluate: runs one evaluation of a full spec and returns its summary.
        score_max, score_min: clean and argmin-agent mean returns (the impact scale).
        space: search space (default from :data:`SEARCH_SPACES`).
        iterations: bisection steps after the two end points.
    """
    name = base_spec.partition(":")[0]
    space = space or SEARCH_SPACES.get(name)
    if space is None:
        raise UserError(f"no default severity range for {name!r}; give --param, --low and --high")
    if score_max == score_min:
        raise UserError("the clean agent scores what the argmin agent scores: impact is undefined for this agent")
    scale = score_max - score_min
    probes: list[Probe] = []

    def probe(t: float) -> Probe:
        value = space.value(t)
        spec = _spec(base_spec, space.param, value)
        parse_threat(spec)  # a bad value is a user error before anything runs
        s = evaluate(spec)
        p = Probe(value, spec, s["return_mean"], (score_max - s["return_mean"]) / scale, s["return_sem"] / abs(scale))
        probes.append(p)
        return p

    top = probe(1.0)
    result = {"threat": base_spec, "param": space.param, "target_impact": target_impact, "low": space.low,
              "high": space.high, "score_max": score_max, "score_min": score_min}
    if top.impact < target_impact:
        result.update(reached=False, severity=None, impact=top.impact, impact_se=top.impact_se,
                      probes=[p.__dict__ for p in probes],
                      message=f"even {space.param}={top.value} reaches only impact {top.impact:.3f}; raise --high")
        return result
    lo_t, hi_t, best = 0.0, 1.0, top
    for _ in range(iterations):
        mid_t = (lo_t + hi_t) / 2
        if space.value(mid_t) in (space.value(lo_t), space.value(hi_t)):
            break  # integer grid exhausted
        p = probe(mid_t)
        if p.impact >= target_impact:
            hi_t, best = mid_t, p
        else:
            lo_t = mid_t
    uncertain = [p.value for p in probes if p.uncertain_about(target_impact)]
    result.update(
        reached=True, severity=best.value, spec=best.spec, impact=best.impact, impact_se=best.impact_se,
        ci95=[best.impact - Z95 * best.impact_se, best.impact + Z95 * best.impact_se],
        uncertain_probes=uncertain,
        message=("decisions at " + ", ".join(map(str, uncertain)) + " are within the 95% interval of the target: "
                 "add --episodes" if uncertain else "every decision was outside the 95% interval of the target"),
        probes=[p.__dict__ for p in probes],
    )
    return result


def search_space(threat: str, param: str | None = None, low: float | None = None,
                 high: float | None = None) -> SearchSpace:
    """The search space of ``threat`` (its default, with any of ``param``/``low``/``high`` overridden)."""
    name = threat.partition(":")[0]
    space = SEARCH_SPACES.get(name)
    if param is not None or low is not None or high is not None:
        if param is None and space is None:
            raise UserError(f"no default severity parameter for {name!r}; give --param")
        base = space or SearchSpace(param, 0.0, 1.0)
        space = SearchSpace(param or base.param, base.low if low is None else low, base.high if high is None else high,
                            base.step if (param is None or param == base.param) else "float")
        if space.low == space.high:
            raise UserError(f"--low and --high are both {space.low}: nothing to search; give a range")
        default = SEARCH_SPACES.get(name)
        if default is not None and space.param == default.param and (space.high - space.low) * (default.high - default.low) < 0:
            stronger = "larger" if default.high > default.low else "smaller"
            raise UserError(f"--low is the harmless end and --high the strongest; for {name} {stronger} "
                            f"{space.param} is stronger, so swap them (--low {space.high} --high {space.low})")
    if name not in known_threats():
        parse_threat(threat)  # raises the unknown-threat error with suggestions
    if space is None:
        raise UserError(f"no default severity range for {name!r}; give --param, --low and --high")
    _, _, rest = threat.partition(":")
    fixed = [i.split("=", 1)[0].strip() for i in split_items(rest, threat) if i.strip()] if rest.strip() else []
    if space.param in fixed:
        raise UserError(f"--threat {threat} sets {space.param}, the parameter calibrate searches; drop it "
                        f"(e.g. --threat {name}) or search another one with --param")
    return space


def calibrate_agent(
    agent, env: str, threat: str, target_impact: float, store: str | Path = ":memory:",
    space: SearchSpace | None = None, iterations: int = 8, episodes: int = 10, seed: int = 0, n_envs: int = 4,
    preset: str | None = None, on_probe: Callable[[dict], None] | None = None, threads: int | None = None,
) -> dict:
    """Calibrate ``threat`` against an agent: clean and argmin-agent evaluations set the impact
    scale, then :func:`calibrate` bisects; every probe is a stored evaluation (reused by a
    repeated search) and the search itself is stored as a ``calibration`` run whose metrics
    are the severity found and its impact. ``agent`` is a spec string (loaded with the keyword
    options), an ``AgentSpec`` or a Victim.
    """
    from rlgauntlet.experiments.agents import open_job
    from rlgauntlet.experiments.runs import check_seed, run_evaluation
    from rlgauntlet.experiments.store import run_key
    from rlgauntlet.metrics.impact import ARGMIN_LABEL, ArgminVictim

    if not 0 < target_impact <= 1:
        raise UserError(f"--target-impact {target_impact} must be in (0, 1]")
    check_seed(seed, episodes)
    space = space or search_space(threat)

    with open_job(agent, env, store, threads, preset) as job:
        victim, env_info, env_fn = job.victim, job.env_info, job.env_fn

        def evaluate_spec(spec: str) -> dict:
            t = parse_threat(spec) if spec != "clean" else None
            if t is not None:
                t.check_victim(victim)
            summary = run_evaluation(job.store, env_fn, env_info, victim, t, episodes, seed, n_envs=n_envs, resume=True)
            if on_probe is not None:
                on_probe(summary)
            return summary

        parse_threat(_spec(threat, space.param, space.high)).check_victim(victim)  # refused before any probe
        results = job.store
        score_max = evaluate_spec("clean")["return_mean"]
        score_min = run_evaluation(results, env_fn, env_info, ArgminVictim(victim), None, episodes, seed,
                                   n_envs=n_envs, resume=True, label=ARGMIN_LABEL)["return_mean"]
        result = calibrate(threat, target_impact, evaluate_spec, score_max, score_min, space, iterations)
        meta = {"agent": victim.description, "env": env_info, "threat": threat, "target_impact": target_impact,
                "space": space.__dict__, "episodes": episodes, "seed": seed}
        run_id = results.create_run(run_key({**meta, "kind": "calibration"}), meta, kind="calibration")
        results.add_metric(run_id, "severity", result.get("severity"), space.param)
        results.add_metric(run_id, "impact", result["impact"], "fraction of the clean-to-argmin score range")
        result["run_id"] = run_id
    return result
