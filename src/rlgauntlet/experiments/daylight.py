"""The Daylight paper's Tables 1–6 as one job: per game, Carlini & Wagner's attack beside each
natural perturbation at the paper's settings (brightness & contrast, median blur, rotation,
shifting, JPEG compression artifacts, perspective transformation), each with its impact and its
perceptual distance, and the paper's numbers beside ours.

Impact is Daylight §2.5: I = (score_max − score_adv) / (score_max − score_min), score_max the
agent's clean return and score_min the return of the agent that always takes its lowest-scored
action (the argmin agent, :mod:`rlgauntlet.metrics.impact`), both over the same seeds; its
standard error is the perturbed return's over episodes divided by (score_max − score_min) (the
two reference scores taken as given). Distances: SSIM and PSNR always (every ``perceptual_every``
step), LPIPS when the user gives its weights (the paper's P_similarity). C&W is the paper's RL
formulation (the smallest ℓ2 change of the input that changes the agent's action,
:mod:`rlgauntlet.threats.attacks.cw`) with a step budget a CPU affords (:data:`CW_SPEC`).

The claim each row checks: the natural perturbation reaches a comparable or higher impact
(not below C&W's by more than two standard errors of the difference) at a lower perceptual
distance (LPIPS where measured, else 1 − SSIM).

Example:
    >>> daylight_specs("PongNoFrameskip-v4")["rotation"]
    'rotation:degrees=3'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from rlgauntlet.errors import UserError

#: the perturbations of Tables 1–6, in the paper's order: name -> (table, the paper's column name)
PERTURBATIONS: dict[str, tuple[int, str]] = {
    "brightness_contrast": (1, "B&C"), "median_blur": (2, "Blurring"), "rotation": (3, "Rotation"),
    "shift": (4, "Shifting"), "jpeg": (5, "CA"), "perspective": (6, "PT")}
#: JPEG quality: the paper gives none (the natural suite's, threats.suites.NATURAL_IMAGE)
JPEG_QUALITY = 10
#: C&W as run here: 20 Adam steps for each of 3 values of c (the paper gives no budget; 100 × 6
#: costs about 600 gradient steps per env step, hours per Pong episode on a CPU)
CW_SPEC = "cw:steps=20,search_steps=3,lr=0.05"


@dataclass(frozen=True)
class PaperRow:
    """One row of one of Tables 1–6: the perturbation's setting, C&W's and the perturbation's
    impact (mean ± the paper's ±) and P_similarity (LPIPS)."""

    spec: str
    setting: str
    cw_impact: float
    cw_spread: float
    impact: float
    spread: float
    cw_lpips: float
    lpips: float


def _rows(cw: tuple[float, float], rows: dict[str, tuple]) -> dict[str, PaperRow]:
    return {name: PaperRow(spec, setting, cw[0], cw[1], *numbers) for name, (spec, setting, *numbers) in rows.items()}


#: Tables 1–6 of the paper, per game (its C&W P_similarity differs between tables for Pong: 0.608
#: in Tables 1, 4, 5, 6 and 0.245 in Tables 2 and 3; each table's own number is kept)
PAPER: dict[str, dict[str, PaperRow]] = {
    "BankHeist": _rows((0.986, 0.009), {
        "brightness_contrast": ("brightness_contrast:alpha=1.2,beta=40", "[1.2, 40]", 0.971, 0.030, 0.171, 0.127),
        "median_blur": ("median_blur:kernel=5", "5", 0.983, 0.009, 0.171, 0.168),
        "rotation": ("rotation:degrees=1.4", "1.4°", 1.0, 0.004, 0.171, 0.064),
        "shift": ("shift:ti=1,tj=1", "[1, 1]", 0.989, 0.005, 0.171, 0.060),
        "jpeg": (f"jpeg:quality={JPEG_QUALITY}", "–", 0.984, 0.013, 0.171, 0.067),
        "perspective": ("perspective:norm=1", "1", 1.0, 0.003, 0.171, 0.022)}),
    "JamesBond": _rows((0.516, 0.231), {
        "brightness_contrast": ("brightness_contrast:alpha=0.9,beta=20", "[0.9, 20]", 0.896, 0.047, 0.326, 0.015),
        "median_blur": ("median_blur:kernel=3", "3", 0.634, 0.200, 0.326, 0.048),
        "rotation": ("rotation:degrees=1.6", "1.6°", 0.725, 0.189, 0.326, 0.029),
        "shift": ("shift:ti=0,tj=1", "[0, 1]", 0.989, 0.140, 0.326, 0.048),
        "jpeg": (f"jpeg:quality={JPEG_QUALITY}", "–", 1.0, 0.128, 0.326, 0.035),
        "perspective": ("perspective:norm=1", "1", 0.978, 0.087, 0.326, 0.007)}),
    "Pong": _rows((0.995, 0.014), {
        "brightness_contrast": ("brightness_contrast:alpha=1.7,beta=40", "[1.7, 40]", 0.996, 0.009, 0.608, 0.245),
        "median_blur": ("median_blur:kernel=3", "3", 1.0, 0.0, 0.245, 0.098),
        "rotation": ("rotation:degrees=3", "3°", 0.99, 0.015, 0.245, 0.112),
        "shift": ("shift:ti=2,tj=1", "[2, 1]", 1.0, 0.0, 0.608, 0.217),
        "jpeg": (f"jpeg:quality={JPEG_QUALITY}", "–", 0.962, 0.032, 0.608, 0.029),
        "perspective": ("perspective:norm=3", "3", 0.996, 0.009, 0.608, 0.029)}),
    "RiverRaid": _rows((0.9498, 0.030), {
        "brightness_contrast": ("brightness_contrast:alpha=2.4,beta=-275", "[2.4, −275]", 0.973, 0.016, 0.255, 0.168),
        "median_blur": ("median_blur:kernel=5", "5", 0.968, 0.015, 0.255, 0.134),
        "rotation": ("rotation:degrees=1.8", "1.8°", 0.965, 0.042, 0.255, 0.059),
        "shift": ("shift:ti=1,tj=2", "[1, 2]", 0.9568, 0.023, 0.255, 0.095),
        "jpeg": (f"jpeg:quality={JPEG_QUALITY}", "–", 0.8218, 0.051, 0.255, 0.057),
        "perspective": ("perspective:norm=2", "2", 0.99, 0.006, 0.255, 0.046)}),
    "TimePilot": _rows((0.774, 0.159), {
        "brightness_contrast": ("brightness_contrast:alpha=2.4,beta=-260", "[2.4, −260]", 0.906, 0.239, 0.279, 0.070),
        "median_blur": ("median_blur:kernel=5", "5", 0.805, 0.150, 0.279, 0.124),
        "rotation": ("rotation:degrees=5", "5°", 0.910, 0.158, 0.279, 0.068),
        "shift": ("shift:ti=2,tj=2", "[2, 2]", 0.851, 0.199, 0.279, 0.120),
        "jpeg": (f"jpeg:quality={JPEG_QUALITY}", "–", 0.790, 0.271, 0.279, 0.067),
        "perspective": ("perspective:norm=3", "3", 0.852, 0.198, 0.279, 0.029)}),
}
#: the Atari ids of the paper's games (Gymnasium's spelling: Riverraid)
GAME_IDS = {"BankHeist": "BankHeist", "JamesBond": "Jamesbond", "Pong": "Pong", "RiverRaid": "Riverraid",
            "TimePilot": "TimePilot"}


def game_of(env_id: str) -> str | None:
    """The paper's game an env id plays (``RiverraidNoFrameskip-v4`` -> ``RiverRaid``; SA-DQN's
    ``SADQN/Pong-v0`` -> ``Pong``), or None."""
    base = env_id.rpartition("/")[2].split("NoFrameskip")[0].split("-")[0].lower()
    return next((game for game, name in GAME_IDS.items() if name.lower() == base), None)


def daylight_specs(env_id: str, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The threat spec of each perturbation of Tables 1–6 for ``env_id``: the paper's settings for
    its game, with ``settings`` (perturbation -> spec) replacing any of them. A game the paper has
    no row for needs every perturbation in ``settings``."""
    settings = dict(settings or {})
    unknown = [name for name in settings if name not in PERTURBATIONS]
    if unknown:
        raise UserError(f"--setting {unknown[0]}: not a perturbation of the paper's tables; choose among "
                        f"{', '.join(PERTURBATIONS)}")
    for name, spec in settings.items():
        if spec.split(":")[0] != name:
            raise UserError(f"--setting {name}={spec}: the spec must be a {name} one, e.g. {name}:...")
    game = game_of(env_id)
    if game is None:
        missing = [name for name in PERTURBATIONS if name not in settings]
        if missing:
            raise UserError(f"{env_id} is none of the paper's games ({', '.join(PAPER)}), so it has no settings to "
                            f"take; give every perturbation's with --setting (missing: {', '.join(missing)}), e.g. "
                            "--setting rotation=rotation:degrees=3")
        return {name: settings[name] for name in PERTURBATIONS}
    return {name: settings.get(name, PAPER[game][name].spec) for name in PERTURBATIONS}


def impact_with_se(clean: float, returns: list[float], floor: float) -> tuple[float | None, float | None]:
    """Daylight's impact of perturbed ``returns`` between the clean score and ``floor`` (the
    argmin agent's; :func:`rlgauntlet.metrics.impact.impact`), and its standard error over
    episodes (the two scores taken as given); (None, None) where clean equals the floor.

    Example:
        >>> impact_with_se(20.0, [0.0, 10.0], -20.0)
        (0.375, 0.125)
    """
    from rlgauntlet.metrics.impact import impact

    value = impact(clean, sum(returns) / len(returns), floor)
    if value is None or len(returns) < 2:
        return value, None
    mean = sum(returns) / len(returns)
    sem = math.sqrt(sum((r - mean) ** 2 for r in returns) / (len(returns) - 1) / len(returns))
    return value, sem / abs(clean - floor)


def distance_of(row: dict) -> tuple[str, float | None]:
    """The perceptual distance a row is judged on: LPIPS where measured, else 1 − SSIM."""
    if row.get("lpips") is not None:
        return "LPIPS", row["lpips"]
    return "1 − SSIM", None if row.get("ssim") is None else 1.0 - row["ssim"]


def verdict(cw: dict, natural: dict) -> str:
    """Whether ``natural`` holds the paper's claim against C&W: ``held`` (impact not below C&W's
    by more than two standard errors of the difference, and a lower distance), or ``not held``
    with the reason.

    Example:
        >>> verdict({"impact": 0.9, "impact_se": 0.05, "ssim": 0.7}, {"impact": 0.85, "impact_se": 0.02, "ssim": 0.9})
        'held'
    """
    if cw["impact"] is None or natural["impact"] is None:
        return "no impact: the clean agent scores what the argmin agent scores"
    noise = 2.0 * math.hypot(cw.get("impact_se") or 0.0, natural.get("impact_se") or 0.0)
    name, ours = distance_of(natural)
    _, theirs = distance_of(cw)
    if natural["impact"] < cw["impact"] - noise:
        return f"not held: impact {natural['impact']:.3f} below C&W's {cw['impact']:.3f} by more than {noise:.3f}"
    if ours is None or theirs is None:
        return "impact held; no distance measured"
    if ours >= theirs:
        return f"not held: {name} {ours:.3f} not below C&W's {theirs:.3f}"
    return "held"


def run_daylight(agent, env: str, settings: Mapping[str, str] | None = None, episodes: int = 10, seed: int = 0,
                 n_envs: int = 8, store: str | Path | None = None, lpips_weights: str | Path | None = None,
                 cw: str = CW_SPEC, perceptual_every: int = 10, threads: int | None = None,
                 on_start: Callable | None = None, on_episode: Callable | None = None) -> dict:
    """Run Tables 1–6 on ``agent`` (an agent spec or :class:`~rlgauntlet.experiments.agents.AgentSpec`)
    in ``env``: clean, the argmin agent, C&W and the six perturbations (:func:`daylight_specs`),
    ``episodes`` each, every episode kept in ``store`` (a run again continues where it stopped).
    Returns the result: per perturbation a row with ours and the paper's numbers and the claim's
    verdict."""
    from rlgauntlet.experiments.evaluate import evaluate

    specs = daylight_specs(env, settings)
    game = game_of(env)
    report = evaluate(agent, env, [cw, *specs.values()], episodes=episodes, seed=seed, n_envs=n_envs, store=store,
                      resume=store is not None, impact=True, lpips_weights=lpips_weights,
                      perceptual_every=perceptual_every, threads=threads, on_start=on_start, on_episode=on_episode)
    score_max, score_min = report.score_max, report.score_min  # C&W refuses a continuous agent before any episode

    def row(ev: dict) -> dict:
        value, se = impact_with_se(score_max, ev["returns"], score_min)
        return {"spec": ev["spec"], "return_mean": ev["return_mean"], "return_sem": ev["return_sem"],
                "episodes": ev["episodes"], "impact": value, "impact_se": se, "ssim": ev.get("ssim_mean"),
                "psnr": ev.get("psnr_mean"), "lpips": ev.get("lpips_mean")}

    evaluations = report.evaluations[1:]  # clean first, then the threats in the order given
    cw_row = row(evaluations[0])
    rows = []
    for (name, spec), ev in zip(specs.items(), evaluations[1:]):
        ours = row(ev)
        paper = PAPER[game][name] if game and spec == PAPER[game][name].spec else None
        table, column = PERTURBATIONS[name]
        rows.append({"table": table, "perturbation": name, "column": column, **ours,
                     "verdict": verdict(cw_row, ours), "distance": distance_of(ours)[0],
                     "paper": None if paper is None else {
                         "setting": paper.setting, "cw_impact": paper.cw_impact, "cw_spread": paper.cw_spread,
                         "impact": paper.impact, "spread": paper.spread, "cw_lpips": paper.cw_lpips,
                         "lpips": paper.lpips}})
    return {"agent": report.agent, "env": report.env, "game": game, "episodes": episodes, "seed": seed,
            "score_max": score_max, "score_min": score_min, "cw": cw_row, "rows": rows,
            "lpips": lpips_weights is not None, "perceptual_every": perceptual_every}
