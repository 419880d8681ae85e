"""What the benchmark scripts share."""

from __future__ import annotations

import subprocess
import sys
import time

from rlgauntlet.errors import UserError
from rlgauntlet.victims import Victim, load_victim


def zoo_victim_or_exit(name: str, script: str) -> Victim:
    """The zoo agent ``name``, or exit 2 with the reason and the command that trains it."""
    try:
        return load_victim(f"zoo:{name}")
    except UserError as exc:
        print(f"{script}: {exc}; train it with `rlgauntlet train --preset {name}`", file=sys.stderr)
        sys.exit(2)


def table1_row(clean: dict, pgd: dict, fgsm: dict, cert: dict) -> dict:
    """One RADIAL Table 1 cell from an evaluation (clean, PGD-30, FGSM) and a certification row:
    [mean, sem] per column, ACR, and the median score gap and certified margin."""
    def pair(ev: dict) -> list:
        return [ev["return_mean"], ev["return_sem"]]

    return {"nominal": pair(clean), "pgd30": pair(pgd), "fgsm": pair(fgsm), "gwc": pair(cert["gwc"]),
            "acr": cert["acr"], "score_gap_median": cert["score_gap_median"],
            "certified_margin_median": cert["certified_margin_median"]}


class Competitor:
    """A CPU-bound process (a busy loop) running while the block runs: a busy user's machine."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def train_hopper_attackers(agent, methods: list[str], steps: int, rs_steps: int, runs, episodes: int, seed: int = 0,
                           eps: float = 0.075, prefix: str = "hopper", setting: str = "default",
                           select: str = "last") -> dict[str, dict]:
    """Train (or resume) each learned attacker of ``methods`` against Hopper ``agent`` at ``eps``
    (normalized) in ``runs/{prefix}-{label}-eps{eps}``: ``paad:VARIANT`` and ``sarl`` for
    ``steps`` director steps with the director ``setting`` (its name joins the label unless it is
    ``default``) and the director ``select``-ed (``last``, or ``best`` checkpoint: ``-best`` in the
    label, a folder of its own, since a run kept its best only if it did from its start),
    ``robust-sarsa:SARSA_EPS:SARSA_REG`` as a Q function of the agent on
    ``rs_steps`` transitions. Returns, per label, the folder, the threat spec that uses it, the
    training wall time, the learning curve and the attacker's own strength evaluation."""
    from pathlib import Path

    from rlgauntlet.experiments.attacker_job import train_attacker

    attackers = {}
    for entry in methods:
        method, _, variant = entry.partition(":")
        named = "" if method == "robust-sarsa" else (
            ("" if setting == "default" else f"-{setting}") + ("-best" if select == "best" else ""))
        label = f"{method}{'-' + variant.replace(':', '-') if variant else ''}{named}-seed{seed}"
        run_dir = Path(runs) / f"{prefix}-{label}-eps{eps}"
        if method == "robust-sarsa":
            sarsa_eps, sarsa_reg = (float(v) for v in variant.split(":"))
            manifest = train_attacker(agent, "Hopper-v5", method, eps, rs_steps, run_dir, seed=seed,
                                      eval_episodes=episodes, log=print, sarsa_eps=sarsa_eps, sarsa_reg=sarsa_reg)
            spec = f"robust_sarsa:q={run_dir},eps={eps}"
        else:
            manifest = train_attacker(agent, "Hopper-v5", method, eps, steps, run_dir, seed=seed,
                                      variant=variant or None, eval_episodes=episodes, log=print, setting=setting,
                                      select=select)
            spec = f"{method}:attacker={run_dir},eps={eps}"
        attackers[label] = {"run_dir": str(run_dir), "spec": spec, "method": method, "variant": manifest["variant"],
                            "seed": seed, "setting": None if method == "robust-sarsa" else setting,
                            "selected": manifest.get("selected"),
                            "steps": rs_steps if method == "robust-sarsa" else steps,
                            "train_seconds": manifest["train_seconds"], "strength": manifest["strength"],
                            "learning_curve": manifest.get("learning_curve", [])}
    return attackers
