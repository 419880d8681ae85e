"""The PA-AD paper's robust-agent table (Tables 3 and 6) on Hopper at ε = 0.075 (normalized).

Rows: vanilla PPO (zoo:hopper-ppo), SA-PPO, ATLA-PPO and PA-ATLA-PPO, each the zoo agent when
the zoo has it, else the finished run of its preset under ``--runs`` (``rlgauntlet train --preset
hopper-sa-ppo`` writes ``runs/hopper-sa-ppo``). Columns: natural, Random, MaxDiff (with restarts),
Robust Sarsa (the strongest of the Q functions of ``--rs``, as the official scan reports it),
SA-RL and PA-AD (the ``directional`` variant, the official MuJoCo form). **Every learned attack is
trained against that very agent**: its folder is keyed by the agent file's sha256, so a retrained
agent gets new attackers. Then Avg (Table 3: the mean of the five attack columns), Avg of the
learned ones (Table 6: RS, SA-RL, PA-AD) and the worst column. 50 episodes per cell, episode k
on seed k, as the paper does.

Resumable: attackers resume from their folders and evaluations from the results store
(``--store``). Writes benchmarks/results/robust_hopper.json (with the paper's rows beside ours)
and prints the table.

Run: python benchmarks/robust_hopper.py [--rows vanilla sa-ppo atla-ppo pa-atla-ppo]
         [--attack-steps 300000] [--episodes 50] [--only-train] [--allow-unfinished]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from _common import train_hopper_attackers

from rlgauntlet import evaluate
from rlgauntlet.common.hashing import sha256_file
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.zoo import load_manifest

EPS = 0.075
ROWS = {"vanilla": "hopper-ppo", "sa-ppo": "hopper-sa-ppo", "atla-ppo": "hopper-atla-ppo",
        "pa-atla-ppo": "hopper-pa-atla-ppo"}
ATTACKS = ("random", "maxdiff", "robust_sarsa", "sarl", "paad")
#: the paper's Hopper rows at ε = 0.075: Table 3 (5M steps) and Table 6 (2M steps), mean ± std
PAPER = {
    "table3_5M": {"sa-ppo": {"natural": "3705±2", "random": "2710±801", "maxdiff": "2652±835", "robust_sarsa": "1130±42",
                             "sarl": "1076±791", "paad": "856±21", "avg": 1684.8},
                  "atla-ppo": {"natural": "3291±600", "random": "3165±576", "maxdiff": "2814±725",
                               "robust_sarsa": "2244±618", "sarl": "1772±802", "paad": "1232±350", "avg": 2245.4},
                  "pa-atla-ppo": {"natural": "3449±237", "random": "3325±239", "maxdiff": "3145±546",
                                  "robust_sarsa": "3002±129", "sarl": "1529±284", "paad": "2521±325", "avg": 2704.4}},
    "table6_2M": {"atla-ppo": {"natural": "1763±818", "robust_sarsa": "1349±174", "sarl": "1172±344", "paad": "477±30",
                               "avg_learned": 999.3},
                  "pa-atla-ppo": {"natural": "2164±121", "robust_sarsa": "1720±490", "sarl": "1119±123",
                                  "paad": "1024±188", "avg_learned": 1287.7}},
    "table2_vanilla": {"natural": "3167±542", "random": "2101±793", "maxdiff": "1410±655", "robust_sarsa": "794±238",
                       "sarl": "636±9", "paad": "160±136"},
}


def resolve_agent(row: str, runs: Path, allow_unfinished: bool) -> tuple[AgentSpec | None, dict]:
    """The agent of ``row``: the zoo's, else its preset's run under ``runs`` (an ATLA run keeps
    the agent in ``checkpoint/agent``). Returns (spec or None, what was found)."""
    name = ROWS[row]
    if name in load_manifest():
        return AgentSpec(agent=f"zoo:{name}"), {"agent": f"zoo:{name}", "source": "zoo"}
    ckpt = runs / name / "checkpoint"
    folder = ckpt / "agent" if (ckpt / "agent").is_dir() else ckpt
    if not (folder / "model.zip").exists():
        return None, {"missing": f"no zoo:{name} and no run in {runs / name}; train it: rlgauntlet train --preset {name}"}
    progress = json.loads((ckpt / "progress.json").read_text()) if (ckpt / "progress.json").exists() else {}
    steps = progress.get("agent_steps") or progress.get("num_timesteps")
    history = progress.get("history") or [{}]
    steps = steps or history[-1].get("agent_steps") or history[-1].get("steps")
    found = {"agent": f"sb3:{folder / 'model.zip'}", "source": "run", "agent_steps": steps,
             "finished": bool(progress.get("finished"))}
    if not found["finished"] and not allow_unfinished:
        return None, {**found, "missing": f"{runs / name} is not finished ({steps} agent steps); resume it with "
                                          f"rlgauntlet train --preset {name}, or pass --allow-unfinished"}
    vecnormalize = folder / "vecnormalize.pkl"
    return AgentSpec(agent=found["agent"], vecnormalize=str(vecnormalize) if vecnormalize.exists() else None), found


def summarise(columns: dict[str, dict]) -> dict:
    """Avg over the five attacks (Table 3), over the learned ones (Table 6) and the worst column."""
    means = {name: columns[name]["mean"] for name in ATTACKS}
    return {"avg": float(np.mean(list(means.values()))),
            "avg_learned": float(np.mean([means[n] for n in ("robust_sarsa", "sarl", "paad")])),
            "worst": min(means.values()), "worst_attack": min(means, key=means.get)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--attack-steps", type=int, default=300_000, help="SA-RL and PA-AD training steps per agent")
    parser.add_argument("--rs", nargs="+", default=["0.02:0.1", "0.05:1.0", "0.1:1.0", "0.2:3.0"],
                        help="Robust Sarsa Q functions (SARSA_EPS:SARSA_REG), the strongest is reported")
    parser.add_argument("--rs-steps", type=int, default=30 * 2048, help="transitions per Robust Sarsa Q (official)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="where the presets' training runs are")
    parser.add_argument("--attackers", type=Path, default=Path("runs/attackers/robust-hopper"))
    parser.add_argument("--store", type=Path, default=Path("runs/robust_hopper.sqlite"))
    parser.add_argument("--allow-unfinished", action="store_true", help="take a run that has not reached its budget")
    parser.add_argument("--only-train", action="store_true", help="train (or resume) the attackers and stop")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/robust_hopper.json"))
    args = parser.parse_args()
    out = json.loads(args.out.read_text()) if args.out.exists() else {}
    out.update({"benchmark": "robust_hopper", "eps": EPS, "budget_space": "normalized", "episodes": args.episodes,
                "attack_steps": args.attack_steps, "rs": args.rs, "rs_steps": args.rs_steps, "paper": PAPER})
    rows = out.setdefault("rows", {})
    for row in args.rows:
        spec, found = resolve_agent(row, args.runs, args.allow_unfinished)
        if spec is None:
            print(f"robust_hopper: {row}: {found['missing']}", file=sys.stderr)
            continue
        path = Path(spec.agent.split(":", 1)[1]) if spec.agent.startswith("sb3:") else None
        sha = sha256_file(path) if path else load_manifest()[ROWS[row]]["sha256"]
        methods = ["paad:directional", "sarl"] + [f"robust-sarsa:{rs}" for rs in args.rs]
        attackers = train_hopper_attackers(spec, methods, args.attack_steps, args.rs_steps,
                                           args.attackers / f"{row}-{sha[:12]}", 5, eps=EPS)
        record = {**found, "sha256": sha, "attackers": attackers}
        if not args.only_train:
            specs = [f"random:eps={EPS}", f"maxdiff:eps={EPS},restarts=3"] + [a["spec"] for a in attackers.values()]
            report = evaluate(spec, "Hopper-v5", specs, episodes=args.episodes, seed=0, n_envs=10, impact=False,
                              store=args.store, resume=True)
            by_spec = {ev["spec"]: {"mean": ev["return_mean"], "std": ev["return_std"], "sem": ev["return_sem"],
                                    "linf_max": ev["linf_max"]} for ev in report.evaluations}
            rs = {label: by_spec[a["spec"]] for label, a in attackers.items() if a["method"] == "robust-sarsa"}
            strongest_rs = min(rs, key=lambda label: rs[label]["mean"])
            columns = {"natural": by_spec["clean"], "random": by_spec[specs[0]], "maxdiff": by_spec[specs[1]],
                       "robust_sarsa": {**rs[strongest_rs], "q": strongest_rs}, "sarl": by_spec[attackers["sarl-seed0"]["spec"]],
                       "paad": by_spec[attackers["paad-directional-seed0"]["spec"]]}
            record.update({"columns": columns, "robust_sarsa_all": rs, **summarise(columns)})
        rows[row] = record
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")  # after every row: nothing computed is lost
    print(f"{'agent':12s} " + " ".join(f"{c:>12s}" for c in ("natural", *ATTACKS, "avg", "worst")))
    for row, record in rows.items():
        if "columns" in record:
            cells = [f"{record['columns'][c]['mean']:12.0f}" for c in ("natural", *ATTACKS)]
            print(f"{row:12s} " + " ".join(cells) + f" {record['avg']:12.0f} {record['worst']:12.0f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
