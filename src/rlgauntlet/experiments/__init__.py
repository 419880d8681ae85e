"""Experiments: the job kit (the agent spec and job context in ``agents``, one run in ``runs``,
the SQLite ``store``, the sweep's plan and cells in ``sweep``) and the jobs built on it:
evaluate, certify, calibrate, spectrum, ood, attackers.

May import: training, engine, threats, bounds, metrics, victims, envs, zoo, common, errors,
version. Imported by: gauntlet, report, cli."""
