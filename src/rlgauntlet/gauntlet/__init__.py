"""The gauntlet: an env family's whole evaluation protocol on one agent, and the board that
ranks the agents it judged.

What it owns:

* :mod:`~rlgauntlet.gauntlet.protocols`: the versioned protocols (ε grid and units, attacks,
  natural and shift suites, learned attackers, levels);
* :mod:`~rlgauntlet.gauntlet.plan`: the plan of one agent's gauntlet, decided and checked before
  any work (attacker tasks and their cache folders);
* :mod:`~rlgauntlet.gauntlet.race`: the race over each ε's heuristic members on selection
  episodes (successive halving), so that only finalists run in full;
* :mod:`~rlgauntlet.gauntlet.run`: :func:`run_gauntlet` and :func:`~rlgauntlet.gauntlet.run.run_plans`
  (several agents as one plan) and their phases; the plan is frozen, and what a run finds (the
  race's result, the trained attackers) is its :mod:`~rlgauntlet.gauntlet.outcome`;
* :mod:`~rlgauntlet.gauntlet.cache`: the folder beside the store of each agent's trained
  attackers and cached certification and checks;
* :mod:`~rlgauntlet.gauntlet.board`: board files (agents × envs, one protocol and level);
* :mod:`~rlgauntlet.gauntlet.summary`: the worst-case statistics and the stored result, with the
  metric names as constants;
* :mod:`~rlgauntlet.gauntlet.checks`: the false-robustness checks;
* :mod:`~rlgauntlet.gauntlet.leaderboard`: the board's ranking (IQM, bootstrap intervals,
  P(X > Y)); :mod:`rlgauntlet.report.leaderboard` only renders it.

What it may import: the job kit and jobs of :mod:`rlgauntlet.experiments`, and every layer below
them (threats, victims, envs, engine, bounds, metrics, common). Nothing below imports it; the CLI
and the report's rendering use it.

Example:
    >>> from rlgauntlet.gauntlet import get_protocol
    >>> get_protocol("classic").eps_grid[:2]
    ('0.05', '0.1')
"""

from rlgauntlet.gauntlet.plan import GauntletPlan, plan_gauntlet
from rlgauntlet.gauntlet.protocols import PROTOCOLS, Protocol, get_protocol, protocol_for
from rlgauntlet.gauntlet.run import run_gauntlet

__all__ = ["GauntletPlan", "plan_gauntlet", "run_gauntlet", "PROTOCOLS", "Protocol", "get_protocol", "protocol_for"]
