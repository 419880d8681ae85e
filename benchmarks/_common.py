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
