"""The published agents' natural returns and their authors' attackers, replayed, against the
READMEs: each release of the catalogue on its mapped Gymnasium task, 50 episodes (env seeds
0–49, deterministic), clean and under ``released_attacker`` at the paper's ε (where an attacker
is released beside it). The table of docs/decisions.md ("the field's published agents") comes
from here.

Needs the releases' clones under ``$RLGAUNTLET_RELEASES`` (``rlgauntlet published list``).
Writes ``benchmarks/results/published_natural.json`` (per release: natural and attacked mean
± SEM, the README's numbers), updated after every release, resumable through its store.

Run: python benchmarks/published_natural.py [--names lstm-ppo-hopper ...] [--episodes 50]
     [--store runs/published/natural.sqlite] [--mujoco15]

``--mujoco15`` runs each release on its task as MuJoCo 1.5 simulated gym's -v2 of it
(``HopperMuJoCo15-v4`` ..., ``envs.mujoco15``) instead of its catalogued env, and writes
``benchmarks/results/published_natural_mujoco15.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "published_natural.json"
OUT_MUJOCO15 = HERE / "results" / "published_natural_mujoco15.json"


def measure(name: str, episodes: int, store: Path, mujoco15: bool = False) -> dict:
    """One release: natural and the authors' attacker over ``episodes`` episodes (on its task's
    MuJoCo 1.5 form with ``mujoco15``)."""
    from rlgauntlet.envs.presets import mujoco15_form
    from rlgauntlet.experiments.evaluate import evaluate
    from rlgauntlet.published import local_file, release

    entry = dict(release(name))
    if mujoco15:
        entry["env"] = mujoco15_form(entry["env"]) or entry["env"]
    threats = []
    if entry.get("attacker"):
        threats.append(f"released_attacker:path={local_file(entry, 'attacker')},eps={entry['eps']}")
    report = evaluate(f"published:{name}", entry["env"], threats, episodes=episodes, seed=0, n_envs=10,
                      store=store, resume=True, impact=False, threads=1)
    clean, *attacked = report.evaluations
    row = {"name": name, "env": entry["env"], "eps": entry["eps"], "policy": entry["policy"],
           "natural": clean["return_mean"], "natural_sem": clean["return_sem"], "episodes": clean["episodes"],
           "authors_attack": attacked[0]["return_mean"] if attacked else None,
           "authors_attack_sem": attacked[0]["return_sem"] if attacked else None,
           "readme": entry.get("readme")}
    return row


def table(rows: list[dict]) -> str:
    """The docs/decisions.md table."""
    def num(value, sem=None) -> str:
        if value is None:
            return "–"
        return f"{value:.0f}" if sem is None else f"{value:.0f} ± {sem:.0f}"

    lines = ["| agent | mapped to | natural here | README natural | authors' attacker here | README strongest |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        readme = r["readme"] or {}
        lines.append(f"| {r['name']} | {r['env']} | {num(r['natural'], r['natural_sem'])} | "
                     f"{num(readme.get('natural'))} | {num(r['authors_attack'], r['authors_attack_sem'])} | "
                     f"{num(readme.get('strongest_attack'))} |")
    return "\n".join(lines)


def main() -> None:
    from rlgauntlet.common.outputs import write_json
    from rlgauntlet.errors import UserError
    from rlgauntlet.published import local_file, releases

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=[e["name"] for e in releases()])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--store", type=Path, default=Path("runs/published/natural.sqlite"))
    parser.add_argument("--mujoco15", action="store_true", help="on each task's MuJoCo 1.5 form (envs.mujoco15)")
    args = parser.parse_args()
    out = OUT_MUJOCO15 if args.mujoco15 else OUT
    try:
        local_file(releases()[0])
    except UserError as exc:  # the weights are the user's local copies, never downloaded
        print(f"published_natural: skipped, {exc}")
        return
    args.store.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out.read_text()) if out.exists() else {}
    rows = {r["name"]: r for r in results.get("rows", [])}
    for name in args.names:
        rows[name] = measure(name, args.episodes, args.store, args.mujoco15)
        print(table([rows[name]]).splitlines()[-1], flush=True)
        order = [e["name"] for e in releases()]
        write_json(out, {"episodes": args.episodes, "rows": sorted(rows.values(), key=lambda r: order.index(r["name"]))},
                   kind="benchmark")  # after every release: a long run keeps what it finished
    print(table([rows[n] for n in args.names]))


if __name__ == "__main__":
    main()
