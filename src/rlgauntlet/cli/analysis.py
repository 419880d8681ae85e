"""``rlgauntlet spectrum``, ``calibrate`` and ``certify``: analyses of one agent."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from rlgauntlet.cli.common import (agent_help, app, console, out_console, DEFAULT_STORE_NAME, fmt, PRESET, KIND, VECNORMALIZE,
                                   INPUT_SPACE, PRECISION, DEVICE, ALLOW_PICKLE, OTHER_ENV, THREADS, agent_spec, KEPT,
                                   check_outputs, check_png, finite_number)
from rlgauntlet.common.outputs import write_json
from rlgauntlet.errors import UserError


@app.command()
def spectrum(
    agent: str = typer.Option(..., help="the agent whose visited states are analysed. Example: --agent zoo:pong-ppo"),
    env: str = typer.Option(..., help="Gymnasium id (an image env). Example: --env PongNoFrameskip-v4"),
    threat: List[str] = typer.Option(..., help="threat spec, repeatable. Example: --threat rotation:degrees=3"),
    steps: int = typer.Option(256, min=1, help="clean agent steps whose observations are analysed. Example: --steps 512"),
    seed: int = typer.Option(0, min=0, help="episode seed. Example: --seed 1"),
    out: Path = typer.Option(Path("spectrum.png"), help="PNG to write; the numbers go beside it as JSON. Example: --out pong_spectrum.png"),
    preset: Optional[str] = PRESET, device: str = DEVICE, kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE, input_space: Optional[str] = INPUT_SPACE,
    precision: str = PRECISION, threads: Optional[int] = THREADS, allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """Power spectrum of clean vs perturbed observations and the energy change per frequency band.

    As the Daylight paper's Figure 1, on the newest frame of the states the clean agent visits.

    Example: rlgauntlet spectrum --agent zoo:pong-ppo --env PongNoFrameskip-v4 --threat rotation:degrees=3 --threat jpeg:quality=10
    """
    from rlgauntlet.experiments.spectrum import spectrum as run_spectrum
    from rlgauntlet.metrics.spectrum import plot_spectrum

    check_png(out, kind="spectrum")
    described = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
    report = run_spectrum(described, env, threat, steps, seed, threads=threads)
    plot_spectrum(report, out)
    write_json(out.with_suffix(".json"), report, kind="spectrum numbers")
    table = Table(title=f"energy change vs original, {report['steps']} states")
    for col in ("threat", "DC", "low", "mid", "high"):
        table.add_column(col, justify="left" if col == "threat" else "right")
    for spec, t in report["threats"].items():
        rc = t["relative_change"]
        table.add_row(spec, *[f"{rc[b]:+.1%}" if rc[b] is not None else "-" for b in ("dc", "low", "mid", "high")])
    out_console.print(table)
    console.print(f"wrote {out} and {out.with_suffix('.json')}")


@app.command()
def calibrate(
    agent: str = typer.Option(..., help="the agent to calibrate against. Example: --agent zoo:pong-ppo"),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env PongNoFrameskip-v4"),
    threat: str = typer.Option(..., help="threat (spec without the searched parameter). Example: --threat rotation"),
    target_impact: float = typer.Option(..., callback=finite_number, help="impact to reach, in (0, 1]. Example: --target-impact 0.9"),
    param: Optional[str] = typer.Option(None, help="parameter to search (default: the threat's severity). Example: --param degrees"),
    low: Optional[float] = typer.Option(None, callback=finite_number, help="harmless end of the range. Example: --low 0"),
    high: Optional[float] = typer.Option(None, callback=finite_number, help="strongest end of the range. Example: --high 30"),
    iterations: int = typer.Option(8, min=1, help="bisection steps. Example: --iterations 10"),
    episodes: int = typer.Option(10, min=2, help="episodes per probe. Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed. Example: --seed 1"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs side by side. Example: --n-envs 8"),
    store: Path = typer.Option(Path(DEFAULT_STORE_NAME), help="results store (probes are cached there). Example: --store runs.sqlite"),
    out: Optional[Path] = typer.Option(None, help="write the search as JSON. Example: --out rotation_calibration.json"),
    preset: Optional[str] = PRESET, device: str = DEVICE, kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE, input_space: Optional[str] = INPUT_SPACE,
    precision: str = PRECISION, threads: Optional[int] = THREADS, allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """Find the smallest severity of a threat that reaches a target impact.

    Bisection over the threat's severity, with a 95% confidence check on each decision.

    Example: rlgauntlet calibrate --agent zoo:pong-ppo --env PongNoFrameskip-v4 --threat rotation --target-impact 0.9
    """
    from rlgauntlet.experiments.calibrate import calibrate_agent, search_space

    if not 0 < target_impact <= 1:
        raise UserError(f"--target-impact {target_impact} must be in (0, 1]")
    check_outputs(out, store=store, kind="calibration")
    KEPT["note"] = f"finished probes are kept in {store}; run the same command again to reuse them"
    name = threat.partition(":")[0]
    space = search_space(threat, param, low, high)
    described = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
    result = calibrate_agent(
        described, env, threat, target_impact, store, space, iterations, episodes, seed, n_envs, threads=threads,
        on_probe=lambda s: console.print(f"  {s['spec']}: return {s['return_mean']:.4g} ± {s['return_sem']:.2g}"),
    )
    table = Table(title=f"{name}: impact per probe (target {target_impact})")
    for col in ("value", "return", "impact", "± 95%"):
        table.add_column(col, justify="right")
    for p in sorted(result["probes"], key=lambda p: p["value"]):
        table.add_row(str(p["value"]), fmt(p["return_mean"]), f"{p['impact']:.3f}", f"{1.96 * p['impact_se']:.3f}")
    out_console.print(table)
    if result["reached"]:
        out_console.print(f"smallest {result['param']} reaching impact {target_impact}: {result['severity']} "
                          f"(impact {result['impact']:.3f}, 95% [{result['ci95'][0]:.3f}, {result['ci95'][1]:.3f}]); {result['message']}")
    else:
        out_console.print(result["message"])
    if out is not None:
        write_json(out, result, kind="calibration")


@app.command()
def certify(
    agent: str = typer.Option(..., help=agent_help("zoo:cartpole-dqn")),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env CartPole-v1"),
    eps: Optional[str] = typer.Option(None, help="ℓ∞ budget in the agent's budget space (fractions allowed). Example: --eps 1/255"),
    eps_grid: Optional[str] = typer.Option(None, "--eps-grid", help="several budgets. Example: --eps-grid 0.02,0.05,0.1"),
    episodes: int = typer.Option(20, min=1, help="episodes per budget (GWC and the clean trajectory for ACR). Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed; episode k uses seed+k. Example: --seed 1"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs side by side. Example: --n-envs 8"),
    awc_max_nodes: int = typer.Option(0, "--awc-max-nodes", min=0, help="also search the absolute worst case (AWC) with this many env steps per episode (0: no search). Example: --awc-max-nodes 5000"),
    awc_horizon: Optional[int] = typer.Option(None, "--awc-horizon", min=1, help="cap episodes at this many steps (for AWC and GWC alike). Example: --awc-horizon 10"),
    out: Optional[Path] = typer.Option(None, help="write the certification as JSON. Example: --out certified.json"),
    store: Path = typer.Option(Path(DEFAULT_STORE_NAME), help="results store (certification runs). Example: --store runs.sqlite"),
    preset: Optional[str] = PRESET, device: str = DEVICE, kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE, input_space: Optional[str] = INPUT_SPACE,
    precision: str = PRECISION, threads: Optional[int] = THREADS, allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """Certified figures from interval bounds: Greedy Worst-Case Reward (GWC), action certification rate (ACR), optionally the Absolute Worst-Case Reward (AWC).

    Example: rlgauntlet certify --agent zoo:cartpole-dqn --env CartPole-v1 --eps-grid 0.02,0.05,0.1 --episodes 20
    """
    from rlgauntlet.experiments.certify import certify as run_certify

    check_outputs(out, store=store, kind="certification")
    KEPT["note"] = f"finished budgets are kept in {store}"
    described = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
    result = run_certify(described, env, eps, eps_grid, episodes, seed, n_envs, store, awc_max_nodes, awc_horizon,
                         threads=threads,
                         on_row=lambda r: console.print(f"  ε = {r['eps']}: done in {r['wall_seconds']:.1f} s"))
    table = Table(title=f"certified figures, {episodes} episodes, ε in {result['rows'][0]['budget_space']} units")
    discrete = "gwc" in result["rows"][0]
    columns = ["ε", "nominal"] + (["GWC", "±sem", "ACR", "score gap", "certified margin"] if discrete
                                  else ["certified action deviation"])
    columns += ["AWC (finished)"] if awc_max_nodes else []
    for col in columns:
        table.add_column(col, justify="right")
    for r in result["rows"]:
        row = [r["eps"], fmt(r["nominal"])]
        row += [fmt(r["gwc"]["return_mean"]), fmt(r["gwc"]["return_sem"]), f"{r['acr']:.1%}",
                f"{r['score_gap_median']:.3g}", f"{r['certified_margin_median']:.3g}"] if discrete else \
            [fmt(r["certified_action_deviation"])]
        if awc_max_nodes:
            awc = r["awc"]
            row.append(f"{'-' if awc['mean_finished'] is None else fmt(awc['mean_finished'])} "
                       f"({sum(awc['finished'])}/{episodes})")
        table.add_row(*row)
    out_console.print(table)
    if out is not None:
        write_json(out, result, kind="certification")
        console.print(f"wrote {out} (runs stored in {store})")


@app.command()
def daylight(
    agent: str = typer.Option(..., help=agent_help("zoo:pong-ppo")),
    env: str = typer.Option(..., help="Gymnasium id (the paper's games: BankHeist, Jamesbond, Pong, Riverraid, TimePilot). Example: --env PongNoFrameskip-v4"),
    out_dir: Path = typer.Option(..., "--out", help="folder for daylight.json and the tables (daylight.md, daylight.tex). Example: --out runs/daylight-pong"),
    setting: List[str] = typer.Option([], "--setting", help="PERTURBATION=SPEC replacing the paper's setting (needed for every perturbation on a game the paper has no row for), repeatable. Example: --setting rotation=rotation:degrees=2"),
    episodes: int = typer.Option(10, min=2, help="episodes per evaluation (clean, the argmin agent, C&W, each perturbation). Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed; episode k uses seed+k. Example: --seed 1"),
    n_envs: int = typer.Option(8, "--n-envs", min=1, help="envs side by side. Example: --n-envs 8"),
    cw: str = typer.Option("", help="the C&W attack's spec (default: the module's CW_SPEC). Example: --cw cw:steps=100,search_steps=6"),
    lpips_weights: Optional[Path] = typer.Option(None, help="LPIPS (AlexNet) weights: the paper's distance beside SSIM/PSNR; nothing is downloaded. Example: --lpips-weights lpips_alex.pt"),
    store: Optional[Path] = typer.Option(None, help="results store (default OUT/daylight.sqlite); a run again continues there. Example: --store runs/daylight.sqlite"),
    preset: Optional[str] = PRESET, device: str = DEVICE, kind: Optional[str] = KIND,
    precision: str = PRECISION, threads: Optional[int] = THREADS, allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """The Daylight paper's Tables 1–6 on one agent: C&W beside brightness & contrast, median blur,
    rotation, shifting, JPEG and perspective at the paper's settings for the game, impact ± its
    standard error and the perceptual distance of each, the paper's rows beside ours.

    Example: rlgauntlet daylight --agent zoo:pong-ppo --env PongNoFrameskip-v4 --out runs/daylight-pong
    """
    from rlgauntlet.common.outputs import check_output, write_text
    from rlgauntlet.experiments.daylight import CW_SPEC, daylight_specs, run_daylight
    from rlgauntlet.report.tables import daylight_latex, daylight_markdown

    settings = {}
    for item in setting:
        name, sep, spec = item.partition("=")
        if not sep or not spec:
            raise UserError(f"--setting {item}: write PERTURBATION=SPEC, e.g. --setting rotation=rotation:degrees=2")
        if name in settings:
            raise UserError(f"--setting {name} is given twice; give each perturbation once")
        settings[name] = spec
    daylight_specs(env, settings)  # an unknown game without settings fails before anything is loaded
    store_path = store or out_dir / "daylight.sqlite"
    paths = {name: out_dir / name for name in ("daylight.json", "daylight.md", "daylight.tex")}
    kinds = {"daylight.json": "daylight result", "daylight.md": "daylight tables", "daylight.tex": "daylight tables"}
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file; give a folder (new, or one of an earlier daylight run)")
    for name, path in paths.items():
        check_output(path, "--out", protect=[store_path], kind=kinds[name], given=out_dir)
    KEPT["note"] = f"finished episodes are kept in {store_path}; run the same command again to go on from there"
    described = agent_spec(agent, preset, kind, None, None, precision, device, allow_pickle, other_env)
    result = run_daylight(described, env, settings, episodes=episodes, seed=seed, n_envs=n_envs, store=store_path,
                          lpips_weights=lpips_weights, cw=cw or CW_SPEC, threads=threads,
                          on_start=lambda label, total: console.print(f"  {label}: {total} episodes"))
    write_json(paths["daylight.json"], result, kind=kinds["daylight.json"])
    write_text(paths["daylight.md"], daylight_markdown(result), kind=kinds["daylight.md"], syntax="markdown")
    write_text(paths["daylight.tex"], daylight_latex(result), kind=kinds["daylight.tex"], syntax="latex")
    out_console.print(daylight_markdown(result), soft_wrap=True)
