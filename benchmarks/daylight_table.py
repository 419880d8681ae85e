"""Daylight reproduction on the zoo Pong agent: impact and perceptual distance of each natural
perturbation at the paper's Pong settings, the timing table at p = 0.06, and the paper's Pong
numbers beside ours. Resumable: every evaluation goes to the results store.

Writes benchmarks/results/daylight_table.json and prints a Markdown table for
docs/reproduction.md.

Run: python benchmarks/daylight_table.py [--episodes 20] [--timing-episodes 10] [--with-cw]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import zoo_victim_or_exit

from rlgauntlet.envs import make_env
from rlgauntlet.experiments.daylight import CW_SPEC, PAPER
from rlgauntlet.experiments.runs import run_evaluation
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.metrics.impact import ARGMIN_LABEL, ArgminVictim, impact
from rlgauntlet.threats import parse_threat

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "daylight_table.json"
ENV = "PongNoFrameskip-v4"

#: (our spec, paper's impact, paper's LPIPS P_similarity) for Pong, Tables 1–6 (experiments.daylight.PAPER)
PAPER_PONG = {row.spec: (row.impact, row.lpips) for row in PAPER["Pong"].values()}
PAPER_CW_PONG = (PAPER["Pong"]["brightness_contrast"].cw_impact, PAPER["Pong"]["brightness_contrast"].cw_lpips)
#: Table 7, Pong column (p = 0.06)
PAPER_TIMING_PONG = {
    "shift:ti=2,tj=1": 0.114,
    "perspective:norm=3": 0.108,
    "median_blur:kernel=3": 0.12,
    "brightness_contrast:alpha=1.7,beta=40": 0.098,
    "rotation:degrees=3": 0.079,
    "jpeg:quality=10": 0.017,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--timing-episodes", type=int, default=10)
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--store", default=str(HERE / "results" / "daylight.sqlite"))
    parser.add_argument("--with-cw", action="store_true", help="also run C&W (slow on a CPU: 60 gradient steps per env step)")
    args = parser.parse_args()
    victim = zoo_victim_or_exit("pong-ppo", "daylight_table")
    store = ResultsStore(args.store)
    env_info = {"id": ENV, "preset": "atari"}

    def run(spec: str | None, episodes: int, agent=victim, label=None) -> dict:
        threat = parse_threat(spec) if spec else None
        return run_evaluation(store, lambda: make_env(ENV), env_info, agent, threat, episodes, 0,
                              n_envs=args.n_envs, resume=True, label=label)

    clean = run(None, args.episodes)
    argmin = run(None, args.episodes, ArgminVictim(victim), ARGMIN_LABEL)
    smax, smin = clean["return_mean"], argmin["return_mean"]
    rows = []
    specs = list(PAPER_PONG) + ([CW_SPEC] if args.with_cw else [])
    for spec in specs:
        s = run(spec, args.episodes if spec != CW_SPEC else 2)
        t = run(f"{spec},p=0.06", args.timing_episodes) if spec != CW_SPEC else None
        paper = PAPER_PONG.get(spec, PAPER_CW_PONG)
        rows.append({
            "threat": spec,
            "impact": impact(smax, s["return_mean"], smin),
            "generalized_impact": impact(smax, s["return_mean"], -21.0),
            "impact_se": s["return_sem"] / abs(smax - smin) if smax != smin else None,
            "return_mean": s["return_mean"],
            "ssim": s["ssim_mean"], "psnr": s["psnr_mean"], "linf": s["linf_mean"], "l2": s["l2_mean"],
            "paper_impact": paper[0], "paper_lpips": paper[1],
            "timing_p006_impact": impact(smax, t["return_mean"], smin) if t else None,
            "timing_p006_e_adv": (sum(t["e_adv"]) / len(t["e_adv"])) if t else None,
            "paper_timing_p006_impact": PAPER_TIMING_PONG.get(spec),
        })
    report = {"agent": victim.description, "env": ENV, "episodes": args.episodes, "score_max": smax,
              "score_min": smin, "rows": rows,
              "note": "The paper's perceptual distance is LPIPS; ours is SSIM/PSNR unless LPIPS weights are supplied."}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"clean {smax:.2f}, argmin agent {smin:.2f}\n")
    print("| perturbation | impact (ours) | impact (paper) | SSIM | PSNR dB | LPIPS (paper) | impact p=0.06 (ours) | (paper) |")
    print("|---|---|---|---|---|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in rows:
        print(f"| `{r['threat']}` | {fmt(r['impact'])} | {r['paper_impact']} | {fmt(r['ssim'])} | {fmt(r['psnr'])} | "
              f"{r['paper_lpips']} | {fmt(r['timing_p006_impact'])} | {r['paper_timing_p006_impact'] or '-'} |")


if __name__ == "__main__":
    main()
